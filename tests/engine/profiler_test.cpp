// The per-op profiler: off records nothing; on, the outermost scope on a thread is charged (an op
// that calls other ops is counted once, to itself); phases are kept apart; the table divides by
// the step count.
#include "engine/profiler.h"

#include <gtest/gtest.h>

#include <thread>

using namespace kestrel;

namespace {
void busy(int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
  }
}
}  // namespace

TEST(Profiler, OffRecordsNothing) {
  profiler::reset();
  profiler::enable(false);
  { const profiler::Scope s("Conv2d", profiler::Phase::Forward); }
  EXPECT_TRUE(profiler::rows().empty());
}

TEST(Profiler, OutermostScopeIsChargedOnce) {
  profiler::reset();
  profiler::enable(true);
  {
    const profiler::Scope outer("Conv2d", profiler::Phase::Backward);
    const profiler::Scope inner("Elementwise", profiler::Phase::Forward);
    busy(5);
  }
  { const profiler::Scope s("Silu", profiler::Phase::Forward); busy(2); }
  { const profiler::Scope s("Silu", profiler::Phase::Forward); }
  profiler::enable(false);
  const std::vector<profiler::Row> rows = profiler::rows();
  ASSERT_EQ(rows.size(), 2u);
  // Largest total first. Which op that is depends on the clock (a busy machine can stall the
  // 2 ms scope past the 5 ms one), so the order is checked on the totals, the rows by name.
  EXPECT_GE(rows[0].total_ms(), rows[1].total_ms());
  const profiler::Row& conv = rows[0].op == "Conv2d" ? rows[0] : rows[1];
  const profiler::Row& silu = rows[0].op == "Conv2d" ? rows[1] : rows[0];
  EXPECT_EQ(conv.op, "Conv2d");
  EXPECT_GE(conv.ms[1], 5.0);
  EXPECT_EQ(conv.calls[1], 1);
  EXPECT_EQ(conv.calls[0], 0);
  EXPECT_EQ(silu.op, "Silu");
  EXPECT_EQ(silu.calls[0], 2);
  EXPECT_GE(silu.ms[0], 2.0);
  const std::string t = profiler::table(2);
  EXPECT_NE(t.find("Conv2d"), std::string::npos) << t;
  EXPECT_NE(t.find("all ops"), std::string::npos) << t;
}

TEST(Profiler, EnablingInsideAScopeKeepsDepthsBalanced) {
  profiler::reset();
  profiler::enable(false);
  {
    const profiler::Scope before("Copy", profiler::Phase::Forward);  // not counted
    profiler::enable(true);
  }
  { const profiler::Scope s("Concat", profiler::Phase::Forward); }
  profiler::enable(false);
  ASSERT_EQ(profiler::rows().size(), 1u) << "a scope opened while off must not hide later ones";
  EXPECT_EQ(profiler::rows()[0].op, "Concat");
}

TEST(Profiler, ThreadsHaveTheirOwnDepth) {
  profiler::reset();
  profiler::enable(true);
  const profiler::Scope outer("Conv2d", profiler::Phase::Forward);
  std::thread([] { const profiler::Scope s("Silu", profiler::Phase::Forward); }).join();
  profiler::enable(false);
  bool silu = false;
  for (const auto& r : profiler::rows()) silu |= r.op == "Silu";
  EXPECT_TRUE(silu) << "another thread's outermost scope counts";
}
