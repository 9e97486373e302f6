#include "dist/gloo_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "base/error.h"
#include "dist/env.h"
#include "tests/dist/spawn.h"
#include "tests/support/testing.h"

using kestrel::testing::error_of;

namespace kestrel::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const DType kAllTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                           DType::I32, DType::I64, DType::U8};

// Small integers: exact in every dtype, and so are their sums over three ranks.
double value(DType t, int rank, int64_t i) {
  if (t == DType::U8) return static_cast<double>((i * 5 + rank * 3) % 60);
  return static_cast<double>((i * 7 + rank * 3) % 11 - 5);
}

Tensor filled(DType t, int rank, int64_t n) {
  Tensor x = Tensor::empty({n}, t);
  for (int64_t i = 0; i < n; ++i) store_from_double(x.data_ptr(), t, i, value(t, rank, i));
  return x;
}

// Relative tolerance of one rounding to the dtype (sums are exact; only the average rounds).
double rounding(DType t) {
  switch (t) {
    case DType::F16:
      return 1e-3;  // 2^-11 relative, with margin
    case DType::BF16:
      return 8e-3;  // 2^-8
    case DType::F32:
      return 1e-6;
    default:
      return 1e-12;
  }
}

// The collective timeout: KESTREL_TEST_TIMEOUT seconds, else 10; times the sanitizer slowdown,
// as ranks start and run many times slower there (the timing checks below scale with it).
constexpr int kSlowdown = testing::kSanitizerSlowdown;
int timeout_seconds() {
  const char* t = std::getenv("KESTREL_TEST_TIMEOUT");
  return (t ? std::atoi(t) : 10) * kSlowdown;
}

std::shared_ptr<ProcessGroup> worker_group() {
  DistFlags flags;
  flags.timeout = std::chrono::seconds(timeout_seconds());
  return init_process_group("gloo", resolve_dist_options(flags, process_environment()),
                            Device::cpu());
}

void expect_all_ok(const std::vector<testing::RankResult>& results) {
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << testing::describe(results);
}

// --- worker bodies (run as separate processes) ---------------------------------------------------

TEST(GlooWorker, DISABLED_AllReduce) {
  auto pg = worker_group();
  const int world = pg->size();
  for (DType t : kAllTypes) {
    for (int64_t n : {1, 7, 1001, 300001}) {  // odd sizes; the largest spans several segments
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
        if (op == ReduceOp::Average && !is_floating(t)) continue;
        Tensor x = filled(t, pg->rank(), n);
        pg->all_reduce(x, op)->wait();
        Tensor expected = Tensor::empty({n}, DType::F64);
        for (int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (int r = 0; r < world; ++r) s += value(t, r, i);
          if (t == DType::U8) s = static_cast<double>(static_cast<uint8_t>(s));  // wraps mod 256
          expected.data<double>()[i] = op == ReduceOp::Sum ? s : s / world;
        }
        const double rtol = op == ReduceOp::Sum ? 0.0 : rounding(t);
        ASSERT_TRUE(testing::all_close(x, expected, 0.0, rtol))
            << dtype_name(t) << " n=" << n << (op == ReduceOp::Sum ? " sum" : " average");
      }
    }
  }
}

// Sums whose value depends on the order of the additions (floats of mixed magnitudes): every
// rank must hold the same bits afterwards, whether the group exchanged the buffers (2 ranks, or a
// small buffer) or ran Gloo's ring, and the sum must be right to float rounding.
TEST(GlooWorker, DISABLED_AllReduceIsTheSameOnEveryRank) {
  auto pg = worker_group();
  const int world = pg->size(), rank = pg->rank();
  for (int64_t n : {3, 1000, 300001}) {
    Tensor x = Tensor::empty({n}, DType::F32);
    std::vector<double> expected(static_cast<size_t>(n), 0.0);
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const float v = std::ldexp(static_cast<float>((i * 37 + r * 101) % 997) / 997.0f + 0.1f,
                                   static_cast<int>((i + 3 * r) % 40) - 20);
        expected[static_cast<size_t>(i)] += v;
        if (r == rank) x.data<float>()[i] = v;
      }
    pg->all_reduce(x)->wait();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(x.data<float>()[i], expected[static_cast<size_t>(i)], 1e-6 * std::abs(expected[static_cast<size_t>(i)]))
          << "n=" << n << " i=" << i;
    Tensor all = Tensor::zeros({world * n}, DType::F32);
    pg->all_gather(all, x)->wait();
    for (int r = 1; r < world; ++r)
      ASSERT_EQ(std::memcmp(all.data<float>(), all.data<float>() + r * n, static_cast<size_t>(n) * sizeof(float)), 0)
          << "n=" << n << ": rank " << r << " holds other bits than rank 0";
  }
}

