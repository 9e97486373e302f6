#include "yolo/data/sampler.h"

#include <numeric>
#include <utility>

#include "base/error.h"
#include "engine/random.h"

namespace kestrel::yolo::data {
namespace {

// Philox stream ids of the sampler: tagged so they never coincide with the per-rank and
// per-worker augmentation streams drawn from the same seed.
constexpr uint64_t kSamplerStreamTag = 0x53414D504C45ull << 16;  // "SAMPLE"

}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  KESTREL_CHECK(dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got ", dataset_size);
  KESTREL_CHECK(world_size >= 1, "DistributedSampler: world size must be >= 1, got ", world_size);
  KESTREL_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank,
                " outside [0, ", world_size, ")");
  // As torch: drop_last cuts to the largest multiple of world_size, otherwise pad up to one.
  num_samples_ = drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle_) {
    // Fisher-Yates from the back; every rank draws the same stream, so the same permutation.
    Generator gen(seed_, kSamplerStreamTag + static_cast<uint64_t>(epoch_));
    for (int64_t i = dataset_size_ - 1; i > 0; --i)
      std::swap(order[i], order[gen.randint(static_cast<uint64_t>(i) + 1)]);
  }
  const int64_t total = total_size();
  if (!drop_last_ && dataset_size_ > 0) {
    // Repeat from the start (several times when the world is larger than the dataset).
    for (int64_t i = dataset_size_; i < total; ++i) order.push_back(order[i % dataset_size_]);
  }
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(order[i]);
  return mine;
}

}  // namespace kestrel::yolo::data
