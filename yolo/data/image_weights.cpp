#include "yolo/data/image_weights.h"

#include "base/error.h"
#include "yolo/data/numpy_sum.h"

namespace kestrel::yolo::data {

std::vector<float> labels_to_class_weights(const std::vector<ImageRecord>& records, int nc) {
  KESTREL_CHECK(nc >= 1, "--image-weights: needs at least one class, got nc ", nc);
  std::vector<double> weights(static_cast<size_t>(nc), 0.0);
  for (const ImageRecord& r : records)
    for (const LabelBox& b : r.boxes) {
      KESTREL_CHECK(b.cls >= 0 && b.cls < nc, "--image-weights: ", r.image_path, " has a label of class ", b.cls,
                    " outside the dataset's ", nc, " classes");
      weights[b.cls] += 1;
    }
  for (double& w : weights) w = 1.0 / (w == 0 ? 1.0 : w);  // empty bins count as 1
  const double total = numpy_sum(weights.data(), nc);
  std::vector<float> out(weights.size());
  for (size_t c = 0; c < weights.size(); ++c) out[c] = static_cast<float>(weights[c] / total);
  return out;
}

std::vector<double> labels_to_image_weights(const std::vector<ImageRecord>& records, int nc,
                                            const std::vector<double>& class_weights) {
  KESTREL_CHECK(static_cast<int>(class_weights.size()) == nc, "--image-weights: ", class_weights.size(),
                " class weights for ", nc, " classes");
  std::vector<double> out, row(static_cast<size_t>(nc));
  out.reserve(records.size());
  std::vector<int64_t> counts(static_cast<size_t>(nc));
  for (const ImageRecord& r : records) {
    std::fill(counts.begin(), counts.end(), 0);
    for (const LabelBox& b : r.boxes) ++counts[b.cls];
    for (int c = 0; c < nc; ++c) row[c] = class_weights[c] * static_cast<double>(counts[c]);
    out.push_back(numpy_sum(row.data(), nc));
  }
  return out;
}

std::vector<double> epoch_class_weights(const std::vector<float>& model_class_weights,
                                        const std::vector<double>& maps) {
  const size_t nc = model_class_weights.size();
  KESTREL_CHECK(maps.empty() || maps.size() == nc, "--image-weights: ", maps.size(), " per-class mAPs for ",
                nc, " classes");
  std::vector<double> cw(nc);
  for (size_t c = 0; c < nc; ++c) {
    const double keep = 1.0 - (maps.empty() ? 0.0 : maps[c]);
    cw[c] = static_cast<double>(model_class_weights[c]) * (keep * keep) / static_cast<double>(nc);
  }
  return cw;
}

ImageWeights::ImageWeights(std::vector<ImageRecord> records, int nc, uint64_t seed)
    : records_(std::move(records)), nc_(nc), seed_(seed), rng_(seed) {
  KESTREL_CHECK(!records_.empty(), "--image-weights: no training images");
  for (float w : labels_to_class_weights(records_, nc)) model_class_weights_.push_back(w * static_cast<float>(nc));
}

void ImageWeights::set_maps(std::vector<double> maps) {
  KESTREL_CHECK(maps.empty() || static_cast<int>(maps.size()) == nc_, "--image-weights: ", maps.size(),
                " per-class mAPs for ", nc_, " classes");
  std::lock_guard lock(mutex_);
  maps_ = std::move(maps);
  drawn_epoch_ = -1;  // a later draw of the same epoch would use the new weights
}

std::vector<int64_t> ImageWeights::draw(int64_t epoch) {
  KESTREL_CHECK(epoch >= 0, "--image-weights: epoch ", epoch, " < 0");
  std::lock_guard lock(mutex_);
  if (epoch == drawn_epoch_) return drawn_;
  const int64_t n = static_cast<int64_t>(records_.size());
  if (epoch < next_epoch_) {  // an earlier epoch (or the same one again, with new maps): restart
    rng_ = PythonRandom(seed_);
    next_epoch_ = 0;
  }
  rng_.discard_randoms(static_cast<uint64_t>((epoch - next_epoch_) * n));
  const std::vector<double> iw = labels_to_image_weights(records_, nc_, epoch_class_weights(model_class_weights_, maps_));
  drawn_ = python_choices(rng_, iw, n, "--image-weights: the image weights (every labelled class at mAP 1, or no labels)");
  next_epoch_ = epoch + 1;
  drawn_epoch_ = epoch;
  return drawn_;
}

EpochOrder image_weighted_order(const DistributedSampler& sampler, std::shared_ptr<ImageWeights> weights) {
  EpochOrder order = distributed_order(sampler);
  auto shuffled = order.indices;
  order.indices = [shuffled, weights](int64_t epoch) {
    const std::vector<int64_t> drawn = weights->draw(epoch);
    std::vector<int64_t> out = shuffled(epoch);
    for (int64_t& i : out) i = drawn[static_cast<size_t>(i)];
    return out;
  };
  order.partners = [weights](int64_t epoch) { return weights->draw(epoch); };
  return order;
}

}  // namespace kestrel::yolo::data
