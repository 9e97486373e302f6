#include "engine/cuda_graph.h"

#include "base/error.h"
#include "engine/allocator.h"
#include "kernels/cuda_check.h"

namespace kestrel {

class GraphPool {
 public:
  explicit GraphPool(Device device) : device_(device), id_(allocator_create_pool(device)) {}
  // Free segments go back now, the others when their last tensor is gone.
  ~GraphPool() { allocator_release_pool(device_, id_); }
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  Device device() const { return device_; }
  PoolId id() const { return id_; }

 private:
  Device device_;
  PoolId id_;
};

namespace {

// The graph this thread is capturing (CUDA's thread-local capture mode: one thread begins and
// ends it), so that a refusal on this thread is remembered even if CUDA let the capture go on.
thread_local CudaGraph* t_capturing = nullptr;

std::string describe(const Stream& stream) {
  return str("stream ", static_cast<const void*>(stream.handle()), " of ", stream.device().str());
}

// The message for a capture that cudaStreamEndCapture reports as failed.
std::string capture_failure(const Stream& stream, cudaError_t e) {
  const std::string head = str("CUDA graph capture on ", describe(stream), " failed (",
                               "cudaStreamEndCapture: ", cudaGetErrorString(e), "): ");
  switch (e) {
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
      return head +
             "a host synchronisation or an uncapturable call happened during capture (item(), "
             "to_vector(), a blocking or pinned host copy, synchronize(), an event query, a "
             "cudaMalloc outside the allocator, a cuDNN algorithm search); capture after a "
             "warm-up step, do host copies outside the capture and read results after replay()";
    case cudaErrorStreamCaptureUnjoined:
      return head +
             "work forked onto another stream during the capture (it waited on an event recorded "
             "in the capture) was not joined back: make the capturing stream wait for that "
             "stream's last work before capture_end (for a collective: its Work::wait())";
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureMerge:
      return head +
             "work of the capture depended on work outside it, or on another capture; only wait "
             "on events recorded before capture_begin or inside this capture";
    default:
      return head + "see the CUDA error above";
  }
}

}  // namespace

std::shared_ptr<GraphPool> make_graph_pool(Device device) {
  KESTREL_CHECK(device.is_cuda(), "make_graph_pool: CUDA graph pools live on a CUDA device, got ",
                device.str());
  return std::make_shared<GraphPool>(device);
}

bool is_capturing(const Stream& stream) {
  if (!stream.device().is_cuda() || stream.handle() == nullptr) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KESTREL_CUDA_CHECK(cudaStreamIsCapturing(stream.handle(), &status));
  return status != cudaStreamCaptureStatusNone;
}

void refuse_during_capture(const Stream& stream, const std::string& what,
                           const std::string& advice) {
  if (!is_capturing(stream)) return;
  // Querying a capturing stream is illegal: CUDA answers with an error and invalidates the
  // capture, so that capture_end cannot instantiate a graph without the refused work.
  (void)cudaStreamQuery(stream.handle());
  (void)cudaGetLastError();
  if (t_capturing && t_capturing->stream_ == stream && t_capturing->refused_.empty())
    t_capturing->refused_ = what;
  KESTREL_FAIL(what, " cannot run during a CUDA graph capture (", describe(stream),
               " is being captured); the capture is invalidated and capture_end will throw. ",
               advice);
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  // A thread swaps its own mode; CUDA keeps it per thread, with or without a capture.
  cudaThreadExchangeStreamCaptureMode(&previous_);
}

RelaxedCaptureMode::~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }

CudaGraph::CudaGraph(Device device, std::shared_ptr<GraphPool> pool)
    : device_(device), pool_(std::move(pool)) {
  KESTREL_CHECK(device.is_cuda(), "CudaGraph: CUDA graphs need a CUDA device, got ", device.str());
  if (!pool_) pool_ = make_graph_pool(device);
  KESTREL_CHECK(pool_->device() == device, "CudaGraph on ", device.str(),
                ": the shared pool belongs to ", pool_->device().str(),
                "; graphs share a pool only on one device");
}

CudaGraph::~CudaGraph() {
  if (capturing_) end_capture_quietly();
  if (exec_) cudaGraphExecDestroy(exec_);
}

