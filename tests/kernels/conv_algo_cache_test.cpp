// The policy of cuDNN algorithm choice, with counting callbacks in place of cuDNN: heuristics
// for a configuration's first sight, one timed search when it repeats, nothing kept from a
// search under memory pressure, never a timed search in a deterministic run, a bounded cache.
#include "kernels/conv_algo_cache.h"

#include "tests/support/testing.h"

using namespace kestrel::kernels;

namespace {

ConvAlgoKey key(int64_t n) {
  ConvAlgoKey k{};
  k[5] = n;  // the batch, say: a rectangular validation batch's new shape
  return k;
}

struct Searches {
  int heuristic = 0, timed = 0;
  bool full_scratch = true;
  std::function<Conv2dAlgo()> ranked() {
    return [this] {
      ++heuristic;
      Conv2dAlgo a;
      a.algo = 1;
      a.name = "ranked";
      return a;
    };
  }
  std::function<TimedChoice()> timing() {
    return [this] {
      ++timed;
      TimedChoice c;
      c.algo.algo = 6;
      c.algo.name = "timed";
      c.full_scratch = full_scratch;
      return c;
    };
  }
};

}  // namespace

// A rectangular validation over 100 distinct shapes runs no timed search; a training shape gets
// exactly one, on its second step, and keeps its result.
TEST(ConvAlgoCache, FirstSightsTakeTheRankingRepeatsOneTimedSearch) {
  ConvAlgoCache cache;
  Searches s;
  for (int64_t n = 0; n < 100; ++n) EXPECT_EQ(cache.get(key(n), false, s.ranked(), s.timing()).name, "ranked");
  EXPECT_EQ(s.timed, 0);
  EXPECT_EQ(s.heuristic, 100);
  EXPECT_EQ(cache.get(key(1000), false, s.ranked(), s.timing()).name, "ranked");
  for (int step = 0; step < 10; ++step)
    EXPECT_EQ(cache.get(key(1000), false, s.ranked(), s.timing()).name, "timed");
  EXPECT_EQ(s.timed, 1);
  EXPECT_EQ(cache.find(key(1000))->name, "timed");
  const ConvAlgoStats st = cache.stats();
  EXPECT_EQ(st.timed, 1);
  EXPECT_EQ(st.heuristic, 101);
  EXPECT_EQ(st.kept, 101);
}

// A search that could not have its scratch (memory pressure) is used but not kept: the next
// sight searches again, and a search with the full scratch is kept.
TEST(ConvAlgoCache, ChoicesMadeUnderMemoryPressureAreNotKept) {
  ConvAlgoCache cache;
  Searches s;
  cache.get(key(1), false, s.ranked(), s.timing());
  s.full_scratch = false;
  EXPECT_EQ(cache.get(key(1), false, s.ranked(), s.timing()).name, "timed");
  EXPECT_EQ(cache.get(key(1), false, s.ranked(), s.timing()).name, "timed");
  EXPECT_EQ(s.timed, 2);
  EXPECT_EQ(cache.find(key(1))->name, "ranked");  // what stays is the first sight's choice
  s.full_scratch = true;
  cache.get(key(1), false, s.ranked(), s.timing());
  cache.get(key(1), false, s.ranked(), s.timing());
  EXPECT_EQ(s.timed, 3);
  EXPECT_EQ(cache.find(key(1))->name, "timed");
}

// --deterministic: the ranking's (deterministic) choice from the first sight on, never timed,
// so that every run of the same shapes runs the same algorithms.
TEST(ConvAlgoCache, DeterministicRunsNeverTime) {
  ConvAlgoCache cache;
  Searches s;
  for (int step = 0; step < 5; ++step) EXPECT_EQ(cache.get(key(7), true, s.ranked(), s.timing()).name, "ranked");
  EXPECT_EQ(s.timed, 0);
  EXPECT_EQ(s.heuristic, 1);
}

// Bounded: past the capacity the least recently used configuration goes.
TEST(ConvAlgoCache, KeepsAtMostItsCapacityDroppingTheLeastRecentlyUsed) {
  ConvAlgoCache cache(3);
  Searches s;
  for (int64_t n = 0; n < 3; ++n) cache.get(key(n), false, s.ranked(), s.timing());
  cache.get(key(0), false, s.ranked(), s.timing());  // 0 is used again: 1 is now the oldest
  cache.get(key(3), false, s.ranked(), s.timing());
  EXPECT_TRUE(cache.find(key(0)).has_value());
  EXPECT_FALSE(cache.find(key(1)).has_value());
  EXPECT_TRUE(cache.find(key(3)).has_value());
  EXPECT_EQ(cache.stats().kept, 3);
  EXPECT_EQ(cache.stats().evicted, 1);
}
