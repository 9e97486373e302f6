// CUDA graphs: the work a thread enqueues on a stream is captured once (cudaStreamBeginCapture ...
// cudaStreamEndCapture, then cudaGraphInstantiate) and replayed with one cudaGraphLaunch, as
// PyTorch's torch.cuda.CUDAGraph does.
//
// Memory. From capture_begin to capture_end, every allocation for the capturing stream comes from
// the graph's private pool in the device's caching allocator (engine/caching_allocator.h), and a
// block freed during the capture goes back to that pool only, where later allocations of the same
// capture may take it again (a replay runs the work in capture order). The pool's memory is the
// graph's: nothing outside the pool ever gets it, and empty_cache() leaves it alone while the pool
// lives. Graphs that never run at the same time (one training step's graphs for different shapes)
// may share a pool: pass the first one's pool() to the next. A pool is released when the last
// graph using it and the last tensor in it are gone.
//
// What the caller keeps alive: a replay reads and writes the very addresses the capture used.
// Tensors allocated before capture_begin that the captured work reads or writes (inputs, weights,
// optimizer state) must live, unmoved, as long as the graph is replayed; update them in place
// (copy_) between replays. Tensors allocated during the capture and alive after it (outputs) hold
// the pool's memory; the next replay overwrites them.
//
// Capture mode: cudaStreamCaptureModeThreadLocal. CUDA forbids "potentially unsafe" calls (it
// names cudaMalloc: not enqueued on a stream, so not part of the graph) on a thread that has a
// capture in progress, unless the capture began in cudaStreamCaptureModeRelaxed; ThreadLocal
// leaves other threads alone (the NCCL watchdog querying events, loader threads allocating pinned
// memory), where the default Global mode would make their calls fail. The allocator needs
// cudaMalloc for a pool's new segment during a capture: it switches only the calling thread to
// Relaxed around that one call (RelaxedCaptureMode), which CUDA documents for exactly this
// (cudaThreadExchangeStreamCaptureMode; PyTorch's allocator does the same). The segment belongs
// to the pool, which outlives the graph, so the graph stays valid. Any other unsafe call on the
// capturing thread still invalidates the capture, and capture_end says so.
//
// Errors. Work that cannot be captured (a host synchronisation, a copy to or from host memory,
// cuDNN's algorithm search) is refused with an Error naming it, and the capture is invalidated:
// capture_end then throws, ends the capture and leaves the stream usable. A CudaGraph destroyed
// during its capture (an exception unwinding past it) ends the capture too. Capture after a
// warm-up step, so that cuDNN has chosen its algorithms and the allocator's general pool holds
// the step's inputs.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "engine/device.h"
#include "engine/stream.h"

namespace kestrel {

// Memory shared by graphs that never run at the same time (e.g. one training step's graphs for
// different shapes); released when the last graph using it and the last tensor in it are gone.
class GraphPool;
std::shared_ptr<GraphPool> make_graph_pool(Device device);

// cudaStreamIsCapturing: true while the stream is being captured (also after the capture was
// invalidated, until it ends); false on the CPU and for the legacy default stream.
bool is_capturing(const Stream& stream);

// For work that cannot be captured: when `stream` is being captured, invalidates that capture (so
// that capture_end fails instead of instantiating a graph without the work) and throws an Error
// saying that `what` cannot run during a CUDA graph capture, followed by `advice`. Returns
// otherwise.
void refuse_during_capture(const Stream& stream, const std::string& what,
                           const std::string& advice);

// Lets the calling thread make calls that a capture in progress on it would forbid, for the scope:
// cudaMalloc for a pool's segment, waiting for an event recorded before the capture. Does nothing
// without a capture.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

class CudaGraph {
 public:
  explicit CudaGraph(Device device, std::shared_ptr<GraphPool> pool = nullptr);  // own pool if null
  ~CudaGraph();  // ends a capture still in progress
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts capturing the calling thread's work on `stream` (a non-default CUDA stream of the
  // device; the caller makes it the current stream, e.g. with StreamGuard). From here until
  // capture_end, allocations on that stream come from the graph's pool, and memory freed in the
  // capture goes back to that pool only. A graph captures once; a thread captures one graph at a
  // time.
  void capture_begin(const Stream& stream);
  // Ends capture and instantiates the executable graph; on the thread that called capture_begin.
  // Throws (the capture ended, the stream usable) when the capture failed.
  void capture_end();
  void replay(const Stream& stream) const;  // cudaGraphLaunch on `stream`
  bool ready() const { return exec_ != nullptr; }  // captured and instantiated
  const std::shared_ptr<GraphPool>& pool() const { return pool_; }

 private:
  friend void refuse_during_capture(const Stream&, const std::string&, const std::string&);
  void end_capture_quietly();  // for the destructor: ends the capture, ignores errors

  Device device_;
  std::shared_ptr<GraphPool> pool_;
  Stream stream_;               // the capture's stream, while capturing
  bool capturing_ = false;
  std::string refused_;         // the first refusal during this capture on the capturing thread
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace kestrel
