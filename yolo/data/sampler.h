// torch.utils.data.DistributedSampler's semantics with the Philox generator: every rank draws
// the same permutation of the dataset from (seed, epoch), pads it by repeating its start to a
// multiple of the world size (or, with drop_last, cuts it down to one), and takes every
// world_size-th index starting at its rank. So ranks see disjoint shares of equal length that
// together cover the dataset, and a new epoch (set_epoch) gives a new order.
#pragma once
#include <cstdint>
#include <vector>

namespace kestrel::yolo::data {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // This rank's dataset indices for the current epoch, num_samples() of them.
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * world_size_; }

 private:
  int64_t dataset_size_;
  int rank_, world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace kestrel::yolo::data