TEST(GlooWorker, DISABLED_BroadcastGatherBarrier) {
  auto pg = worker_group();
  const int world = pg->size(), rank = pg->rank();
  for (DType t : kAllTypes) {
    Tensor x = filled(t, rank, 1001);
    pg->broadcast(x, 1)->wait();
    ASSERT_TRUE(testing::all_close(x, filled(t, 1, 1001), 0.0, 0.0)) << dtype_name(t);

    Tensor in = filled(t, rank, 7);
    Tensor out = Tensor::zeros({world * 7}, t);
    pg->all_gather(out, in)->wait();
    for (int r = 0; r < world; ++r)
      ASSERT_TRUE(testing::all_close(out.slice(0, r * 7, (r + 1) * 7), filled(t, r, 7), 0.0, 0.0))
          << dtype_name(t) << " block of rank " << r;
  }
  // Rank 0 arrives late and leaves a mark first: nobody may pass the barrier before the mark.
  const std::filesystem::path mark = std::string(std::getenv("KESTREL_TEST_OUT")) + "/mark";
  if (rank == 0) {
    std::this_thread::sleep_for(300ms);
    std::ofstream(mark) << "set";
  }
  pg->barrier()->wait();
  EXPECT_TRUE(std::filesystem::exists(mark)) << "rank " << rank << " left the barrier early";
}

TEST(GlooWorker, DISABLED_AsyncWorkRunsInIssueOrder) {
  auto pg = worker_group();
  const int world = pg->size();
  std::vector<Tensor> xs;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 6; ++k) {
    xs.push_back(Tensor::full({1000 + 333 * k}, k + 1.0, DType::F32));
    works.push_back(pg->all_reduce(xs.back()));
  }
  Tensor b = Tensor::full({5}, pg->rank() + 10.0, DType::F64);
  works.push_back(pg->broadcast(b, 0));
  works.back()->wait();
  for (auto& w : works) EXPECT_TRUE(w->is_completed());  // FIFO: all earlier ones are done
  for (int k = 0; k < 6; ++k) {
    works[k]->wait();
    EXPECT_TRUE(testing::all_close(
        xs[k], Tensor::full(xs[k].shape(), (k + 1.0) * world, DType::F32), 0.0, 0.0));
  }
  EXPECT_TRUE(testing::all_close(b, Tensor::full({5}, 10.0, DType::F64), 0.0, 0.0));
}

// Rank 1 dies after the first collective; the others must fail within the timeout, not hang.
TEST(GlooWorker, DISABLED_PeerDies) {
  auto pg = worker_group();
  Tensor x = Tensor::ones({1001});
  pg->all_reduce(x)->wait();
  if (pg->rank() == 1) std::raise(SIGKILL);
  const auto start = Clock::now();
  const std::string msg = error_of([&] { pg->all_reduce(x)->wait(); });
  std::cerr << "the expected error: " << msg << std::endl;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(),
            timeout_seconds() + 2.0 * kSlowdown);
  EXPECT_NE(msg.find("rank " + std::to_string(pg->rank()) + ": gloo all_reduce of float32[1001]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("a peer may have died"), std::string::npos) << msg;
  // Later collectives fail at once, naming the first failure.
  const std::string later = error_of([&] { pg->barrier()->wait(); });
  EXPECT_NE(later.find("earlier collective failed"), std::string::npos) << later;
}

// Rank 1 stays alive but never joins: rank 0 times out.
TEST(GlooWorker, DISABLED_PeerStuck) {
  auto pg = worker_group();
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(3s * kSlowdown);
    std::_Exit(0);
  }
  Tensor x = Tensor::ones({17});
  const auto start = Clock::now();
  auto work = pg->all_reduce(x);
  // A second thread polling the work never waits behind the stuck collective, and sees it end
  // as soon as the waiting thread does.
  double longest_poll = 0, seen_done = -1;
  std::thread poller([&] {
    while (seen_done < 0) {
      const auto t0 = Clock::now();
      const bool done = work->is_completed();
      const auto t1 = Clock::now();
      longest_poll = std::max(longest_poll, std::chrono::duration<double>(t1 - t0).count());
      if (done) seen_done = std::chrono::duration<double>(t1 - start).count();
      std::this_thread::sleep_for(1ms);
    }
  });
  const std::string msg = error_of([&] { work->wait(); });
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  poller.join();
  std::cerr << "the expected error: " << msg << std::endl;
  EXPECT_GE(took, 0.9 * timeout_seconds());
  EXPECT_LT(took, 2.9 * kSlowdown);  // before the stuck rank would have woken up
  EXPECT_LT(longest_poll, 0.1 * kSlowdown);
  EXPECT_LT(seen_done, took + 0.2 * kSlowdown);
  EXPECT_NE(msg.find("rank 0: gloo all_reduce"), std::string::npos) << msg;
  EXPECT_NE(msg.find(str("timeout ", timeout_seconds(), " s")), std::string::npos) << msg;
}

