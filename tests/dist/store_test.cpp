#include "dist/store.h"

#include <gtest/gtest.h>

#include <cstdlib>
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

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(TcpStore, SetGetAddWaitAcrossThreads) {
  const int port = testing::free_port();
  TcpStore host("127.0.0.1", port, /*is_host=*/true, 0, 5000ms);
  TcpStore a("127.0.0.1", port, false, 1, 5000ms);
  TcpStore b("localhost", port, false, 2, 5000ms);
  EXPECT_EQ(a.local_address(), "127.0.0.1");

  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    b.set("late", std::string("x\0y", 3));  // values are bytes, zeros included
  });
  const auto start = Clock::now();
  EXPECT_EQ(a.get("late"), std::string("x\0y", 3));  // get waits for the set
  EXPECT_GE(seconds_since(start), 0.15);
  late.join();

  host.set("k", "v1");
  host.set("k", "v2");  // overwrites
  EXPECT_EQ(b.get("k"), "v2");
  EXPECT_EQ(a.add("n", 5), 5);
  EXPECT_EQ(b.add("n", -2), 3);
  EXPECT_EQ(host.get("n"), "3");
  a.wait({"k", "n", "late"});
  EXPECT_NE(error_of([&] { host.add("k", 1); }).find("not an integer"), std::string::npos);
}

TEST(TcpStore, GetTimesOutWithAClearMessage) {
  const int port = testing::free_port();
  TcpStore store("127.0.0.1", port, true, 0, 400ms);
  const auto start = Clock::now();
  const std::string msg = error_of([&] { store.get("missing"); });
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.35);
  EXPECT_LT(took, 3.0);
  EXPECT_NE(msg.find("rank 0: timed out after 400 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'missing'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a peer may have died"), std::string::npos) << msg;
  // The timed-out reply is still owed on the connection: the store refuses further use.
  EXPECT_NE(error_of([&] { store.set("a", "b"); }).find("unusable"), std::string::npos);
}

TEST(TcpStore, WaitHonoursItsOwnTimeout) {
  const int port = testing::free_port();
  TcpStore store("127.0.0.1", port, true, 3, 10000ms);
  const auto start = Clock::now();
  const std::string msg = error_of([&] { store.wait({"a", "b"}, 300ms); });
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_NE(msg.find("rank 3: timed out after 300 ms waiting for keys 'a', 'b'"), std::string::npos)
      << msg;
}

TEST(TcpStore, PortInUseNamesTheFix) {
  const int port = testing::free_port();
  TcpStore first("127.0.0.1", port, true, 0, 1000ms);
  const std::string msg = error_of([&] { TcpStore second("127.0.0.1", port, true, 0, 1000ms); });
  EXPECT_NE(msg.find("already in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use another --master-port"), std::string::npos) << msg;
}

TEST(TcpStore, UnreachableHostFailsWithinTheTimeout) {
  const int port = testing::free_port();  // nobody listens there
  const auto start = Clock::now();
  const std::string msg = error_of([&] { TcpStore s("127.0.0.1", port, false, 2, 500ms); });
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_NE(msg.find("rank 2: could not reach the rendezvous store at 127.0.0.1:"),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of([] {
              TcpStore s("no-such-host.invalid", 29500, false, 1, 500ms);
            }).find("cannot resolve the master address"),
            std::string::npos);
}

TEST(TcpStore, HostGoingAwayFailsWaitingClients) {
  const int port = testing::free_port();
  auto host = std::make_unique<TcpStore>("127.0.0.1", port, true, 0, 10000ms);
  TcpStore client("127.0.0.1", port, false, 1, 10000ms);
  std::thread stop([&] {
    std::this_thread::sleep_for(200ms);
    host.reset();
  });
  const auto start = Clock::now();
  const std::string msg = error_of([&] { client.get("never"); });
  stop.join();
  EXPECT_LT(seconds_since(start), 5.0);  // well before the 10 s timeout
  EXPECT_NE(msg.find("lost the connection"), std::string::npos) << msg;
}

