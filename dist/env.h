// Where this process sits in a distributed job: from explicit flags, or else from the environment a
// launcher left behind. Recognised launchers, first match wins:
// - torchrun, or `kestrel train --nproc-per-node`:
//     RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
// - Open MPI (mpirun):
//     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
// - SLURM (srun):
//     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master is the first host of
//     SLURM_JOB_NODELIST (or SLURM_NODELIST)
// MASTER_ADDR and MASTER_PORT override the master under every launcher (mpirun -x MASTER_ADDR=...).
// KESTREL_RESTART_COUNT (set by kestrel's launcher), or under torchrun TORCHELASTIC_RESTART_COUNT,
// says which restart of an elastic job this is.
// Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True, torchrun's default) the agent
// already listens on MASTER_PORT (PyTorch's store), so unless --master-port names a port, rank 0
// hosts Kestrel's store on a port the kernel picks and posts it there (torch_agent_store).
// With nothing set the process is a single-rank job.
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace kestrel::dist {

// Values given on the command line; an empty optional means "not given".
struct DistFlags {
  std::optional<int> rank, world_size, local_rank, master_port;
  std::optional<std::string> master_addr;
  std::chrono::seconds timeout = kDefaultTimeout;
};

// Reads one environment variable (tests pass their own table).
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_environment();

// "torchrun", "Open MPI", "SLURM", or "" when no launcher variables are present.
std::string detect_launcher(const EnvLookup& env);

// Explicit flags first, then the detected launcher's variables, then single-process defaults.
// Refuses inconsistent values (rank outside [0, world_size), non-numbers, bad ports) naming the
// variable or flag they came from.
DistOptions resolve_dist_options(const DistFlags& flags, const EnvLookup& env);

// How many ranks of the job run on this machine: LOCAL_WORLD_SIZE (torchrun, kestrel's launcher),
// else OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), else SLURM_NTASKS_PER_NODE (SLURM); 1 when none is
// set. A value that is no positive integer is refused, naming the variable.
int local_world_size(const EnvLookup& env);

// Expands a SLURM host list: "node[01-03,07],gpu-a" -> node01 node02 node03 node07 gpu-a. Ranges
// keep the zero padding of their first bound; several bracket groups in one name multiply out.
std::vector<std::string> expand_host_list(const std::string& list);

}  // namespace kestrel::dist
