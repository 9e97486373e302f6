#include "yolo/data/seg_scan.h"

#include "yolo/data/seg_labels.h"

namespace kestrel::yolo::data {

ScanResult scan_segment_images(const std::vector<std::string>& image_paths, int class_limit,
                               ThreadPool& pool) {
  std::vector<PairCheck> checks(image_paths.size());
  pool.parallel_for(0, static_cast<int64_t>(image_paths.size()), [&](int64_t i) {
    SegPairCheck c = verify_image_segments(image_paths[i], image_to_label_path(image_paths[i]), class_limit);
    c.check.record.segments = std::move(c.segments);
    checks[i] = std::move(c.check);
  });
  return collect_checks(std::move(checks));
}

}  // namespace kestrel::yolo::data
