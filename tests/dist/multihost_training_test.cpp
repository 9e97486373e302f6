// DDP across hosts with addresses of their own: the hosts are network namespaces joined through a
// bridge (tests/support/netns_hosts.h), each running `kestrel train --nnodes 2 --node-rank R
// --master-addr <host 0> --nproc-per-node 1`. Shows that two nodes train as one process on the
// whole batch, that a cut link fails every node within --dist-timeout naming the lost rank and
// host, and that --max-restarts brings a job whose host lost its workers back from the newest
// checkpoint to the uninterrupted result. Needs root (skips otherwise); runs the `kestrel` binary
// built next to this test.
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
#include "engine/safetensors_tensors.h"
#include "tests/dist/multihost_common.h"
#include "tests/dist/spawn.h"
#include "tests/support/netns_hosts.h"
#include "tests/support/testing.h"
#include "tests/yolo/train/training_state.h"
#include "yolo/data/synthetic.h"

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

size_t result_rows(const fs::path& csv) {
  std::stringstream in(read_file(csv));
  size_t rows = 0;
  for (std::string line; std::getline(in, line);) rows += !line.empty();
  return rows > 0 ? rows - 1 : 0;
}

fs::path kestrel_binary() { return kestrel::dist::current_executable().parent_path() / "kestrel"; }

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
// per epoch (unless told), no augmentation, SyncBN, and only the objectness loss (box and cls
// gains 0). The
// reference averages the box and class losses over each rank's own matched targets, so with
// those terms on, DDP equals one process only as far as every rank matches as many targets; the
// objectness loss averages over equally many cells on every rank. A 4-image val split keeps the
// final validation short.
class Job {
 public:
  // batches: per epoch (--max-batches).
  explicit Job(const fs::path& dir, int batches = 3) : dir_(dir), batches_(batches) {
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
            "--max-batches", std::to_string(batches_), "--noplots", "--noval", "--sync-bn", "--save-period", "1", "--hyp", (dir_ / "hyp.yaml").string(),
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
  int batches_;
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
    EXPECT_TRUE(kestrel::testing::all_close(safetensors_tensor(fa, name), safetensors_tensor(fb, name), atol, rtol)) << name;
    ++compared;
  }
  EXPECT_GT(compared, 600) << "too few tensors compared: is " << a << " a training checkpoint?";
}

// --- training across hosts -----------------------------------------------------------------------

// Two nodes over 1 Gbit/s links with 0.5 ms of delay (netem's, or the user-space link emulator's
// where the kernel has no netem; none where neither can run) train as the local 2-process job does, bit for bit, and as one
// process on the whole batch does, to the tolerance of the local DDP equivalence test
// (tests/dist/ddp_test.cpp: 1e-6 + 1e-5 relative): summation orders differ (SyncBN statistics,
// gradient averaging), nothing else.
TEST(MultiHost, TwoNodesTrainAsOneProcessOnTheWholeBatch) {
  SKIP_WITHOUT_NETNS();
  ASSERT_TRUE(fs::exists(kestrel_binary())) << kestrel_binary() << " is missing: build the `kestrel` target too";
  const fs::path dir = kestrel::testing::temp_dir("multihost");
  const Job job(dir);
  {
    LinkShape link{0, 0, 1000};
    if (NetnsHosts::delay_unavailable().empty()) link.delay_ms = 0.5;
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
  const Job job(dir, 20);  // long epochs: the cut lands among epoch 1's steps, far from its end
  const fs::path project = dir / "cut";
  constexpr int kTimeout = 5;
  {
    NetnsHosts hosts(2);
    const TwoNodes run = start_two_nodes(hosts, job, project, 3,
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
    for (const std::string& log : {log0, log1}) {  // the failure as each node reports it
      const size_t at = log.find("stopped answering");
      if (at != std::string::npos) std::cout << log.substr(log.rfind('\n', at) + 1, log.find('\n', at) - log.rfind('\n', at)) << std::endl;
    }
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

}  // namespace
