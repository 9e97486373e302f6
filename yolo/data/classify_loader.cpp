#include "yolo/data/classify_loader.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "yolo/data/augment_pipeline.h"
#include "yolo/data/classify_transforms.h"
#include "yolo/data/sampler.h"

namespace kestrel::yolo::data {
namespace {

std::vector<std::string> paths_of(const std::vector<ClassifySample>& samples) {
  std::vector<std::string> paths;
  paths.reserve(samples.size());
  for (const ClassifySample& s : samples) paths.push_back(s.path);
  return paths;
}

}  // namespace

ClassifyLoader::ClassifyLoader(std::vector<ClassifySample> samples, ClassifyLoaderOptions options)
    : samples_(std::move(samples)), options_(options), images_(paths_of(samples_), options.cache) {
  const ClassifyLoaderOptions& o = options_;
  KESTREL_CHECK(!samples_.empty(), "classification loader: the dataset has no image");
  KESTREL_CHECK(o.size > 0, "classification loader: --imgsz must be positive, got ", o.size);
  KESTREL_CHECK(o.batch_size > 0, "classification loader: batch size must be positive, got ", o.batch_size);
  KESTREL_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "classification loader: rank ", o.rank,
                " outside [0, ", o.world, ")");
  KESTREL_CHECK(o.workers >= 0 && o.prefetch >= 0, "classification loader: workers and prefetch must be >= 0, got ",
                o.workers, " and ", o.prefetch);
  batch_size_ = static_cast<int>(std::min<int64_t>(o.batch_size, dataset_size()));
  pinned_ = o.pin_memory && cuda_available();
  const int device = o.cuda_device;
  batches_ = std::make_unique<Batches>(
      o.workers, o.prefetch, "classification loader",
      [this](int64_t epoch, int64_t b, const std::vector<int64_t>& order, const std::function<bool()>&,
             DecodeBuffers* buffers) { return std::optional<ClassifyBatch>(build(epoch, b, order, buffers)); },
      [device] {
        if (device >= 0) cudaSetDevice(device);
      });
}

ClassifyLoader::~ClassifyLoader() = default;  // batches_ stops and joins its workers first

int64_t ClassifyLoader::samples_per_epoch() const {
  return (dataset_size() + options_.world - 1) / options_.world;
}

int64_t ClassifyLoader::len() const { return (samples_per_epoch() + batch_size_ - 1) / batch_size_; }

std::vector<int64_t> ClassifyLoader::epoch_indices(int64_t epoch) const {
  KESTREL_CHECK(epoch >= 0, "classification loader: epoch must be >= 0, got ", epoch);
  if (options_.world == 1 && !options_.shuffle) {
    std::vector<int64_t> all(static_cast<size_t>(dataset_size()));
    std::iota(all.begin(), all.end(), int64_t{0});
    return all;
  }
  DistributedSampler sampler(dataset_size(), options_.rank, options_.world, options_.shuffle, options_.seed);
  sampler.set_epoch(epoch);
  return sampler.indices();
}

ClassifyBatch ClassifyLoader::build(int64_t epoch, int64_t b, const std::vector<int64_t>& order,
                                    DecodeBuffers* buffers) const {
  const int64_t begin = b * batch_size_;
  const int64_t end = std::min<int64_t>(begin + batch_size_, static_cast<int64_t>(order.size()));
  const int64_t n = end - begin, s = options_.size;
  ClassifyBatch out;
  out.index = b;
  out.images = Tensor::empty({n, s, s, 3}, DType::F32, Device::cpu(), pinned_);
  float* pixels = out.images.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = order[static_cast<size_t>(begin + i)];
    const cv::Mat bgr = images_.load(index, buffers);
    cv::Mat rgb;
    if (options_.augment) {
      Generator gen = sample_generator(options_.seed, options_.rank, epoch, index);
      rgb = classify_augment(bgr, options_.size, gen);
    } else {
      rgb = classify_eval(bgr, options_.size);
    }
    normalize_imagenet(rgb, pixels + i * s * s * 3);
    out.labels.push_back(samples_[static_cast<size_t>(index)].label);
    out.indices.push_back(static_cast<int>(index));
  }
  return out;
}

ClassifyBatch ClassifyLoader::build_batch(int64_t epoch, int64_t b) const {
  KESTREL_CHECK(b >= 0 && b < len(), "classification loader: batch ", b, " outside [0, ", len(), ")");
  return build(epoch, b, epoch_indices(epoch), nullptr);
}

void ClassifyLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  batches_->start_epoch(epoch, len(), first_batch, std::make_shared<const std::vector<int64_t>>(epoch_indices(epoch)));
}

std::optional<ClassifyBatch> ClassifyLoader::next() { return batches_->next(); }

}  // namespace kestrel::yolo::data
