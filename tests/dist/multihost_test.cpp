// The multi-host harness (tests/support/netns_hosts.h) and what needs no training: hosts reach
// each other through shaped links and leave nothing behind, the peer probe tells live hosts from
// silent ones, and a rendezvous with a master address where nothing answers fails within
// --dist-timeout naming the address. Needs root (skips otherwise). The training runs across hosts
// are in multihost_training_test.cpp.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "dist/env.h"
#include "dist/launcher.h"
#include "dist/process_group.h"
#include "dist/peer_probe.h"
#include "tests/dist/spawn.h"
#include "tests/dist/multihost_common.h"
#include "tests/support/netns_hosts.h"
#include "tests/support/testing.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using kestrel::testing::LinkShape;
using kestrel::testing::NetnsHosts;
using kestrel::testing::wait_exit;

using kestrel::testing::expect_nothing_left;
using kestrel::testing::read_file;
constexpr const char* kPort = kestrel::testing::kMultihostPort;

// --- the harness itself --------------------------------------------------------------------------

std::set<std::string> root_links() {
  std::set<std::string> names;
  std::stringstream lines(kestrel::testing::run_command({"ip", "-o", "link"}).output);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) names.insert(line.substr(colon + 2, line.find(':', colon + 2) - colon - 2));
  }
  return names;
}

// Host `to` listens on `port` and receives one connection to its end; host `from` connects
// (retrying while nothing listens yet) and sends `bytes`. Returns the milliseconds from the
// connect call to the receiver's end of data (connection set-up and transfer), -1 on failure.
int transfer_ms(const NetnsHosts& hosts, int from, int to, int port, size_t bytes) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return -1;
  const pid_t receiver = hosts.fork_in(to, [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 1) != 0) return 1;
    const int conn = ::accept(fd, nullptr, nullptr);
    std::vector<char> buf(1 << 16);
    while (::read(conn, buf.data(), buf.size()) > 0) {
    }
    return ::write(conn, "k", 1) == 1 ? 0 : 1;  // tells the sender that everything arrived
  });
  const std::string address = hosts.address(to);
  const pid_t sender = hosts.fork_in(from, [&] {
    for (int attempt = 0; attempt < 250; ++attempt) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
      const auto start = Clock::now();
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(fd);
        std::this_thread::sleep_for(20ms);
        continue;
      }
      const std::vector<char> data(bytes, 'x');
      for (size_t sent = 0; sent < bytes;) {
        const ssize_t n = ::write(fd, data.data() + sent, bytes - sent);
        if (n <= 0) return 1;
        sent += static_cast<size_t>(n);
      }
      ::shutdown(fd, SHUT_WR);
      char ack = 0;
      if (::read(fd, &ack, 1) != 1) return 1;
      const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
      return ::write(pipe_fds[1], &ms, sizeof ms) == sizeof ms ? 0 : 1;
    }
    return 1;
  });
  ::close(pipe_fds[1]);
  int ms = -1;
  if (::read(pipe_fds[0], &ms, sizeof ms) != sizeof ms) ms = -1;
  ::close(pipe_fds[0]);
  if (wait_exit(sender, 30s) != 0 || wait_exit(receiver, 30s) != 0) return -1;
  return ms;
}

// Host `from` sends `count` UDP datagrams to host `to`, 200 us apart; returns how many arrived
// (-1 on failure).
int datagrams_through(const NetnsHosts& hosts, int from, int to, int port, int count) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return -1;
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t receiver = hosts.fork_in(to, [&] {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 1;
    if (::write(ready[1], "r", 1) != 1) return 1;
    timeval idle{1, 0};  // the last datagram is followed by a second of silence
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
    int received = 0;
    char buf[64];
    while (::recv(fd, buf, sizeof buf, 0) > 0) ++received;
    return ::write(pipe_fds[1], &received, sizeof received) == sizeof received ? 0 : 1;
  });
  char r = 0;
  if (::read(ready[0], &r, 1) != 1) return -1;
  const std::string address = hosts.address(to);
  const pid_t sender = hosts.fork_in(from, [&] {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
    for (int i = 0; i < count; ++i) {
      if (::sendto(fd, "x", 1, 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 1) return 1;
      std::this_thread::sleep_for(200us);
    }
    return 0;
  });
  for (int fd : {pipe_fds[1], ready[0], ready[1]}) ::close(fd);
  int received = -1;
  if (::read(pipe_fds[0], &received, sizeof received) != sizeof received) received = -1;
  ::close(pipe_fds[0]);
  if (wait_exit(sender, 30s) != 0 || wait_exit(receiver, 30s) != 0) return -1;
  return received;
}

