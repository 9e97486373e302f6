// AutoAnchor (the reference's utils/autoanchor.py): checks how well the model's anchors fit the
// training labels (best possible recall at the anchor_t ratio threshold) and, below 0.98, evolves
// new anchors by k-means on whitened label sizes followed by a genetic search, keeping them only
// if they fit better. Anchors are exchanged in pixels; Detect stores them in stride units.
#pragma once
#include <string>
#include <vector>

#include "engine/random.h"
#include "layers/detect.h"
#include "yolo/data/records.h"

namespace kestrel::yolo {

struct AnchorFit {
  double bpr = 0;               // best possible recall: share of labels some anchor fits
  double anchors_per_target = 0;  // mean number of anchors within the threshold per label
};

// Label sizes in pixels at training size: each image scaled so its long side is img_size, times
// a per-image random scale in [0.9, 1.1) when `scale_jitter` (as the reference's check does).
std::vector<std::pair<float, float>> label_sizes(const std::vector<data::ImageRecord>& records,
                                                 int img_size, Generator* scale_jitter);

// anchors: (w, h) pairs in pixels.
AnchorFit anchor_fit(const std::vector<std::pair<float, float>>& wh,
                     const std::vector<std::pair<float, float>>& anchors, double thr);

// k-means (30 restarts) + `generations` of mutation, as the reference's kmean_anchors. Returns n
// anchors sorted by area. Messages go to `log` when given.
std::vector<std::pair<float, float>> kmean_anchors(const std::vector<data::ImageRecord>& records,
                                                   int n, int img_size, double thr,
                                                   int generations, Generator& gen,
                                                   std::string* log = nullptr);

// The reference's check_anchors: reports (into the returned text) and replaces detect's anchors
// when evolved ones fit better. Returns the report lines.
std::string check_anchors(const std::vector<data::ImageRecord>& records, layers::Detect& detect,
                          double thr, int img_size, Generator& gen);

}  // namespace kestrel::yolo