void CudaGraph::capture_begin(const Stream& stream) {
  KESTREL_CHECK(!capturing_ && !exec_, "CudaGraph::capture_begin: this graph ",
                capturing_ ? "is capturing already" : "was captured already",
                "; make a new CudaGraph (sharing this one's pool()) for another capture");
  KESTREL_CHECK(!t_capturing, "CudaGraph::capture_begin: this thread is capturing another graph "
                "(on ", describe(t_capturing->stream_), "); capture_end it first");
  KESTREL_CHECK(stream.device() == device_, "CudaGraph::capture_begin: the graph is on ",
                device_.str(), ", the stream on ", stream.device().str());
  KESTREL_CHECK(stream.handle() != nullptr, "CudaGraph::capture_begin: the legacy default stream "
                "of ", device_.str(), " cannot be captured (CUDA refuses it); create a stream "
                "with Stream::create and make it current with StreamGuard");
  KESTREL_CHECK(current_stream(device_) == stream, "CudaGraph::capture_begin: ",
                describe(stream), " is not this thread's current stream; make it current first "
                "(StreamGuard): ops enqueue on the current stream and allocate for it");
  KESTREL_CHECK(!is_capturing(stream), "CudaGraph::capture_begin: ", describe(stream),
                " is being captured already");
  DeviceGuard guard(device_);
  allocator_begin_pool(device_, pool_->id(), stream.id());
  const cudaError_t e = cudaStreamBeginCapture(stream.handle(), cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    allocator_end_pool(device_, pool_->id(), stream.id());
    KESTREL_FAIL("CudaGraph::capture_begin: cudaStreamBeginCapture on ", describe(stream),
                 " failed: ", cudaGetErrorString(e));
  }
  stream_ = stream;
  capturing_ = true;
  refused_.clear();
  t_capturing = this;
}

void CudaGraph::capture_end() {
  KESTREL_CHECK(capturing_, "CudaGraph::capture_end without a capture in progress; call "
                "capture_begin first");
  KESTREL_CHECK(t_capturing == this, "CudaGraph::capture_end must run on the thread that called "
                "capture_begin (the capture is thread-local)");
  DeviceGuard guard(device_);
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_.handle(), &graph);
  capturing_ = false;
  t_capturing = nullptr;
  allocator_end_pool(device_, pool_->id(), stream_.id());
  if (e != cudaSuccess || !refused_.empty()) {
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    if (!refused_.empty())
      KESTREL_FAIL("CUDA graph capture on ", describe(stream_), " failed: ", refused_,
                   " happened during capture (a host synchronisation or an uncapturable call); "
                   "capture after a warm-up step, do host copies outside the capture and read "
                   "results after replay()");
    KESTREL_FAIL(capture_failure(stream_, e));
  }
  // Kernel nodes keep the priority of the stream they were captured from: the collectives
  // captured on the high-priority communication stream stay ahead of compute, as in eager mode.
  const cudaError_t ie =
      cudaGraphInstantiate(&exec_, graph, cudaGraphInstantiateFlagUseNodePriority);
  cudaGraphDestroy(graph);  // the executable graph is independent of it
  if (ie != cudaSuccess) {
    exec_ = nullptr;
    (void)cudaGetLastError();
    KESTREL_FAIL("CudaGraph::capture_end: cudaGraphInstantiate of the graph captured on ",
                 describe(stream_), " failed: ", cudaGetErrorString(ie));
  }
}

void CudaGraph::replay(const Stream& stream) const {
  KESTREL_CHECK(exec_, "CudaGraph::replay: nothing to replay; capture_begin, run the work, then "
                "capture_end first");
  KESTREL_CHECK(stream.device() == device_, "CudaGraph::replay: the graph is on ", device_.str(),
                ", the stream on ", stream.device().str());
  DeviceGuard guard(device_);
  KESTREL_CUDA_CHECK(cudaGraphLaunch(exec_, stream.handle()));
}

void CudaGraph::end_capture_quietly() {
  DeviceGuard guard(device_);
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_.handle(), &graph) == cudaSuccess && graph)
    cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  capturing_ = false;
  if (t_capturing == this) t_capturing = nullptr;
  try {
    allocator_end_pool(device_, pool_->id(), stream_.id());
  } catch (const std::exception&) {
    // The route is always in place here; a destructor must not throw regardless.
  }
}

}  // namespace kestrel
