// Blocking host reads, made visible. A training step must enqueue all its work and let the host
// run ahead; every call after which the host holds a value the device computed, and so on CUDA
// must wait for the device, reports itself here:
//   Stream::synchronize, Event::synchronize, a device-to-host copy_ that is not asynchronous
//   (Tensor::to(cpu) of a CUDA tensor included), Tensor::item, to_vector, to_double_vector, and
//   the process groups' Work::synchronize (and a Work::wait that blocks the host, NCCL's barrier).
// A HostSyncGuard on the calling thread counts them, or turns the first into an Error, so a test
// can run a step and prove that it issued none.
//
// On the CPU every tensor is already on the host and these calls return at once: they are
// counted all the same (they are the calls that would block on CUDA), and code paths that exist
// only for CPU tensors (a CPU kernel's driver reading a CPU scalar) read memory directly instead
// of through these calls. Work::wait() is not counted: it orders later device work after a
// collective (a stream wait for NCCL); with Gloo on CPU tensors it blocks the issuing thread, the
// CPU being both host and device.
//
// The state is per thread, like NoGradGuard: ranks running as threads each see their own.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

class HostSyncGuard {
 public:
  enum class Policy { Count, Throw };
  explicit HostSyncGuard(Policy policy = Policy::Throw);
  ~HostSyncGuard();
  HostSyncGuard(const HostSyncGuard&) = delete;
  HostSyncGuard& operator=(const HostSyncGuard&) = delete;

  // Blocking reads seen in this scope (Count; with Throw the first one throws instead), and what
  // each one was ("Tensor::item", "Stream::synchronize", ...).
  int64_t count() const { return static_cast<int64_t>(sites_.size()); }
  const std::vector<std::string>& sites() const { return sites_; }

 private:
  friend void note_host_sync(const char* what);
  Policy policy_;
  std::vector<std::string> sites_;
  HostSyncGuard* outer_;
};

// Called by every blocking read: recorded by the innermost guard of this thread (an Error under
// Policy::Throw, naming the call); nothing without a guard.
void note_host_sync(const char* what);

}  // namespace kestrel