// The user-space link emulator (bench/linkem), which gives links delay and loss where the kernel
// has no netem: asked for here even where it has. Rate, delay and loss take, reshaping takes, a
// cut link carries nothing, and a link shaped without emulate goes back to a veth pair.
TEST(MultiHost, TheLinkEmulatorShapesRateDelayAndLoss) {
  SKIP_WITHOUT_NETNS();
  if (const std::string why = NetnsHosts::emulator_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::set<std::string> links_before = root_links();
  {
    NetnsHosts hosts(2, LinkShape{0, 0, 20, true});
    ASSERT_TRUE(hosts.emulated(0) && hosts.emulated(1));
    // 2 MB over two 20 Mbit/s links: at least 0.8 s of serialisation on each.
    const int shaped = transfer_ms(hosts, 1, 0, 5010, 2'000'000);
    EXPECT_GE(shaped, 780) << "the emulator's rate did not take";
    EXPECT_LT(shaped, 3000) << "the emulator is far slower than its rate";
    // 25 ms each way on each of the two links: a connection's set-up and the end-of-data
    // acknowledgement take two round trips over both, 4 x 2 x 25 ms.
    hosts.shape(0, LinkShape{25, 0, 0, true});
    hosts.shape(1, LinkShape{25, 0, 0, true});
    const int delayed = transfer_ms(hosts, 1, 0, 5011, 1);
    EXPECT_GE(delayed, 200) << "the emulator's delay did not take";
    EXPECT_LT(delayed, 1000);
    // 20 % loss on one link only: about 800 of 1000 datagrams arrive (binomial sd 13).
    hosts.shape(0, LinkShape{0, 20, 0, true});
    hosts.shape(1, LinkShape{0, 0, 0, true});
    const int arrived = datagrams_through(hosts, 1, 0, 5012, 1000);
    EXPECT_GE(arrived, 740) << "more lost than the emulator's 20 %";
    EXPECT_LE(arrived, 860) << "the emulator's loss did not take";
    hosts.shape(0, LinkShape{0, 0, 0, true});
    EXPECT_GE(datagrams_through(hosts, 1, 0, 5013, 200), 195) << "an unshaped emulated link loses datagrams";
    std::cout << "emulated links: 2 MB at 20 Mbit/s in " << shaped << " ms, 1 byte with 25 ms each way in "
              << delayed << " ms, " << arrived << " of 1000 datagrams through 20 % loss" << std::endl;
    hosts.cut(0);
    EXPECT_EQ(datagrams_through(hosts, 1, 0, 5014, 50), 0) << "a cut emulated link carried datagrams";
    hosts.restore(0);
    EXPECT_GE(datagrams_through(hosts, 1, 0, 5015, 50), 48) << "a restored emulated link carries nothing";
    hosts.shape(0, {});
    EXPECT_FALSE(hosts.emulated(0));
    EXPECT_GE(transfer_ms(hosts, 1, 0, 5016, 1), 0) << "host 1 cannot reach host 0 over its veth again";
  }
  EXPECT_EQ(root_links(), links_before) << "the harness left devices in the machine's namespace";
  expect_nothing_left();
}

// Rank `rank` of a 2-rank Gloo group in its host: after a warm-up, the median of 5 all-reduces of
// 1000 floats in ms (written to `out`), or a non-zero exit.
int time_all_reduce(const NetnsHosts& hosts, int rank, int port, int out) {
  using namespace kestrel;
  dist::DistFlags flags;
  flags.rank = rank;
  flags.world_size = 2;
  flags.master_addr = hosts.address(0);
  flags.master_port = port;
  flags.timeout = std::chrono::seconds(30);
  auto pg = dist::init_process_group("gloo", dist::resolve_dist_options(flags, dist::process_environment()),
                                     Device::cpu());
  Tensor x = Tensor::ones({1000}, DType::F32);
  pg->all_reduce(x)->wait();
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    pg->all_reduce(x)->wait();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  pg->barrier()->wait();
  std::sort(ms.begin(), ms.end());
  return ::write(out, &ms[2], sizeof(double)) == sizeof(double) ? 0 : 1;
}

// Between two hosts 40 ms apart (two links of 20 ms each way), a small all-reduce takes one round
// trip, 80 ms: the Gloo group's one exchange for 2 ranks (dist/gloo_group.cpp). Gloo's ring would
// take two (160 ms): each of its 2 steps waits for the peer's notice of a posted receive, then the
// data.
TEST(MultiHost, TwoRanksAllReduceInOneRoundTrip) {
  SKIP_WITHOUT_NETNS();
  if (const std::string why = NetnsHosts::delay_unavailable(); !why.empty()) GTEST_SKIP() << why;
  {
    NetnsHosts hosts(2, LinkShape{20, 0, 0});
    int pipes[2][2];
    ASSERT_EQ(::pipe(pipes[0]), 0);
    ASSERT_EQ(::pipe(pipes[1]), 0);
    const int port = 29400 + static_cast<int>(::getpid() % 500);
    pid_t ranks[2];
    for (int r = 0; r < 2; ++r)
      ranks[r] = hosts.fork_in(r, [&, r] { return time_all_reduce(hosts, r, port, pipes[r][1]); });
    double ms[2] = {-1, -1};
    for (int r = 0; r < 2; ++r) {
      ::close(pipes[r][1]);
      if (::read(pipes[r][0], &ms[r], sizeof(double)) != sizeof(double)) ms[r] = -1;
      ::close(pipes[r][0]);
    }
    for (int r = 0; r < 2; ++r) EXPECT_EQ(wait_exit(ranks[r], 60s), 0) << "rank " << r;
    std::cout << "all-reduce of 1000 floats between hosts 40 ms apart: " << ms[0] << " / " << ms[1] << " ms" << std::endl;
    for (int r = 0; r < 2; ++r) {
      EXPECT_GE(ms[r], 78) << "rank " << r << ": faster than a round trip?";
      EXPECT_LT(ms[r], 140) << "rank " << r << ": more than one round trip";
    }
  }
  expect_nothing_left();
}

TEST(MultiHost, HostsReachEachOtherThroughShapedLinksAndLeaveNothingBehind) {
  SKIP_WITHOUT_NETNS();
  const std::set<std::string> links_before = root_links();
  {
    NetnsHosts hosts(3, LinkShape{0, 0, 20});
    // 2 MB over 20 Mbit/s links: at least 0.8 s, where the bare veth takes milliseconds.
    const int shaped = transfer_ms(hosts, 1, 0, 5000, 2'000'000);
    EXPECT_GE(shaped, 700) << "the tbf rate limit did not take";
    hosts.shape(0, {});
    hosts.shape(1, {});
    const int bare = transfer_ms(hosts, 1, 0, 5000, 2'000'000);
    EXPECT_GE(bare, 0);
    EXPECT_LT(bare, shaped / 2) << "unshaping did not take";
    std::cout << "2 MB host 1 -> host 0: " << shaped << " ms at 20 Mbit/s, " << bare << " ms unshaped" << std::endl;
    // A connection's set-up crosses two links each way: 4 x 20 ms of delay (netem's, or the link
    // emulator's where the kernel has no netem).
    if (const std::string why = NetnsHosts::delay_unavailable(); why.empty()) {
      hosts.shape(0, LinkShape{20, 0, 0});
      hosts.shape(1, LinkShape{20, 0, 0});
      EXPECT_GE(transfer_ms(hosts, 1, 0, 5000, 1), 80) << "the delay did not take";
      EXPECT_EQ(hosts.emulated(0), !NetnsHosts::netem_unavailable().empty());
      hosts.shape(0, {});
      hosts.shape(1, {});
      EXPECT_FALSE(hosts.emulated(0));
      EXPECT_LT(transfer_ms(hosts, 1, 0, 5000, 1), 80) << "removing the delay did not take";
    } else {
      std::cout << "delay not tested: " << why << std::endl;
    }

    // Probes: a host that refuses answers; an address without a host, or a cut host, does not.
    using kestrel::dist::PeerHost;
    const std::vector<PeerHost> peers = {{0, hosts.address(0)}, {1, hosts.unused_address()}};
    const pid_t before_cut = hosts.fork_in(2, [&] {
      const auto silent = kestrel::dist::silent_peers(peers, 5001, 500ms);
      return silent.size() == 1 && silent[0].rank == 1 ? 0 : 1;
    });
    EXPECT_EQ(wait_exit(before_cut, 20s), 0) << "the probe misjudged a live or an absent host";
    hosts.cut(0);
    const pid_t after_cut = hosts.fork_in(2, [&] {
      return kestrel::dist::silent_peers({peers[0]}, 5001, 500ms).size() == 1 ? 0 : 1;
    });
    EXPECT_EQ(wait_exit(after_cut, 20s), 0) << "a cut host still answered";
    hosts.restore(0);
    const pid_t restored = hosts.fork_in(2, [&] {
      return kestrel::dist::silent_peers({peers[0]}, 5001, 2000ms).empty() ? 0 : 1;
    });
    EXPECT_EQ(wait_exit(restored, 20s), 0) << "a restored host does not answer";
  }
  expect_nothing_left();
  EXPECT_EQ(root_links(), links_before) << "the machine's own namespace gained or lost a link";
}

// A test process killed outright leaves its namespaces behind; the next harness removes them.
TEST(MultiHost, LeftoversOfAKilledTestAreRemoved) {
  SKIP_WITHOUT_NETNS();
  const pid_t doomed = ::fork();
  if (doomed == 0) {
    try {
      NetnsHosts hosts(2);
      ::kill(::getpid(), SIGKILL);
    } catch (...) {
    }
    ::_exit(1);
  }
  ASSERT_EQ(wait_exit(doomed, 60s), 128 + SIGKILL);
  EXPECT_EQ(NetnsHosts::namespaces_of(doomed).size(), 3u) << "the killed process made no hosts";
  { NetnsHosts fresh(1); }
  EXPECT_TRUE(NetnsHosts::namespaces_of(doomed).empty());
  expect_nothing_left();
}

TEST(MultiHost, LostPeersAreNamedWithTheirHosts) {
  using kestrel::dist::PeerHost;
  const std::vector<PeerHost> peers = {{0, "10.77.0.1"}, {2, "10.77.0.3"}};
  const std::string one = kestrel::dist::describe_lost_peers(peers, {{2, "10.77.0.3"}}, 2s);
  EXPECT_NE(one.find("rank 2 at 10.77.0.3 stopped answering"), std::string::npos) << one;
  EXPECT_EQ(one.find("lost its network"), std::string::npos) << one;
  const std::string all = kestrel::dist::describe_lost_peers(peers, peers, 2s);
  EXPECT_NE(all.find("rank 0 at 10.77.0.1 and rank 2 at 10.77.0.3 stopped answering"), std::string::npos) << all;
  EXPECT_NE(all.find("this host may have lost its network"), std::string::npos) << all;
  const std::string none = kestrel::dist::describe_lost_peers(peers, {}, 2s);
  EXPECT_NE(none.find("every peer's host answers"), std::string::npos) << none;
}

// A master address in the subnet where no host is: the rendezvous gives up after --dist-timeout
// with a message that names the address, instead of waiting forever.
TEST(MultiHost, ARendezvousWithASilentMasterFailsWithinTheTimeout) {
  SKIP_WITHOUT_NETNS();
  const fs::path dir = kestrel::testing::temp_dir("multihost");
  {
    NetnsHosts hosts(1);
    std::vector<std::string> args = {(kestrel::dist::current_executable().parent_path() / "kestrel").string(),
                                     "train", "--cfg", "models/yolov5n.yaml", "--device", "cpu", "--img-size", "64",
                                     "--batch-size", "2", "--epochs", "1", "--project", (dir / "silent").string()};
    for (const std::string& a : {std::string("--nnodes"), std::string("2"), std::string("--node-rank"), std::string("1"),
                                 std::string("--master-addr"), hosts.unused_address(), std::string("--master-port"),
                                 std::string(kPort), std::string("--dist-timeout"), std::string("4")})
      args.push_back(a);
    const auto t0 = Clock::now();
    const pid_t pid = hosts.spawn(0, args, dir / "silent.log");
    const std::optional<int> rc = wait_exit(pid, 120s);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string log = read_file(dir / "silent.log") + read_file(dir / "silent/rank1.log");
    ASSERT_TRUE(rc.has_value()) << "the rendezvous hung\n" << log;
    EXPECT_NE(*rc, 0) << log;
    EXPECT_LT(seconds, 4 + 15.0) << log;
    EXPECT_NE(log.find("could not reach the rendezvous store at " + hosts.unused_address() + ":" + kPort + " within 4 s"),
              std::string::npos) << log;
    EXPECT_NE(log.find("no host answers at " + hosts.unused_address()), std::string::npos) << log;
  }
  expect_nothing_left();
  fs::remove_all(dir);
}

}  // namespace
