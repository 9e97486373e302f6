// --image-weights as the reference's train.py (one process): at the start of every epoch
//   cw = model.class_weights * (1 - maps)^2 / nc     model.class_weights: labels_to_class_weights
//                                                    * nc, in float32; maps: per class mAP50-95 of
//                                                    the last validation (zeros before the first)
//   iw = labels_to_image_weights(labels, nc, cw)     per image, sum over its labels of cw[class]
//   dataset.indices = random.choices(range(n), weights=iw, k=n)
// The epoch's images are these n draws (visited in the sampler's shuffled order), and mosaic
// partners are drawn from them too, as the reference's load_mosaic does. The arithmetic is
// numpy's (float32 class weights, float64 and pairwise sums after), and the draw is Python's
// random seeded with --seed, as the reference's init_seeds(opt.seed + 1 + RANK) with RANK -1
// seeds it: epoch e draws after the n random() calls of each earlier epoch. So a seeded run
// draws the reference's indices wherever only this draw uses the reference's main-process
// stream (its --multi-scale sizes and AutoAnchor's evolution draw from it too; Kestrel's come
// from their own streams). A resumed run draws what the uninterrupted run would have (the
// reference's resume restarts the stream and forgets maps; Kestrel checkpoints the maps).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "yolo/data/loader.h"
#include "yolo/data/python_random.h"
#include "yolo/data/records.h"

namespace kestrel::yolo::data {

// labels_to_class_weights(labels, nc): 1 / count per class (1 for classes without labels),
// normalised to sum 1, as float32.
std::vector<float> labels_to_class_weights(const std::vector<ImageRecord>& records, int nc);
// labels_to_image_weights(labels, nc, class_weights): per image, sum over classes of
// class_weights[c] * (its labels of class c).
std::vector<double> labels_to_image_weights(const std::vector<ImageRecord>& records, int nc,
                                            const std::vector<double>& class_weights);
// model.class_weights (labels_to_class_weights * nc, float32) * (1 - maps)^2 / nc.
std::vector<double> epoch_class_weights(const std::vector<float>& model_class_weights,
                                        const std::vector<double>& maps);

class ImageWeights {
 public:
  ImageWeights(std::vector<ImageRecord> records, int nc, uint64_t seed);

  // The last validation's per class mAP50-95 (nc values; empty: zeros, as before any validation).
  void set_maps(std::vector<double> maps);
  const std::vector<double>& maps() const { return maps_; }
  // The epoch's n drawn dataset indices. Thread-safe; the draw of the latest epoch asked for is
  // kept, so asking again for it returns the same indices.
  std::vector<int64_t> draw(int64_t epoch);

 private:
  std::vector<ImageRecord> records_;
  int nc_;
  uint64_t seed_;
  std::vector<float> model_class_weights_;  // labels_to_class_weights * nc
  std::vector<double> maps_;
  std::mutex mutex_;
  PythonRandom rng_;
  int64_t next_epoch_ = 0;  // the epoch whose draw rng_ stands at
  int64_t drawn_epoch_ = -1;
  std::vector<int64_t> drawn_;
};

// The sampler's order of each epoch through the epoch's draw: position j visits
// draw[sampler_order[j]], and the draw is the epoch's mosaic partner pool.
EpochOrder image_weighted_order(const DistributedSampler& sampler, std::shared_ptr<ImageWeights> weights);

}  // namespace kestrel::yolo::data