// A rank whose connection closes (its process exited or died, or keep-alive found its host gone)
// fails the waits its keys do not satisfy at once, naming it and its host, however long their
// limit; a wait that is already satisfied still succeeds.
TEST(TcpStore, ARankLeavingFailsTheWaitsItCouldNeverSatisfy) {
  const int port = testing::free_port();
  TcpStore host("127.0.0.1", port, true, 0, 60000ms);
  TcpStore rank1("127.0.0.1", port, false, 1, 60000ms);
  auto rank2 = std::make_unique<TcpStore>("127.0.0.1", port, false, 2, 60000ms);
  rank2->set("from-2", "x");
  std::thread leave([&] {
    std::this_thread::sleep_for(300ms);
    rank2.reset();
  });
  const auto start = Clock::now();
  const std::string pending = error_of([&] { rank1.wait({"never"}, 60000ms); });  // waiting as it leaves
  leave.join();
  EXPECT_LT(seconds_since(start), 5.0);  // not the 60 s limit
  EXPECT_NE(pending.find("rank 1: the rendezvous store at 127.0.0.1:"), std::string::npos) << pending;
  EXPECT_NE(pending.find("rank 2 (host 127.0.0.1) has left the job"), std::string::npos) << pending;

  const std::string later = error_of([&] { host.get("never"); });  // asked after it left
  EXPECT_NE(later.find("rank 2 (host 127.0.0.1) has left the job"), std::string::npos) << later;
  TcpStore rank1_again("127.0.0.1", port, false, 1, 60000ms);  // the first one's connection broke
  EXPECT_EQ(rank1_again.get("from-2"), "x");  // satisfied waits are unaffected
}

// Worker: every rank publishes a key, bumps a counter, and reads everyone else's key.
// After a restart, a rank of the new attempt that finds the old attempt's store still up (its host
// has not noticed the failure yet) is turned away and keeps trying until the new store is there.
TEST(TcpStore, ARankOfTheNextAttemptWaitsForItsOwnStore) {
  const int port = testing::free_port();
  auto old_store = std::make_unique<TcpStore>("127.0.0.1", port, true, 0, 5000ms, /*generation=*/0);
  const std::string msg = error_of([&] { TcpStore("127.0.0.1", port, false, 1, 300ms, 1); });
  EXPECT_NE(msg.find("the store there serves attempt 0 of the job, this rank belongs to attempt 1"),
            std::string::npos) << msg;

  std::unique_ptr<TcpStore> new_store;
  std::thread restart([&] {
    std::this_thread::sleep_for(300ms);
    old_store.reset();
    new_store = std::make_unique<TcpStore>("127.0.0.1", port, true, 0, 5000ms, 1);
    new_store->set("attempt", "1");
  });
  TcpStore rank1("127.0.0.1", port, false, 1, 5000ms, 1);
  EXPECT_EQ(rank1.get("attempt"), "1");
  restart.join();
}

TEST(TcpStoreWorker, DISABLED_Exchange) {
  const DistOptions o = resolve_dist_options({}, process_environment());
  TcpStore store(o.master_addr, o.master_port, o.rank == 0, o.rank, 10000ms);
  store.set("key/" + std::to_string(o.rank), "value " + std::to_string(o.rank));
  store.add("counter", o.rank + 1);
  store.set("added/" + std::to_string(o.rank), "1");
  std::vector<std::string> added;
  for (int r = 0; r < o.world_size; ++r) added.push_back("added/" + std::to_string(r));
  store.wait(added);
  for (int r = 0; r < o.world_size; ++r)
    EXPECT_EQ(store.get("key/" + std::to_string(r)), "value " + std::to_string(r));
  EXPECT_EQ(store.get("counter"), "6");  // 1 + 2 + 3
  // Rank 0 hosts the store: it leaves only once everyone has finished reading.
  store.add("finished", 1);
  if (o.rank == 0)
    while (store.add("finished", 0) < o.world_size) std::this_thread::sleep_for(10ms);
}

TEST(TcpStore, ThreeProcessesExchangeKeys) {
  const auto results =
      testing::run_ranks("TcpStoreWorker.DISABLED_Exchange", 3, testing::free_port());
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << testing::describe(results);
}

}  // namespace
}  // namespace kestrel::dist
