#include "dist/process_group.h"

#include <cstdlib>

#include "base/error.h"
#include "dist/gloo_group.h"
#include "dist/nccl_group.h"
#include "dist/store.h"
#include "dist/torch_store.h"

namespace kestrel::dist {

ProcessGroup::ProcessGroup(int rank, int size, std::shared_ptr<TcpStore> store)
    : rank_(rank), size_(size), store_(std::move(store)) {}

void ProcessGroup::wait_for_all_ranks(const std::string& phase, std::chrono::milliseconds limit) {
  if (size_ == 1) return;
  if (!store_) {
    barrier()->synchronize();
    return;
  }
  // The last rank to arrive opens the phase's gate; everyone waits for the gate. Two keys per
  // phase, so a long run leaves little in rank 0's store.
  const std::string key = "phase/" + std::to_string(phases_++);
  if (store_->add(key + "/arrived", 1) == size_) store_->set(key + "/open", "");
  try {
    store_->wait({key + "/open"}, limit);
  } catch (const Error& e) {
    KESTREL_FAIL("rank ", rank_, ": not every rank reached the end of '", phase, "' within ",
                 format_duration(limit), ": ", e.what(),
                 ". If no rank left and rank 0 only needs longer, raise --dist-phase-timeout.");
  }
}

namespace {

// Rank 0 hosts the rendezvous store at master_addr:master_port, or, where torchrun's agent already
// serves PyTorch's store there, on a port the kernel picks: rank 0 posts "address:port" in the
// agent's store (its address on the route to the agent, so it need not share the agent's host) and
// the others read it. The key names the attempt, so a restarted job never reads an old port.
std::shared_ptr<TcpStore> open_store(const DistOptions& o) {
  const std::chrono::milliseconds timeout = o.timeout;
  if (!o.torch_agent_store)
    return std::make_shared<TcpStore>(o.master_addr, o.master_port, o.rank == 0, o.rank, timeout,
                                      o.restart_count);
  TorchStoreClient agent(o.master_addr, o.master_port, o.rank, timeout);
  const std::string key = "/kestrel/store/" + std::to_string(o.restart_count);
  if (o.rank == 0) {
    auto store = std::make_shared<TcpStore>(agent.local_address(), 0, true, 0, timeout, o.restart_count);
    agent.set(key, agent.local_address() + ":" + std::to_string(store->port()));
    return store;
  }
  const std::string where = agent.get(key);
  const size_t colon = where.rfind(':');
  int port = 0;
  if (colon != std::string::npos) port = std::atoi(where.c_str() + colon + 1);
  KESTREL_CHECK(port > 0 && port < 65536, "rank ", o.rank, ": torchrun's agent store holds '", where,
                "' under '", key, "', not the address:port of Kestrel's store; is another program "
                "using that key?");
  return std::make_shared<TcpStore>(where.substr(0, colon), port, false, o.rank, timeout, o.restart_count);
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend,
                                                 const DistOptions& options, Device device) {
  KESTREL_CHECK(backend == "gloo" || backend == "nccl", "init_process_group: unknown backend '",
                backend,
                "'; use \"gloo\" (CPU, or CUDA staged through the host) or \"nccl\" (CUDA)");
  KESTREL_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
                "init_process_group: rank ", options.rank, " is not in a world of ",
                options.world_size);
  KESTREL_CHECK(options.timeout.count() > 0,
                "init_process_group: the timeout must be positive, "
                "got ",
                options.timeout.count(), " s; pass --dist-timeout SECONDS");
  KESTREL_CHECK(backend != "nccl" || device.is_cuda(),
                "init_process_group: the nccl backend "
                "needs a CUDA device, got ",
                device.str(), "; use the gloo backend on the CPU");
  // A single rank needs no rendezvous, so single-process runs never bind a port.
  std::shared_ptr<TcpStore> store;
  if (options.world_size > 1) store = open_store(options);
  std::shared_ptr<ProcessGroup> group;
  if (backend == "nccl")
    group = std::make_shared<NcclProcessGroup>(store, options, device);
  else
    group = std::make_shared<GlooProcessGroup>(store, options);
  // Some ranks may still be reading rendezvous keys when others are connected. Rank 0 hosts the
  // store, so it returns only once every rank has said it is done with it: a rank 0 that exits
  // early can then no longer cut the others off mid-rendezvous.
  if (store) {
    store->set("joined/" + std::to_string(options.rank), "");
    if (options.rank == 0) {
      std::vector<std::string> joined;
      for (int r = 0; r < options.world_size; ++r) joined.push_back("joined/" + std::to_string(r));
      store->wait(joined);
    }
  }
  return group;
}

}  // namespace kestrel::dist
