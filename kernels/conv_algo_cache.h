// When a convolution pass searches for its cuDNN algorithm, and what is remembered (issue 43):
//
// - A configuration seen for the first time takes cuDNN's heuristic ranking (nothing runs, no
//   device synchronisation). Rectangular validation batches bring a new shape almost every batch;
//   a timed search for each, with its synchronisations and its 256 MiB scratch, cost more than the
//   convolutions it chose for.
// - Seen again (training repeats its shapes every step), it gets one timed search, whose choice is
//   kept for the process.
// - A timed search made under memory pressure (its scratch could not be allocated, so only
//   algorithms without workspace could run) is used once and not kept: the next sight searches
//   again, and keeps a choice made with the full scratch.
// - Deterministic runs (`--deterministic`) never time: the heuristic choice among deterministic
//   algorithms is kept from the first sight, so that every run picks the same algorithms, as
//   PyTorch with cudnn.deterministic and benchmark off.
// - At most `capacity` configurations are remembered; past it the least recently used goes.
//
// Pure C++ (the searches are callbacks), so the policy is tested on the CPU; kernels/conv2d.cu
// holds the process's instance and the cuDNN calls.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "kernels/conv2d.h"

namespace kestrel::kernels {

// device, pass, dtype, math (TF32 allowed), deterministic, then the shape's 10 numbers.
using ConvAlgoKey = std::array<int64_t, 15 + 1>;

struct TimedChoice {
  Conv2dAlgo algo;
  bool full_scratch = true;  // false: searched with less workspace than usual (memory pressure)
};

struct ConvAlgoStats {
  int64_t heuristic = 0;  // choices from cuDNN's ranking
  int64_t timed = 0;      // timed searches run
  int64_t kept = 0;       // configurations remembered now
  int64_t evicted = 0;
};

class ConvAlgoCache {
 public:
  explicit ConvAlgoCache(size_t capacity = 4096) : capacity_(capacity) {}

  // The algorithm for `key` (see the header's rules). The callbacks run without the cache's lock;
  // when two threads search one key at once, the first result kept wins for both.
  Conv2dAlgo get(const ConvAlgoKey& key, bool deterministic,
                 const std::function<Conv2dAlgo()>& heuristic,
                 const std::function<TimedChoice()>& timed);
  // What `key` runs with now, if anything is remembered for it.
  std::optional<Conv2dAlgo> find(const ConvAlgoKey& key) const;
  ConvAlgoStats stats() const;

 private:
  struct Entry {
    Conv2dAlgo algo;
    bool final = false;  // a timed choice with the full scratch, or a deterministic run's
    uint64_t last_use = 0;
  };
  void keep(const ConvAlgoKey& key, Entry entry);  // with mutex_ held

  size_t capacity_;
  mutable std::mutex mutex_;
  std::map<ConvAlgoKey, Entry> entries_;
  uint64_t clock_ = 0;
  ConvAlgoStats stats_;
};

}  // namespace kestrel::kernels
