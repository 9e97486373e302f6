#include "dist/env.h"

#include <gtest/gtest.h>

#include <map>

#include "base/error.h"

namespace kestrel::dist {
namespace {

EnvLookup table(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(const DistFlags& flags, const EnvLookup& env) {
  try {
    resolve_dist_options(flags, env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_options(const DistOptions& o, int rank, int world, int local, const std::string& addr,
                    int port) {
  EXPECT_EQ(o.rank, rank);
  EXPECT_EQ(o.world_size, world);
  EXPECT_EQ(o.local_rank, local);
  EXPECT_EQ(o.master_addr, addr);
  EXPECT_EQ(o.master_port, port);
}

TEST(DistEnv, NothingSetMeansOneProcess) {
  EXPECT_EQ(detect_launcher(table({})), "");
  expect_options(resolve_dist_options({}, table({})), 0, 1, 0, "127.0.0.1", 29500);
}

TEST(DistEnv, Torchrun) {
  auto env = table({{"RANK", "5"},
                    {"WORLD_SIZE", "8"},
                    {"LOCAL_RANK", "1"},
                    {"MASTER_ADDR", "10.0.0.7"},
                    {"MASTER_PORT", "23456"}});
  EXPECT_EQ(detect_launcher(env), "torchrun");
  DistFlags flags;
  flags.timeout = std::chrono::seconds(42);
  const DistOptions o = resolve_dist_options(flags, env);
  expect_options(o, 5, 8, 1, "10.0.0.7", 23456);
  EXPECT_EQ(o.timeout.count(), 42);
  // Without LOCAL_RANK the job is taken to run on one node.
  expect_options(resolve_dist_options({}, table({{"RANK", "2"}, {"WORLD_SIZE", "3"}})), 2, 3, 2,
                 "127.0.0.1", 29500);
  EXPECT_NE(error_of({}, table({{"RANK", "1"}})).find("RANK and WORLD_SIZE must be set together"),
            std::string::npos);
}

// Kestrel's launcher numbers its attempts: the store of one attempt turns away ranks of another.
TEST(DistEnv, RestartCount) {
  EXPECT_EQ(resolve_dist_options({}, table({{"RANK", "0"}, {"WORLD_SIZE", "2"}})).restart_count, 0);
  EXPECT_EQ(resolve_dist_options({}, table({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"KESTREL_RESTART_COUNT", "2"}}))
                .restart_count,
            2);
  EXPECT_NE(error_of({}, table({{"KESTREL_RESTART_COUNT", "x"}})).find("KESTREL_RESTART_COUNT"), std::string::npos);
  EXPECT_NE(error_of({}, table({{"KESTREL_RESTART_COUNT", "-1"}})).find("KESTREL_RESTART_COUNT"), std::string::npos);
}

// torchrun's agent listens on MASTER_PORT itself (PyTorch's store): Kestrel's ranks meet through it
// (rank 0 posts where it hosts Kestrel's store), unless --master-port names a port; without the
// agent store MASTER_PORT is ours. torchrun's restart count names the attempt.
TEST(DistEnv, TorchrunAgentStoreKeepsMasterPort) {
  std::map<std::string, std::string> vars = {{"RANK", "1"},
                                             {"WORLD_SIZE", "2"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "localhost"},
                                             {"MASTER_PORT", "38513"},
                                             {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                             {"TORCHELASTIC_RESTART_COUNT", "3"}};
  DistOptions o = resolve_dist_options({}, table(vars));
  expect_options(o, 1, 2, 1, "localhost", 38513);
  EXPECT_TRUE(o.torch_agent_store);
  EXPECT_EQ(o.restart_count, 3);
  DistFlags flags;
  flags.master_port = 31000;
  o = resolve_dist_options(flags, table(vars));
  expect_options(o, 1, 2, 1, "localhost", 31000);
  EXPECT_FALSE(o.torch_agent_store);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  o = resolve_dist_options({}, table(vars));
  expect_options(o, 1, 2, 1, "localhost", 38513);
  EXPECT_FALSE(o.torch_agent_store);
  vars["TORCHELASTIC_RESTART_COUNT"] = "-1";
  EXPECT_NE(error_of({}, table(vars)).find("TORCHELASTIC_RESTART_COUNT"), std::string::npos);
}

TEST(DistEnv, OpenMpi) {
  auto env = table({{"OMPI_COMM_WORLD_RANK", "3"},
                    {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(detect_launcher(env), "Open MPI");
  expect_options(resolve_dist_options({}, env), 3, 4, 3, "127.0.0.1", 29500);
  // Two nodes: rank 0's host must be named.
  std::map<std::string, std::string> two_nodes = {{"OMPI_COMM_WORLD_RANK", "5"},
                                                  {"OMPI_COMM_WORLD_SIZE", "8"},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  EXPECT_NE(error_of({}, table(two_nodes)).find("--master-addr"), std::string::npos);
  two_nodes["MASTER_ADDR"] = "head";
  expect_options(resolve_dist_options({}, table(two_nodes)), 5, 8, 1, "head", 29500);
  DistFlags flags;
  flags.master_addr = "10.1.1.1";
  two_nodes.erase("MASTER_ADDR");
  expect_options(resolve_dist_options(flags, table(two_nodes)), 5, 8, 1, "10.1.1.1", 29500);
}

TEST(DistEnv, Slurm) {
  std::map<std::string, std::string> vars = {{"SLURM_PROCID", "6"},
                                             {"SLURM_NTASKS", "8"},
                                             {"SLURM_LOCALID", "2"},
                                             {"SLURM_JOB_NODELIST", "gpu[07-08,11],cpu1"},
                                             {"SLURM_NODELIST", "ignored[1-2]"}};
  EXPECT_EQ(detect_launcher(table(vars)), "SLURM");
  expect_options(resolve_dist_options({}, table(vars)), 6, 8, 2, "gpu07", 29500);
  vars.erase("SLURM_JOB_NODELIST");
  expect_options(resolve_dist_options({}, table(vars)), 6, 8, 2, "ignored1", 29500);
  vars["MASTER_ADDR"] = "login";
  vars["MASTER_PORT"] = "31000";
  expect_options(resolve_dist_options({}, table(vars)), 6, 8, 2, "login", 31000);
}

TEST(DistEnv, FlagsWinAndTorchrunWinsOverTheSchedulerAroundIt) {
  // `srun kestrel train --nproc-per-node 4`: the workers see both; the launcher's values count.
  auto env = table({{"RANK", "3"},
                    {"WORLD_SIZE", "4"},
                    {"LOCAL_RANK", "3"},
                    {"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "1"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_JOB_NODELIST", "n1"}});
  expect_options(resolve_dist_options({}, env), 3, 4, 3, "127.0.0.1", 29500);
  DistFlags flags;
  flags.rank = 1;
  flags.local_rank = 0;
  flags.master_port = 4000;
  expect_options(resolve_dist_options(flags, env), 1, 4, 0, "127.0.0.1", 4000);
}

TEST(DistEnv, BadValuesAreRefusedNamingTheirSource) {
  EXPECT_NE(error_of({}, table({{"RANK", "two"}, {"WORLD_SIZE", "4"}}))
                .find("RANK must be an integer, got 'two'"),
            std::string::npos);
  EXPECT_NE(
      error_of({}, table({{"RANK", "4"}, {"WORLD_SIZE", "4"}})).find("RANK=4 with WORLD_SIZE=4"),
      std::string::npos);
  DistFlags flags;
  flags.rank = -1;
  EXPECT_NE(error_of(flags, table({})).find("--rank -1"), std::string::npos);
  EXPECT_NE(error_of({}, table({{"MASTER_PORT", "70000"}})).find("MASTER_PORT=70000"),
            std::string::npos);
  EXPECT_NE(error_of({}, table({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}))
                .find("SLURM_JOB_NODELIST"),
            std::string::npos);
  DistFlags zero_timeout;
  zero_timeout.timeout = std::chrono::seconds(0);
  EXPECT_NE(error_of(zero_timeout, table({})).find("timeout must be positive"), std::string::npos);
}

TEST(DistEnv, HostListExpansion) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_host_list("node[01-04,07]"),
            (V{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_host_list("a1,b[2-3]-ib,c[8-10]"),
            (V{"a1", "b2-ib", "b3-ib", "c8", "c9", "c10"}));
  EXPECT_EQ(expand_host_list("r[1-2]n[08-09]"), (V{"r1n08", "r1n09", "r2n08", "r2n09"}));
  EXPECT_EQ(expand_host_list("solo"), (V{"solo"}));
  EXPECT_EQ(expand_host_list("x[098-100]"), (V{"x098", "x099", "x100"}));
  for (const char* bad : {"node[1-", "node1]", "node[3-1]", "node[a-b]"})
    EXPECT_THROW(expand_host_list(bad), Error) << bad;
}

// The data loader's share of the cores divides by the ranks on this machine.
TEST(DistEnv, LocalWorldSize) {
  EXPECT_EQ(local_world_size(table({})), 1);
  EXPECT_EQ(local_world_size(table({{"LOCAL_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})), 4);
  EXPECT_EQ(local_world_size(table({{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})), 2);
  EXPECT_EQ(local_world_size(table({{"SLURM_NTASKS_PER_NODE", "8"}})), 8);
  EXPECT_THROW(local_world_size(table({{"LOCAL_WORLD_SIZE", "0"}})), Error);
  EXPECT_THROW(local_world_size(table({{"LOCAL_WORLD_SIZE", "two"}})), Error);
}

}  // namespace
}  // namespace kestrel::dist
