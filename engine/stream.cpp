#include "engine/stream.h"

#include <atomic>
#include <cstdio>
#include <unordered_map>

#include "engine/allocator.h"
#include "engine/cuda_graph.h"
#include "engine/host_sync.h"
#include "kernels/cuda_check.h"

namespace kestrel {
namespace {

// Current stream per device for this thread; absent = the default stream.
thread_local std::unordered_map<int, Stream> t_current;

// The work queued on a stream about to be destroyed: an event recorded on it, which the device's
// allocator tests before it gives the stream's blocks back (a never-reused id keys them, so no
// other stream takes them meanwhile). Without an event (it could not be made) the stream is
// synchronised instead.
void retire(Device device, cudaStream_t handle, uint64_t id) noexcept {
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(event, handle) != cudaSuccess) {
    cudaGetLastError();
    if (event) cudaEventDestroy(event);
    event = nullptr;
    cudaStreamSynchronize(handle);
    cudaGetLastError();
  }
  cudaStreamDestroy(handle);  // returns at once; queued work still completes
  auto done = std::shared_ptr<CUevent_st>(event, [](cudaEvent_t e) {
    if (e) cudaEventDestroy(e);
  });
  try {
    allocator_retire_stream(device, id, [done] {
      if (!done) return true;
      const cudaError_t e = cudaEventQuery(done.get());
      if (e == cudaErrorNotReady) return false;
      cudaGetLastError();  // an error: the work will not run any more either
      return true;
    });
  } catch (const std::exception& e) {  // a destructor: report, never throw
    std::fprintf(stderr, "kestrel: retiring stream %llu: %s\n", static_cast<unsigned long long>(id), e.what());
  }
}

}  // namespace

Stream Stream::create(Device device, int priority) {
  KESTREL_CHECK(device.is_cuda(), "Stream::create needs a CUDA device, got ", device.str());
  static std::atomic<uint64_t> next_id{1};
  DeviceGuard guard(device);
  Stream s;
  s.device_ = device;
  KESTREL_CUDA_CHECK(cudaStreamCreateWithPriority(&s.handle_, cudaStreamNonBlocking, priority));
  s.id_ = next_id++;
  const cudaStream_t h = s.handle_;
  const uint64_t id = s.id_;
  s.owner_ = std::shared_ptr<void>(nullptr, [device, h, id](void*) { retire(device, h, id); });
  return s;
}

Stream Stream::default_stream(Device device) {
  Stream s;
  s.device_ = device;
  return s;
}

void Stream::synchronize() const {
  refuse_during_capture(*this, "Stream::synchronize",
                        "synchronise before capture_begin or after replay()");
  note_host_sync("Stream::synchronize");
  if (!device_.is_cuda()) return;
  DeviceGuard guard(device_);
  KESTREL_CUDA_CHECK(cudaStreamSynchronize(handle_));
}

Stream current_stream(Device device) {
  if (!device.is_cuda()) return Stream();
  auto it = t_current.find(device.index);
  return it == t_current.end() ? Stream::default_stream(device) : it->second;
}

void set_current_stream(const Stream& stream) {
  if (stream.device().is_cuda()) t_current[stream.device().index] = stream;
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() { set_current_stream(previous_); }

namespace {

// CUDA's answer to waiting for or querying an event from inside a capture, or an event recorded
// in one, in words.
void check_event_call(cudaError_t e, const char* call) {
  switch (e) {
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureImplicit:
      (void)cudaGetLastError();
      KESTREL_FAIL(call, " during a CUDA graph capture, or on an event recorded in one (",
                   cudaGetErrorString(e), "): a host synchronisation cannot be captured and such "
                   "an event never completes on the host; wait on the host before capture_begin "
                   "or after replay(), and order captured work with Event::wait");
    case cudaErrorStreamCaptureIsolation:
      (void)cudaGetLastError();
      KESTREL_FAIL(call, " inside a CUDA graph capture on an event recorded outside it (",
                   cudaGetErrorString(e), "): a capture may only wait on events recorded in it; "
                   "make the capturing stream wait before capture_begin");
    default:
      KESTREL_CUDA_CHECK(e);
  }
}

}  // namespace

Event::Event(Device device, bool timing) : device_(device) {
  if (!device.is_cuda()) return;
  DeviceGuard guard(device);
  KESTREL_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, timing ? 0 : cudaEventDisableTiming));
  cudaEvent_t h = handle_;
  owner_ = std::shared_ptr<void>(nullptr, [h](void*) { cudaEventDestroy(h); });
}

void Event::record(const Stream& stream) {
  if (!handle_) return;
  DeviceGuard guard(device_);
  KESTREL_CUDA_CHECK(cudaEventRecord(handle_, stream.handle()));
}

void Event::wait(const Stream& stream) const {
  if (!handle_) return;
  DeviceGuard guard(stream.device());
  check_event_call(cudaStreamWaitEvent(stream.handle(), handle_, 0), "Event::wait");
}

void Event::synchronize() const {
  note_host_sync("Event::synchronize");
  if (handle_) check_event_call(cudaEventSynchronize(handle_), "Event::synchronize");
}

void Event::wait_before_reuse() const noexcept {
  if (!handle_) return;
  const cudaError_t e = cudaEventSynchronize(handle_);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "kestrel: waiting for an asynchronous copy before reusing its memory: %s\n",
                 cudaGetErrorString(e));
  }
}

bool Event::query() const {
  if (!handle_) return true;
  cudaError_t e = cudaEventQuery(handle_);
  if (e == cudaErrorNotReady) return false;
  check_event_call(e, "Event::query");
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  KESTREL_CUDA_CHECK(cudaEventElapsedTime(&ms, handle_, end.handle_));
  return ms;
}

}  // namespace kestrel