// --- tests -------------------------------------------------------------------------------------

TEST(GlooGroup, AllReduceAllTypesAndOddSizes) {
  expect_all_ok(testing::run_ranks("GlooWorker.DISABLED_AllReduce", 3, testing::free_port()));
}

// 2 ranks take the one-exchange all-reduce at every size (dist/gloo_group.cpp).
TEST(GlooGroup, AllReduceAllTypesAndOddSizesOnTwoRanks) {
  expect_all_ok(testing::run_ranks("GlooWorker.DISABLED_AllReduce", 2, testing::free_port()));
}

TEST(GlooGroup, AllReduceIsTheSameOnEveryRank) {
  for (int world : {2, 3})
    expect_all_ok(testing::run_ranks("GlooWorker.DISABLED_AllReduceIsTheSameOnEveryRank", world, testing::free_port()));
}

TEST(GlooGroup, BroadcastAllGatherBarrier) {
  const auto dir = testing::temp_dir("gloo");
  expect_all_ok(testing::run_ranks("GlooWorker.DISABLED_BroadcastGatherBarrier", 3,
                                   testing::free_port(), {"KESTREL_TEST_OUT=" + dir.string()}));
  std::filesystem::remove_all(dir);
}

TEST(GlooGroup, AsyncWorkRunsInIssueOrder) {
  expect_all_ok(
      testing::run_ranks("GlooWorker.DISABLED_AsyncWorkRunsInIssueOrder", 2, testing::free_port()));
}

TEST(GlooGroup, ADeadPeerFailsTheOthersWithinTheTimeout) {
  const auto results = testing::run_ranks("GlooWorker.DISABLED_PeerDies", 3, testing::free_port(),
                                          {"KESTREL_TEST_TIMEOUT=3"});
  EXPECT_TRUE(results[0].ok()) << testing::describe(results);
  EXPECT_TRUE(results[1].killed_by(SIGKILL)) << testing::describe(results);
  EXPECT_TRUE(results[2].ok()) << testing::describe(results);
}

TEST(GlooGroup, AStuckPeerTimesOut) {
  const auto results = testing::run_ranks("GlooWorker.DISABLED_PeerStuck", 2, testing::free_port(),
                                          {"KESTREL_TEST_TIMEOUT=1"});
  EXPECT_TRUE(results[0].ok()) << testing::describe(results);
}

TEST(GlooGroup, AMissingPeerFailsStartUpWithinTheTimeout) {
  DistOptions o;
  o.world_size = 2;  // rank 1 never comes
  o.master_port = testing::free_port();
  o.timeout = 1s;
  const auto start = Clock::now();
  const std::string msg = error_of([&] { init_process_group("gloo", o, Device::cpu()); });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 4.0);
  EXPECT_NE(msg.find("rank 0: timed out after 1 s waiting for key 'gloo/1'"), std::string::npos)
      << msg;
}

TEST(GlooGroup, SingleRankNeedsNoNetworkAndChecksItsInput) {
  DistOptions o;  // world size 1: no store, no port
  auto pg = init_process_group("gloo", o, Device::cpu());
  EXPECT_EQ(pg->backend(), "gloo");
  Tensor x = Tensor::full({3}, 2.5, DType::BF16);
  pg->all_reduce(x, ReduceOp::Average)->wait();
  EXPECT_TRUE(testing::all_close(x, Tensor::full({3}, 2.5, DType::F64), 0.0, 0.0));
  Tensor out = Tensor::zeros({3}, DType::BF16);
  pg->all_gather(out, x)->wait();
  EXPECT_TRUE(testing::all_close(out, x, 0.0, 0.0));
  pg->barrier()->wait();

  Tensor strided = Tensor::zeros({4, 4}).slice(1, 0, 4, 2);
  EXPECT_NE(error_of([&] { pg->all_reduce(strided); }).find("contiguous"), std::string::npos);
  EXPECT_NE(error_of([&] {
              pg->all_reduce(Tensor::zeros({2}, DType::I32), ReduceOp::Average);
            }).find("would truncate"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pg->broadcast(x, 1); }).find("root 1"), std::string::npos);
  EXPECT_NE(error_of([&] {
              pg->all_gather(Tensor::zeros({4}, DType::BF16), x);
            }).find("out must hold 1 x in.numel()"),
            std::string::npos);
  EXPECT_NE(error_of([&] { init_process_group("mpi", o, Device::cpu()); }).find("unknown backend"),
            std::string::npos);
  EXPECT_NE(error_of([&] { init_process_group("nccl", o, Device::cpu()); })
                .find("the nccl backend needs a CUDA device"),
            std::string::npos);
}

}  // namespace
}  // namespace kestrel::dist
