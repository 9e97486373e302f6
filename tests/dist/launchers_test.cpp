// `kestrel train` started by the launchers clusters use, each training one epoch with 2 Gloo ranks
// on the CPU: torchrun (PyTorch from PyPI, in the venv scripts/install-torch-venv.sh makes at
// $KESTREL_TORCH_VENV, default /opt/kestrel-torch), Open MPI's mpirun, and srun's environment
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST) given by hand to two processes.
// Both ranks running data-parallel shows in the per-rank traces (--trace writes FILE.rank<R> for
// every rank of a multi-rank run, and only there). torchrun and mpirun tests skip, naming the
// install step, where the launcher is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/dist/spawn.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::kestrel_binary;
using kestrel::testing::run_command;

namespace {

// One epoch of two batches at 64 pixels, no validation: a few seconds per run.
std::string tiny_train(const fs::path& project) {
  return kestrel_binary().string() +
         " train --cfg models/yolov5n.yaml --device cpu --img-size 64 --epochs 1 --workers 1"
         " --max-batches 2 --noplots --noval --batch-size 4 --project " + project.string() +
         " --trace " + (project / "trace.json").string();
}

void expect_two_rank_epoch(const CliResult& r, const fs::path& project) {
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(project / "exp" / "weights" / "last.safetensors")) << r.out;
  EXPECT_TRUE(fs::exists(project / "trace.json.rank0")) << r.out;
  EXPECT_TRUE(fs::exists(project / "trace.json.rank1")) << "rank 1 did not train: " << r.out;
  EXPECT_FALSE(fs::exists(project / "trace.json.rank2")) << r.out;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

TEST(Launchers, Torchrun) {
  const fs::path venv = env_or("KESTREL_TORCH_VENV", "/opt/kestrel-torch");
  const fs::path torchrun = venv / "bin" / "torchrun";
  if (!fs::exists(torchrun))
    GTEST_SKIP() << "no torchrun at " << torchrun
                 << ": run scripts/install-torch-venv.sh (PyTorch from PyPI; Debian's 1.13 "
                    "torchrun fails on Python 3.11)";
  const fs::path project = kestrel::testing::temp_dir("torchrun");
  // The CUDA toolkit supplies the libraries the wheel's libtorch_cuda links (import torch needs
  // them even on the CPU).
  const std::string old_path = env_or("LD_LIBRARY_PATH", "");
  const std::string lib_path =
      env_or("CUDA_HOME", "/usr/local/cuda") + "/lib64" + (old_path.empty() ? "" : ":" + old_path);
  const CliResult r = run_command("LD_LIBRARY_PATH=" + lib_path + " timeout 300 " + torchrun.string() +
                                  " --no-python --nnodes 1 --nproc-per-node 2 " + tiny_train(project));
  expect_two_rank_epoch(r, project);
  fs::remove_all(project);
}

TEST(Launchers, Mpirun) {
  if (run_command("command -v mpirun").code != 0)
    GTEST_SKIP() << "no mpirun: install Debian's openmpi-bin (scripts/install-deps.sh does)";
  const fs::path project = kestrel::testing::temp_dir("mpirun");
  // One node: rank 0's store on 127.0.0.1; a free port instead of the default 29500, as tests run
  // in parallel. (--allow-run-as-root: CI runs as root.)
  const CliResult r = run_command("timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT=" +
                                  std::to_string(kestrel::testing::free_port()) + " " + tiny_train(project));
  expect_two_rank_epoch(r, project);
  fs::remove_all(project);
}

// What srun sets in each task's environment; rank 0's host comes from the node list. srun binds
// each task to its CPUs, which OpenMP follows; unbound here, the tasks get one thread each instead
// (two tasks running OpenMP over every core of a small machine take minutes, not seconds).
TEST(Launchers, SlurmEnvironment) {
  const fs::path project = kestrel::testing::temp_dir("slurm");
  const std::string port = std::to_string(kestrel::testing::free_port());
  std::string script;
  for (int r = 0; r < 2; ++r)
    script += "env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK SLURM_PROCID=" + std::to_string(r) +
              " SLURM_LOCALID=" + std::to_string(r) +
              " SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_JOB_NODELIST=localhost OMP_NUM_THREADS=1 MASTER_PORT=" + port +
              " timeout 300 " + tiny_train(project) + " > " + (project / ("task" + std::to_string(r))).string() +
              " 2>&1 & p" + std::to_string(r) + "=$!; ";
  script += "wait $p0; c0=$?; wait $p1; c1=$?; cat " + (project / "task0").string() + " " +
            (project / "task1").string() + "; exit $((c0 | c1))";
  const CliResult r = run_command("bash -c '" + script + "'");
  expect_two_rank_epoch(r, project);
  fs::remove_all(project);
}
