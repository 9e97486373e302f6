// The reference's early stopper (utils/torch_utils.py EarlyStopping), with its exact rules:
// a fitness equal to the best counts as an improvement (so --noval runs, whose fitness stays 0,
// never stop), training stops once `patience` epochs passed since the best, `possible_stop` warns
// one epoch ahead (the trainer then validates and saves as on a final epoch), and patience 0
// disables stopping. Unlike the reference, its state is saved in checkpoints, so a resumed run
// stops where the uninterrupted one would.
#pragma once
#include <cstdint>
#include <limits>

namespace kestrel::yolo {

class EarlyStopping {
 public:
  struct State {
    double best_fitness = 0.0;
    int64_t best_epoch = 0;
  };

  explicit EarlyStopping(int64_t patience)
      : patience_(patience > 0 ? patience : std::numeric_limits<int64_t>::max()) {}

  // Records the epoch's fitness; true when training should stop after this epoch.
  bool update(int64_t epoch, double fitness);
  // After update(): the next epoch may be the last (delta >= patience - 1).
  bool possible_stop() const { return possible_stop_; }
  bool disabled() const { return patience_ == std::numeric_limits<int64_t>::max(); }
  int64_t patience() const { return patience_; }

  const State& state() const { return state_; }
  void load_state(const State& s) { state_ = s; }

 private:
  int64_t patience_;
  State state_;
  bool possible_stop_ = false;
};

}  // namespace kestrel::yolo
