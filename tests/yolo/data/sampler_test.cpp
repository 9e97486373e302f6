// DistributedSampler: ranks get disjoint, equally long shares that cover the dataset (padded by
// repeating the permutation's start), the same permutation on every rank, reproducible per epoch
// and different between epochs.
#include "yolo/data/sampler.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "base/error.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

// The epoch's global order, rebuilt by interleaving the ranks' shares (index i went to rank
// i % world at position i / world).
std::vector<int64_t> interleave(int64_t n, int world, int64_t epoch, bool shuffle, uint64_t seed,
                                bool drop_last = false) {
  std::vector<std::vector<int64_t>> shares;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, r, world, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    shares.push_back(s.indices());
    EXPECT_EQ(static_cast<int64_t>(shares.back().size()), s.num_samples());
  }
  std::vector<int64_t> order;
  for (size_t i = 0; i < shares[0].size(); ++i)
    for (int r = 0; r < world; ++r) order.push_back(shares[r][i]);
  return order;
}

}  // namespace

TEST(DistributedSampler, WithoutShuffleMatchesTorch) {
  // torch.utils.data.DistributedSampler(range(5), num_replicas=2, shuffle=False):
  // rank 0 -> [0, 2, 4], rank 1 -> [1, 3, 0].
  EXPECT_EQ(DistributedSampler(5, 0, 2, false).indices(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(DistributedSampler(5, 1, 2, false).indices(), (std::vector<int64_t>{1, 3, 0}));
  // drop_last=True: [0, 2] and [1, 3].
  EXPECT_EQ(DistributedSampler(5, 1, 2, false, 0, true).indices(), (std::vector<int64_t>{1, 3}));
  // World larger than the dataset: the order repeats as often as needed.
  EXPECT_EQ(interleave(2, 5, 0, false, 0), (std::vector<int64_t>{0, 1, 0, 1, 0}));
}

TEST(DistributedSampler, ShuffledSharesAreDisjointCoveringAndPadded) {
  const int64_t n = 10;
  const int world = 3;
  const std::vector<int64_t> order = interleave(n, world, 7, true, 42);
  ASSERT_EQ(order.size(), 12u);  // ceil(10 / 3) = 4 each
  // The first n form a permutation; the padding repeats its first two entries.
  std::vector<int64_t> head(order.begin(), order.begin() + n);
  std::vector<int64_t> sorted = head;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(n);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(order[10], order[0]);
  EXPECT_EQ(order[11], order[1]);
  EXPECT_NE(head, iota) << "shuffle=true left the order unchanged";

  // drop_last: 3 each, 9 distinct indices, no repeats.
  const std::vector<int64_t> cut = interleave(n, world, 7, true, 42, true);
  ASSERT_EQ(cut.size(), 9u);
  EXPECT_EQ(std::set<int64_t>(cut.begin(), cut.end()).size(), 9u);
  // Same permutation with or without drop_last: only the tail differs.
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), order.begin()));
}

TEST(DistributedSampler, SameOnEveryRunDifferentPerEpochAndSeed) {
  DistributedSampler a(100, 1, 4, true, 3), b(100, 1, 4, true, 3);
  a.set_epoch(5);
  b.set_epoch(5);
  EXPECT_EQ(a.indices(), b.indices());
  const std::vector<int64_t> e5 = a.indices();
  a.set_epoch(6);
  EXPECT_EQ(a.epoch(), 6);
  EXPECT_NE(a.indices(), e5);
  DistributedSampler c(100, 1, 4, true, 4);
  c.set_epoch(5);
  EXPECT_NE(c.indices(), e5);

  // Over many epochs every index takes every position about equally often.
  const int64_t n = 4;
  std::map<std::pair<int64_t, int64_t>, int> seen;  // (position, index) -> count
  const int epochs = 2400;
  for (int e = 0; e < epochs; ++e) {
    const std::vector<int64_t> order = interleave(n, 1, e, true, 9);
    for (int64_t p = 0; p < n; ++p) ++seen[{p, order[p]}];
  }
  // Expected 600 each; 5 standard deviations of a binomial(2400, 1/4) is ~106.
  for (const auto& [key, count] : seen) EXPECT_NEAR(count, epochs / n, 106) << key.first << "," << key.second;
  EXPECT_EQ(seen.size(), 16u);
}

TEST(DistributedSampler, RefusesBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, -1, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
  EXPECT_THROW(DistributedSampler(-1, 0, 1), Error);
  EXPECT_TRUE(DistributedSampler(0, 0, 2).indices().empty());
}
