// Early stopping follows the reference (YOLOv5 v7.0 utils/torch_utils.py EarlyStopping) rule for
// rule: a fitness equal to the best counts as an improvement (constant 0 fitness, as in --noval
// runs, never stops), update() returns true once epoch - best_epoch >= patience, possible_stop()
// once that delta >= patience - 1, and patience 0 (or negative) disables both. A table of fitness
// sequences pins the exact epoch of the first stop and the possible_stop flag of every epoch. The
// saved state, loaded into a new stopper, continues exactly as the uninterrupted one (and a fresh
// stopper would not, so the comparison has teeth).
#include "yolo/train/early_stopping.h"

#include <gtest/gtest.h>

#include <limits>
#include <ostream>
#include <string>
#include <vector>

using kestrel::yolo::EarlyStopping;

namespace {

struct Case {
  std::string name;
  int64_t patience;
  std::vector<double> fitness;   // epochs 0, 1, 2, ...
  int64_t stop_epoch;            // the first epoch where update() returns true; -1 = never
  std::string possible;          // possible_stop() after each update, '1' or '0'
};

// The reference's arithmetic, for reading the table: best_epoch moves on fitness >= best;
// delta = epoch - best_epoch; possible = delta >= patience - 1; stop = delta >= patience.
const std::vector<Case>& cases() {
  static const std::vector<Case> table = {
      // Rising, then equal to the best at epoch 3 (>= counts: best_epoch becomes 3), then lower.
      // With '>' instead of '>=' the stop would come at epoch 5.
      {"rise_then_flat_then_drop", 3, {0.1, 0.2, 0.3, 0.3, 0.25, 0.29, 0.1, 0.1}, 6, "00000111"},
      // Flat at the best: every epoch is an improvement.
      {"flat_at_best", 3, {0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4}, -1, "0000000"},
      // Best at epoch 0, never matched again.
      {"drop_after_first", 3, {0.5, 0.4, 0.45, 0.49, 0.3}, 3, "00111"},
      // A recovery to exactly the best resets the count.
      {"recovery_to_best_resets", 2, {0.5, 0.1, 0.5, 0.1, 0.1}, 4, "01011"},
      // --noval: fitness 0 throughout equals the initial best 0.
      {"noval_zero_fitness", 2, {0, 0, 0, 0, 0, 0}, -1, "000000"},
      // Negative fitness never reaches the initial best 0: the best epoch stays 0.
      {"negative_fitness", 2, {-1, -0.5, -0.1}, 2, "011"},
      // patience 1: delta >= 0 always, so possible_stop is true even on an improving epoch.
      {"patience_one", 1, {0.1, 0.2, 0.15}, 2, "111"},
      // Improvements only: never stops.
      {"strictly_rising", 2, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, -1, "000000"},
  };
  return table;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EarlyStoppingTable : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(EarlyStoppingTable, StopsAtTheReferenceEpoch) {
  const Case& c = GetParam();
  ASSERT_EQ(c.fitness.size(), c.possible.size());
  EarlyStopping stopper(c.patience);
  int64_t first_stop = -1;
  std::string possible;
  for (size_t e = 0; e < c.fitness.size(); ++e) {
    const bool stop = stopper.update(static_cast<int64_t>(e), c.fitness[e]);
    possible += stopper.possible_stop() ? '1' : '0';
    if (stop && first_stop < 0) first_stop = static_cast<int64_t>(e);
  }
  EXPECT_EQ(first_stop, c.stop_epoch);
  EXPECT_EQ(possible, c.possible);
}

INSTANTIATE_TEST_SUITE_P(Reference, EarlyStoppingTable, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(EarlyStopping, EqualFitnessMovesTheBestEpoch) {
  EarlyStopping s(5);
  EXPECT_FALSE(s.update(0, 0.3));
  EXPECT_FALSE(s.update(1, 0.3));
  EXPECT_EQ(s.state().best_epoch, 1);
  EXPECT_EQ(s.state().best_fitness, 0.3);
  EXPECT_FALSE(s.update(2, 0.2));
  EXPECT_EQ(s.state().best_epoch, 1);
  EXPECT_EQ(s.state().best_fitness, 0.3);
  EXPECT_FALSE(s.update(3, 0.7));
  EXPECT_EQ(s.state().best_epoch, 3);
  EXPECT_EQ(s.state().best_fitness, 0.7);
}

TEST(EarlyStopping, PatienceZeroOrNegativeDisables) {
  for (int64_t patience : {int64_t{0}, int64_t{-3}}) {
    EarlyStopping s(patience);
    EXPECT_TRUE(s.disabled()) << patience;
    EXPECT_FALSE(s.update(0, 0.9));
    for (int64_t e = 1; e < 1000; ++e) {
      ASSERT_FALSE(s.update(e, 0.0)) << "patience " << patience << " stopped at epoch " << e;
      ASSERT_FALSE(s.possible_stop()) << "patience " << patience << ", epoch " << e;
    }
    // Even a delta near the int64 range stays "no stop" (no overflow in patience - 1).
    EXPECT_FALSE(s.update(std::numeric_limits<int64_t>::max() - 1, 0.0));
    EXPECT_FALSE(s.possible_stop());
  }
  EarlyStopping on(30);
  EXPECT_FALSE(on.disabled());
  EXPECT_EQ(on.patience(), 30);
}

TEST(EarlyStopping, ReachesStopAndStaysStopped) {
  EarlyStopping s(2);
  EXPECT_FALSE(s.update(0, 1.0));
  EXPECT_FALSE(s.update(1, 0.5));
  EXPECT_TRUE(s.update(2, 0.5));
  EXPECT_TRUE(s.update(3, 0.5)) << "the trainer may ask again; the answer must not flip back";
  EXPECT_TRUE(s.possible_stop());
}

// A run interrupted after epoch k and resumed from its checkpoint must stop exactly where the
// uninterrupted run stops.
TEST(EarlyStopping, SavedStateContinuesIdentically) {
  const std::vector<double> fitness = {0.1, 0.3, 0.2, 0.3, 0.25, 0.1, 0.28, 0.2, 0.29, 0.1};
  const int64_t patience = 4;
  for (size_t cut = 0; cut < fitness.size(); ++cut) {
    EarlyStopping whole(patience), first(patience);
    std::vector<int> expect, fresh_results, resumed_results;
    for (size_t e = 0; e < fitness.size(); ++e)
      expect.push_back(whole.update(static_cast<int64_t>(e), fitness[e]) * 2 + whole.possible_stop());
    for (size_t e = 0; e < cut; ++e) first.update(static_cast<int64_t>(e), fitness[e]);
    const EarlyStopping::State saved = first.state();

    EarlyStopping resumed(patience), fresh(patience);
    resumed.load_state(saved);
    EXPECT_EQ(resumed.state().best_epoch, saved.best_epoch);
    EXPECT_EQ(resumed.state().best_fitness, saved.best_fitness);
    for (size_t e = cut; e < fitness.size(); ++e) {
      resumed_results.push_back(resumed.update(static_cast<int64_t>(e), fitness[e]) * 2 +
                                resumed.possible_stop());
      fresh_results.push_back(fresh.update(static_cast<int64_t>(e), fitness[e]) * 2 + fresh.possible_stop());
    }
    const std::vector<int> tail(expect.begin() + static_cast<std::ptrdiff_t>(cut), expect.end());
    EXPECT_EQ(resumed_results, tail) << "resumed after epoch " << cut - 1;
    // Without the saved state the stopper forgets the best of epoch 3 and answers otherwise.
    if (cut >= 4) {
      EXPECT_NE(fresh_results, tail) << "cut " << cut;
    }
  }
}
