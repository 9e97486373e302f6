// The host state of a training step's participants, taken before a step that may never run on the
// device and put back if it does not. A CUDA graph capture enqueues a whole step without running
// any of it; when the capture fails, the host must look as if the step had not begun: no status
// entry for the batch, DDP's hooks disarmed, the loss scaler not marked as unscaled or stepped.
// Each participant names its own host state (a Snapshot type with snapshot() and restore());
// TrainStep takes one StepSnapshot before a capture, and a failed capture restores them all,
// in the reverse order of taking.
#pragma once
#include <functional>
#include <utility>
#include <vector>

namespace kestrel::yolo {

class StepSnapshot {
 public:
  // A participant: anything with `S snapshot() const` and `void restore(const S&)`.
  template <class Participant>
  void add(Participant& p) {
    restores_.push_back([&p, saved = p.snapshot()] { p.restore(saved); });
  }
  // A plain value of the step's own (copied now, assigned back on restore).
  template <class Value>
  void keep(Value& v) {
    restores_.push_back([&v, saved = v] { v = saved; });
  }
  void restore() const {
    for (auto it = restores_.rbegin(); it != restores_.rend(); ++it) (*it)();
  }

 private:
  std::vector<std::function<void()>> restores_;
};

}  // namespace kestrel::yolo
