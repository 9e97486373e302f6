// Where a training run stands, as the console shows it and as a checkpoint carries it: the
// current epoch's running loss means and batch position (an interrupted epoch continues from
// them on --resume), NaN-skip counts, the early stopper and whether gradients are accumulated
// but not yet stepped (and whether their window already holds a non-finite loss).
#pragma once
#include <cstdint>
#include <string>

#include "engine/json.h"
#include "yolo/early_stopping.h"

namespace kestrel::yolo {

struct EpochProgress {
  int64_t next_batch = 0;          // batches of the epoch done
  double mloss[3] = {0, 0, 0};     // running means of the box, obj and cls losses
  int64_t seen = 0, skipped = 0;   // batches counted; batches skipped for a NaN/Inf loss
  void add(double box, double obj, double cls);
};

struct RunProgress {
  EpochProgress epoch;
  int64_t nan_steps = 0;  // over the whole run
  EarlyStopping::State stopper;
  bool accumulated = false;
  // The accumulated gradients' window holds a non-finite loss: its optimizer step is skipped.
  bool window_nonfinite = false;
  json::Value to_json() const;
  // An empty object (a checkpoint from before this existed) gives an epoch-boundary state.
  static RunProgress from_json(const json::Value& v, const std::string& path);
};

// "       3/99     0.512G     0.1034    0.06011    0.02433         57        640:  40% 12/30 [00:05, 2.21it/s]"
std::string progress_line(int epoch, int epochs, double mem_gb, const EpochProgress& p,
                          int64_t instances, int64_t size, int64_t done, int64_t total, double seconds);

// Prints on rank 0 only. On a terminal the progress line redraws in place; in a log (stdout not
// a terminal) it prints every 50 batches and at the end of the epoch, as tqdm does in files.
class Console {
 public:
  explicit Console(bool on);
  template <class... A>
  void line(const A&... parts) const {
    if (on_) raw(str(parts...) + "\n");
  }
  void raw(const std::string& s) const;
  void progress(const std::string& line, int64_t done, int64_t total) const;
  bool on() const { return on_; }

 private:
  bool on_, tty_;
};

}  // namespace kestrel::yolo
