// DDP across hosts with addresses of their own: the hosts are network namespaces joined through a
// bridge (tests/support/netns_hosts.h), each running `kestrel train --nnodes 2 --node-rank R
// --master-addr <host 0> --nproc-per-node 1`. Shows that two nodes train as one process on the
// whole batch, that a cut link fails every node within --dist-timeout naming the lost rank and
// host, that --max-restarts brings a job whose host lost its workers back from the newest
// checkpoint to the uninterrupted result, and that a master address where nothing answers fails
// the rendezvous within the timeout. Needs root (skips otherwise); runs the `kestrel` binary built
// next to this test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "dist/launcher.h"
#include "dist/peer_probe.h"
#include "engine/safetensors.h"
#include "tests/dist/spawn.h"
#include "tests/support/netns_hosts.h"
#include "tests/support/testing.h"
#include "tests/yolo/training_state.h"
#include "yolo/data/synthetic.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using kestrel::testing::LinkShape;
using kestrel::testing::NetnsHosts;

#define SKIP_WITHOUT_NETNS()                                              \
  if (const std::string why = NetnsHosts::unavailable(); !why.empty()) \
  GTEST_SKIP() << why

constexpr const char* kPort = "29500";  // each host has ports of its own: no clash with other jobs

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t result_rows(const fs::path& csv) {
  std::stringstream in(read_file(csv));
  size_t rows = 0;
  for (std::string line; std::getline(in, line);) rows += !line.empty();
  return rows > 0 ? rows - 1 : 0;
}

fs::path kestrel_binary() { return kestrel::dist::current_executable().parent_path() / "kestrel"; }

