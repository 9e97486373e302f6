// OrderedBatches (the loaders' worker pool): batches come out in order, and an epoch abandoned
// while workers are still building never leaks one of its batches into the next epoch.
#include "yolo/data/ordered_batches.h"

#include <chrono>
#include <thread>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

struct Made {
  int64_t epoch = -1, b = -1;
};
struct NoBuffers {};
using Pool = OrderedBatches<Made, NoBuffers, int>;

// Batch 1 of epoch 0 takes `slow`, and so does every batch from 2 on of later epochs (so that a
// stale batch, if one were left, is found before its replacement is built); the rest are immediate.
Pool::Build build_with_slow_batch(std::chrono::milliseconds slow) {
  return [slow](int64_t epoch, int64_t b, const int&, const std::function<bool()>&, NoBuffers*) {
    if ((epoch == 0 && b == 1) || (epoch > 0 && b >= 2)) std::this_thread::sleep_for(slow);
    return std::optional<Made>(Made{epoch, b});
  };
}

}  // namespace

TEST(OrderedBatches, BatchesComeOutInOrder) {
  for (int workers : {0, 1, 3}) {
    Pool pool(workers, 2, "test loader", build_with_slow_batch(std::chrono::milliseconds(5)));
    pool.start_epoch(0, 7, 0, std::make_shared<const int>(0));
    for (int64_t b = 0; b < 7; ++b) {
      std::optional<Made> m = pool.next();
      ASSERT_TRUE(m) << workers << " workers, batch " << b;
      EXPECT_EQ(m->epoch, 0);
      EXPECT_EQ(m->b, b);
    }
    EXPECT_FALSE(pool.next());
  }
}

// start_epoch waits for builds in flight with the lock released: a worker woken by the last
// next() used to claim another batch of the abandoned epoch in that gap, and its result stayed in
// the new epoch's ready batches (CI saw "batch 2 holds other samples").
TEST(OrderedBatches, AnAbandonedEpochLeavesNoBatchInTheNext) {
  for (int round = 0; round < 20; ++round) {
    Pool pool(3, 2, "test loader", build_with_slow_batch(std::chrono::milliseconds(3)));
    pool.start_epoch(0, 12, 0, std::make_shared<const int>(0));
    ASSERT_TRUE(pool.next());  // batch 0; batch 1 is still being built
    pool.start_epoch(1, 12, 0, std::make_shared<const int>(1));
    for (int64_t b = 0; b < 12; ++b) {
      std::optional<Made> m = pool.next();
      ASSERT_TRUE(m) << "round " << round << ", batch " << b;
      ASSERT_EQ(m->epoch, 1) << "round " << round << ", batch " << b << " came from the abandoned epoch";
      ASSERT_EQ(m->b, b);
    }
    EXPECT_FALSE(pool.next());
  }
}
