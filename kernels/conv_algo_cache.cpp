#include "kernels/conv_algo_cache.h"

#include <algorithm>

namespace kestrel::kernels {

Conv2dAlgo ConvAlgoCache::get(const ConvAlgoKey& key, bool deterministic,
                              const std::function<Conv2dAlgo()>& heuristic,
                              const std::function<TimedChoice()>& timed) {
  bool seen = false;
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      it->second.last_use = ++clock_;
      if (it->second.final) return it->second.algo;
      seen = true;
    }
  }
  if (!seen || deterministic) {  // a first sight; a deterministic run never times
    Conv2dAlgo algo = heuristic();
    std::lock_guard lock(mutex_);
    ++stats_.heuristic;
    if (auto it = entries_.find(key); it != entries_.end()) return it->second.algo;
    keep(key, Entry{algo, deterministic, ++clock_});
    return algo;
  }
  TimedChoice choice = timed();
  std::lock_guard lock(mutex_);
  ++stats_.timed;
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.final) return it->second.algo;  // another thread's
  if (!choice.full_scratch) return choice.algo;  // used now, searched again next time
  if (it != entries_.end()) {
    it->second = Entry{choice.algo, true, ++clock_};
    return it->second.algo;
  }
  keep(key, Entry{choice.algo, true, ++clock_});
  return choice.algo;
}

void ConvAlgoCache::keep(const ConvAlgoKey& key, Entry entry) {
  while (!entries_.empty() && entries_.size() >= capacity_) {
    const auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    entries_.erase(oldest);
    ++stats_.evicted;
  }
  if (capacity_ > 0) entries_.emplace(key, std::move(entry));
}

std::optional<Conv2dAlgo> ConvAlgoCache::find(const ConvAlgoKey& key) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.algo;
}

ConvAlgoStats ConvAlgoCache::stats() const {
  std::lock_guard lock(mutex_);
  ConvAlgoStats s = stats_;
  s.kept = static_cast<int64_t>(entries_.size());
  return s;
}

}  // namespace kestrel::kernels
