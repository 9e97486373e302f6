// Keeping the replicas of a data-parallel job identical.
//
// - broadcast_tensors: rank 0's values of parameters and buffers to every rank, once before the
//   optimizer is built (so its state starts identical too), and before each forward for the BN
//   running statistics when SyncBN is off (PyTorch DDP's broadcast_buffers, as the reference runs
//   it). Tensors are packed into one flat buffer per dtype, so a model costs a few collectives, not
//   one per tensor; the tensors' names, shapes and dtypes are first compared across ranks, so
//   different models on different ranks fail with the first differing name instead of silently
//   broadcasting bytes into the wrong places.
// - check_sync: a bitwise checksum per tensor (parameters, optimizer state) compared across
//   ranks; divergence throws an Error naming the first tensor and the ranks that disagree.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"
#include "engine/tensor.h"

namespace kestrel::dist {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Copies rank `root`'s values into every rank's tensors (in place, not recorded by autograd).
// Every rank passes the same list (names, shapes, dtypes; checked, which costs two all-gathers
// read back on the host: for a list broadcast again and again, use TensorBroadcaster).
void broadcast_tensors(ProcessGroup& group, const NamedTensors& tensors, int root = 0);

// Rank `root`'s values of a fixed list of tensors to every rank, as often as needed (DDP's
// broadcast_buffers before each forward). The list's structure is compared across ranks once,
// when the broadcaster is built (check_structure() repeats that on demand, under --check-sync);
// broadcast() then packs the tensors into one flat buffer per dtype (kept between calls),
// broadcasts and unpacks, ordered on the device: no host read.
class TensorBroadcaster {
 public:
  // Collective: every rank builds it at the same point with the same list.
  TensorBroadcaster(std::shared_ptr<ProcessGroup> group, NamedTensors tensors, int root = 0);
  void broadcast();
  void check_structure();  // collective; throws naming the first differing tensor

 private:
  struct Flat {
    std::vector<Tensor> members;
    Tensor buffer;
  };
  std::shared_ptr<ProcessGroup> group_;
  NamedTensors tensors_;
  int root_;
  std::vector<Flat> flats_;  // one per dtype, in the same order on every rank
};

// 64-bit FNV-1a hash of the tensor's bytes in row-major order (any device; a CUDA tensor is copied
// to the host). Equal values give equal hashes; the check is bitwise, as it must be for replicas.
uint64_t tensor_checksum(const Tensor& t);

// Throws kestrel::Error if any tensor differs between ranks (what: "parameters", "optimizer state"
// ... names the check in the message). Every rank must pass the same list.
void check_sync(ProcessGroup& group, const NamedTensors& tensors, const std::string& what);

}  // namespace kestrel::dist
