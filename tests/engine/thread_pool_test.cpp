// ThreadPool: results and exceptions through futures, parallel_for coverage and failure, shutdown
// with pending work, nesting, and the single-thread pool.
#include "engine/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>

#include "base/error.h"

using namespace kestrel;

TEST(ThreadPool, ReturnsResultsThroughFutures) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3u);
  auto a = pool.submit([] { return 6 * 7; });
  auto b = pool.submit([] { return std::string("kestrel"); });
  auto c = pool.submit([] {});
  EXPECT_EQ(a.get(), 42);
  EXPECT_EQ(b.get(), "kestrel");
  c.get();
}

TEST(ThreadPool, AcceptsMoveOnlyCallables) {
  ThreadPool pool(2);
  auto owned = std::make_unique<int>(5);
  auto f = pool.submit([p = std::move(owned)] { return *p + 1; });
  EXPECT_EQ(f.get(), 6);
}

TEST(ThreadPool, PropagatesExceptionsThroughFutures) {
  ThreadPool pool(2);
  auto f = pool.submit([]() -> int { throw std::runtime_error("decode failed: img_7.jpg"); });
  try {
    f.get();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "decode failed: img_7.jpg");
  }
  // The worker that ran the throwing task keeps serving.
  EXPECT_EQ(pool.submit([] { return 1; }).get(), 1);
}

TEST(ThreadPool, RunsTasksOnSeveralThreads) {
  ThreadPool pool(4);
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  std::vector<std::future<void>> fs;
  // Each task waits until all four have started, which only happens if four threads run them.
  for (int i = 0; i < 4; ++i)
    fs.push_back(pool.submit([&] {
      {
        std::lock_guard lock(m);
        ids.insert(std::this_thread::get_id());
      }
      ++arrived;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (arrived.load() < 4 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }));
  for (auto& f : fs) f.get();
  EXPECT_EQ(arrived.load(), 4);
  EXPECT_EQ(ids.size(), 4u);
}

TEST(ThreadPool, ParallelForCoversEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 7, 16, 17, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(n + 10);
    pool.parallel_for(5, 5 + n, [&](int64_t i) { hits[i].fetch_add(1); });
    for (int64_t i = 0; i < n + 10; ++i)
      ASSERT_EQ(hits[i].load(), (i >= 5 && i < 5 + n) ? 1 : 0) << "n " << n << " index " << i;
  }
  int calls = 0;
  pool.parallel_for(10, 3, [&](int64_t) { ++calls; });  // empty range
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, ParallelForRethrowsAfterAllCallsEnd) {
  ThreadPool pool(4);
  std::atomic<int> running{0};
  try {
    pool.parallel_for(0, 10000, [&](int64_t i) {
      ++running;
      if (i == 137) {
        --running;
        throw std::invalid_argument("bad label in image 137");
      }
      std::this_thread::yield();
      --running;
    });
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "bad label in image 137");
  }
  EXPECT_EQ(running.load(), 0) << "calls still running after parallel_for returned";
}

TEST(ThreadPool, ParallelForStopsStartingCallsAfterAFailure) {
  ThreadPool pool(3);
  std::atomic<int64_t> calls{0};
  // Every call throws, so each chunk makes at most one call before the failure is seen.
  EXPECT_THROW(pool.parallel_for(0, 1000000,
                                 [&](int64_t) {
                                   ++calls;
                                   throw Error("fails");
                                 }),
               Error);
  EXPECT_GE(calls.load(), 1);
  EXPECT_LE(calls.load(), 4 * 4);  // at most one per chunk: (threads + 1) * 4 chunks
}

TEST(ThreadPool, ManySmallTasks) {
  ThreadPool pool(4);
  std::vector<std::future<int64_t>> fs;
  for (int64_t i = 0; i < 20000; ++i) fs.push_back(pool.submit([i] { return i * i; }));
  int64_t sum = 0;
  for (auto& f : fs) sum += f.get();
  const int64_t n = 20000;
  EXPECT_EQ(sum, (n - 1) * n * (2 * n - 1) / 6);
}

TEST(ThreadPool, DestructorFinishesQueuedWork) {
  std::atomic<int> done{0};
  std::vector<std::future<void>> fs;
  {
    ThreadPool pool(2);
    for (int i = 0; i < 200; ++i)
      fs.push_back(pool.submit([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ++done;
      }));
  }  // most tasks are still queued here
  EXPECT_EQ(done.load(), 200);
  for (auto& f : fs) EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
}

TEST(ThreadPool, TasksMaySubmitAndRunNestedParallelFor) {
  ThreadPool pool(2);
  // Every worker runs an outer task that itself calls parallel_for: the callers do the work
  // themselves when no worker is free, so this cannot deadlock.
  std::vector<std::future<int64_t>> outer;
  for (int t = 0; t < 4; ++t)
    outer.push_back(pool.submit([&pool] {
      std::atomic<int64_t> sum{0};
      pool.parallel_for(0, 100, [&](int64_t i) { sum += i; });
      return sum.load();
    }));
  for (auto& f : outer) EXPECT_EQ(f.get(), 4950);
  auto chained = pool.submit([&pool] { return pool.submit([] { return 3; }); });
  EXPECT_EQ(chained.get().get(), 3);
}

TEST(ThreadPool, SingleThreadRunsTasksInOrder) {
  ThreadPool pool(1);
  std::vector<int> order;
  std::vector<std::future<void>> fs;
  for (int i = 0; i < 50; ++i) fs.push_back(pool.submit([&order, i] { order.push_back(i); }));
  for (auto& f : fs) f.get();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  std::vector<int> hits(37, 0);
  pool.parallel_for(0, 37, [&](int64_t i) { ++hits[i]; });
  for (int h : hits) EXPECT_EQ(h, 1);
}

TEST(ThreadPool, RefusesZeroThreads) { EXPECT_THROW(ThreadPool(0), Error); }