// The exit code, or nullopt when the process had to be killed at the deadline.
std::optional<int> wait_exit(pid_t pid, std::chrono::seconds deadline) {
  const auto stop = Clock::now() + deadline * kestrel::testing::kSanitizerSlowdown;
  int status = 0;
  for (pid_t done; (done = ::waitpid(pid, &status, WNOHANG)) != pid;) {
    if (done < 0) return std::nullopt;
    if (Clock::now() > stop) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The children of `parent` (a launcher's workers).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::stringstream stat(read_file(entry.path() / "stat"));
    std::string pid, comm, state;
    pid_t ppid = 0;
    stat >> pid >> comm >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// The tiny CPU job every test here trains: YOLOv5n at 64 px on the synthetic set, 3 batches of 4
// per epoch, no augmentation, SyncBN, and only the objectness loss (box and cls gains 0). The
// reference averages the box and class losses over each rank's own matched targets, so with
// those terms on, DDP equals one process only as far as every rank matches as many targets; the
// objectness loss averages over equally many cells on every rank. A 4-image val split keeps the
// final validation short.
class Job {
 public:
  explicit Job(const fs::path& dir) : dir_(dir) {
    const fs::path synthetic = kestrel::yolo::data::ensure_synthetic_dataset(
                                   kestrel::yolo::data::default_synthetic_dir());
    const fs::path root = synthetic.parent_path();
    fs::create_directories(dir / "val/images");
    fs::create_directories(dir / "val/labels");
    for (int i = 0; i < 4; ++i) {
      char stem[16];
      std::snprintf(stem, sizeof stem, "%06d", i);
      fs::copy_file(root / "images/val" / (std::string(stem) + ".jpg"), dir / "val/images" / (std::string(stem) + ".jpg"));
      fs::copy_file(root / "labels/val" / (std::string(stem) + ".txt"), dir / "val/labels" / (std::string(stem) + ".txt"));
    }
    std::ofstream(dir / "data.yaml") << "path: " << root.string() << "\ntrain: images/train\nval: "
                                     << (dir / "val/images").string()
                                     << "\nnc: 4\nnames: [circle, rectangle, triangle, cross]\n";
    std::ofstream(dir / "hyp.yaml")
        << "lr0: 0.01\nlrf: 0.01\nmomentum: 0.937\nweight_decay: 0.0005\nwarmup_epochs: 0.0\n"
           "warmup_momentum: 0.8\nwarmup_bias_lr: 0.1\nbox: 0.0\ncls: 0.0\ncls_pw: 1.0\nobj: 1.0\n"
           "obj_pw: 1.0\niou_t: 0.20\nanchor_t: 4.0\nfl_gamma: 0.0\nhsv_h: 0.0\nhsv_s: 0.0\nhsv_v: 0.0\n"
           "degrees: 0.0\ntranslate: 0.0\nscale: 0.0\nshear: 0.0\nperspective: 0.0\nflipud: 0.0\n"
           "fliplr: 0.0\nmosaic: 0.0\nmixup: 0.0\ncopy_paste: 0.0\n";
  }

  std::vector<std::string> train(const fs::path& project, int epochs) const {
    return {kestrel_binary().string(), "train", "--cfg", "models/yolov5n.yaml", "--device", "cpu",
            "--img-size", "64", "--batch-size", "4", "--epochs", std::to_string(epochs), "--workers", "1",
            "--max-batches", "3", "--noplots", "--noval", "--sync-bn", "--save-period", "1", "--hyp", (dir_ / "hyp.yaml").string(),
            "--data", (dir_ / "data.yaml").string(), "--project", project.string()};
  }

  // Node `node` of a 2-node job whose master is host 0.
  std::vector<std::string> node(const NetnsHosts& hosts, int node, const fs::path& project, int epochs,
                                const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = train(project, epochs);
    for (const std::string& a : {std::string("--nnodes"), std::string("2"), std::string("--node-rank"),
                                 std::to_string(node), std::string("--master-addr"), hosts.address(0),
                                 std::string("--master-port"), std::string(kPort), std::string("--nproc-per-node"),
                                 std::string("1")})
      args.push_back(a);
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

 private:
  fs::path dir_;
};

// One thread per process everywhere: oneDNN's results depend on the thread count, and two nodes
// share this machine's cores.
const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1"};

struct TwoNodes {
  pid_t node[2] = {-1, -1};
  fs::path log[2];
};

TwoNodes start_two_nodes(const NetnsHosts& hosts, const Job& job, const fs::path& project, int epochs,
                         const std::vector<std::string>& extra = {}) {
  fs::create_directories(project);
  TwoNodes t;
  for (int n = 0; n < 2; ++n) {
    t.log[n] = project.string() + ".node" + std::to_string(n) + ".log";
    t.node[n] = hosts.spawn(n, job.node(hosts, n, project, epochs, extra), t.log[n], kEnv);
  }
  return t;
}

// Every model and EMA tensor of the full checkpoint `a` (an epoch<N> copy: a finished run's last
// is stripped) equals b's within atol + rtol * |b|.
void expect_close_weights(const fs::path& a, const fs::path& b, double atol, double rtol) {
  const kestrel::SafetensorsFile fa = kestrel::load_safetensors(a.string());
  const kestrel::SafetensorsFile fb = kestrel::load_safetensors(b.string());
  int compared = 0;
  for (const std::string& name : fa.names()) {
    if (name.rfind("model.", 0) != 0 && name.rfind("ema.", 0) != 0) continue;
    ASSERT_TRUE(fb.contains(name)) << name << " is missing from " << b;
    EXPECT_TRUE(kestrel::testing::all_close(fa.get(name), fb.get(name), atol, rtol)) << name;
    ++compared;
  }
  EXPECT_GT(compared, 600) << "too few tensors compared: is " << a << " a training checkpoint?";
}

void expect_nothing_left() {
  EXPECT_TRUE(NetnsHosts::namespaces_of(::getpid()).empty()) << "a namespace of this test is left";
}

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
    if (const std::string why = NetnsHosts::netem_unavailable(); why.empty()) {
      // A connection's set-up crosses two links each way: 4 x 20 ms of delay.
      hosts.shape(0, LinkShape{20, 0, 0});
      hosts.shape(1, LinkShape{20, 0, 0});
      EXPECT_GE(transfer_ms(hosts, 1, 0, 5000, 1), 80) << "the netem delay did not take";
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

// --- training across hosts -----------------------------------------------------------------------

// Two nodes over 1 Gbit/s links (with 0.5 ms of delay where the kernel has netem) train as the
// local 2-process job does, bit for bit, and as one process on the whole batch does, to the
// tolerance of the local DDP equivalence test (tests/dist/ddp_test.cpp: 1e-6 + 1e-5 relative):
// summation orders differ (SyncBN statistics, gradient averaging), nothing else.
TEST(MultiHost, TwoNodesTrainAsOneProcessOnTheWholeBatch) {
  SKIP_WITHOUT_NETNS();
  ASSERT_TRUE(fs::exists(kestrel_binary())) << kestrel_binary() << " is missing: build the `kestrel` target too";
  const fs::path dir = kestrel::testing::temp_dir("multihost");
  const Job job(dir);
  {
    LinkShape link{0, 0, 1000};
    if (NetnsHosts::netem_unavailable().empty()) link.delay_ms = 0.5;
    NetnsHosts hosts(2, link);
    const auto t0 = Clock::now();
    const TwoNodes run = start_two_nodes(hosts, job, dir / "nodes", 2);
    for (int n = 0; n < 2; ++n) ASSERT_EQ(wait_exit(run.node[n], 300s), 0) << read_file(run.log[n]);
    std::cout << "2 nodes, 2 epochs: " << std::chrono::duration<double>(Clock::now() - t0).count() << " s" << std::endl;

    std::vector<std::string> local = job.train(dir / "local", 2);
    for (const char* a : {"--nproc-per-node", "2", "--master-port", kPort}) local.push_back(a);
    const pid_t local_pid = hosts.spawn(0, local, dir / "local.log", kEnv);
    ASSERT_EQ(wait_exit(local_pid, 300s), 0) << read_file(dir / "local.log");
    const pid_t single = hosts.spawn(0, job.train(dir / "single", 2), dir / "single.log", kEnv);
    ASSERT_EQ(wait_exit(single, 300s), 0) << read_file(dir / "single.log");
  }
  expect_nothing_left();
  const fs::path state = "exp/weights/epoch1.safetensors";
  EXPECT_EQ(result_rows(dir / "nodes/exp/results.csv"), 2u);
  EXPECT_EQ(read_file(dir / "nodes/exp/results.csv"), read_file(dir / "local/exp/results.csv"));
  kestrel::testing::expect_same_training_state(dir / "nodes" / state, dir / "local" / state);
  expect_close_weights(dir / "nodes" / state, dir / "single" / state, 1e-6, 1e-5);
  fs::remove_all(dir);
}

// Host 1's cable is pulled in the middle of epoch 1: both nodes fail within --dist-timeout (plus
// the peers' probe and the exit), non-zero, and each names the other's rank and host.
TEST(MultiHost, ACutLinkFailsEveryNodeNamingTheLostRankAndHost) {
  SKIP_WITHOUT_NETNS();
  const fs::path dir = kestrel::testing::temp_dir("multihost");
  const Job job(dir);
  const fs::path project = dir / "cut";
  constexpr int kTimeout = 5;
  {
    NetnsHosts hosts(2);
    const TwoNodes run = start_two_nodes(hosts, job, project, 50,
                                         {"--dist-timeout", std::to_string(kTimeout), "--dist-phase-timeout", "20"});
    const auto started = Clock::now();
    while (result_rows(project / "exp/results.csv") < 1 && Clock::now() - started < 240s &&
           ::waitpid(run.node[0], nullptr, WNOHANG) == 0)
      std::this_thread::sleep_for(20ms);
    ASSERT_EQ(result_rows(project / "exp/results.csv"), 1u) << read_file(run.log[0]);
    std::this_thread::sleep_for(300ms);  // into epoch 1's steps
    hosts.cut(1);
    const auto cut = Clock::now();
    std::optional<int> rc[2];
    for (int n = 0; n < 2; ++n) rc[n] = wait_exit(run.node[n], 120s);
    const double seconds = std::chrono::duration<double>(Clock::now() - cut).count();
    std::cout << "both nodes ended " << seconds << " s after the cut (--dist-timeout " << kTimeout << ")" << std::endl;
    const std::string log0 = read_file(run.log[0]), log1 = read_file(run.log[1]);
    for (int n = 0; n < 2; ++n) {
      ASSERT_TRUE(rc[n].has_value()) << "node " << n << " hung\n" << read_file(run.log[n]);
      EXPECT_NE(*rc[n], 0) << read_file(run.log[n]);
    }
    EXPECT_LT(seconds, kTimeout + 8.0) << log0 << log1;
    EXPECT_NE(log0.find("rank 1 at " + hosts.address(1) + " stopped answering"), std::string::npos) << log0;
    // Node 1's launcher quotes its worker's log: the same from the other side.
    EXPECT_NE(log1.find("rank 0 at " + hosts.address(0) + " stopped answering"), std::string::npos) << log1;
  }
  expect_nothing_left();
  fs::remove_all(dir);
}

// --max-restarts 1 on both nodes: host 1's workers are killed (SIGKILL) after the first epoch's
// checkpoint; every node restarts from it and the job ends where an uninterrupted run does.
TEST(MultiHost, AHostThatLostItsWorkersRestartsFromTheNewestCheckpoint) {
  SKIP_WITHOUT_NETNS();
  const fs::path dir = kestrel::testing::temp_dir("multihost");
  const Job job(dir);
  const std::vector<std::string> elastic = {"--max-restarts", "1", "--dist-timeout", "30"};
  {
    NetnsHosts hosts(2);
    const TwoNodes whole = start_two_nodes(hosts, job, dir / "whole", 3, elastic);
    for (int n = 0; n < 2; ++n) ASSERT_EQ(wait_exit(whole.node[n], 300s), 0) << read_file(whole.log[n]);

    const fs::path project = dir / "killed";
    const TwoNodes run = start_two_nodes(hosts, job, project, 3, elastic);
    const auto started = Clock::now();
    std::vector<pid_t> victims;
    while (victims.empty() && Clock::now() - started < 240s && ::waitpid(run.node[1], nullptr, WNOHANG) == 0) {
      if (fs::exists(project / "exp/weights/last.safetensors") && result_rows(project / "exp/results.csv") == 1)
        victims = children_of(run.node[1]);
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_FALSE(victims.empty()) << "no first-epoch checkpoint with host 1's workers running\n" << read_file(run.log[1]);
    for (pid_t pid : victims) ::kill(pid, SIGKILL);
    std::optional<int> rc[2];
    for (int n = 0; n < 2; ++n) rc[n] = wait_exit(run.node[n], 300s);
    const fs::path checkpoint = project / "exp/weights/last.safetensors";
    for (int n = 0; n < 2; ++n) {
      const std::string log = read_file(run.log[n]);
      ASSERT_EQ(rc[n], 0) << log;
      EXPECT_NE(log.find("restart 1/1: resuming from " + checkpoint.string()), std::string::npos) << log;
    }
    EXPECT_FALSE(fs::exists(project / "exp2"));
  }
  expect_nothing_left();
  EXPECT_EQ(result_rows(dir / "killed/exp/results.csv"), 3u);
  EXPECT_EQ(read_file(dir / "killed/exp/results.csv"), read_file(dir / "whole/exp/results.csv"));
  kestrel::testing::expect_same_training_state(dir / "killed/exp/weights/epoch2.safetensors",
                                               dir / "whole/exp/weights/epoch2.safetensors");
  fs::remove_all(dir);
}

// A master address in the subnet where no host is: the rendezvous gives up after --dist-timeout
// with a message that names the address, instead of waiting forever.
TEST(MultiHost, ARendezvousWithASilentMasterFailsWithinTheTimeout) {
  SKIP_WITHOUT_NETNS();
  const fs::path dir = kestrel::testing::temp_dir("multihost");
  const Job job(dir);
  {
    NetnsHosts hosts(1);
    std::vector<std::string> args = job.train(dir / "silent", 1);
    for (const std::string& a : {std::string("--nnodes"), std::string("2"), std::string("--node-rank"), std::string("1"),
                                 std::string("--master-addr"), hosts.unused_address(), std::string("--master-port"),
                                 std::string(kPort), std::string("--dist-timeout"), std::string("4")})
      args.push_back(a);
    const auto t0 = Clock::now();
    const pid_t pid = hosts.spawn(0, args, dir / "silent.log", kEnv);
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
