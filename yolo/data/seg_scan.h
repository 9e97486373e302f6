// The scan of an instance-segmentation split: detection's checks and counts (label_scan.h), with
// each usable image's polygons (verify_image_segments, seg_labels.h) kept in its record.
#pragma once
#include <string>
#include <vector>

#include "engine/thread_pool.h"
#include "yolo/data/label_scan.h"

namespace kestrel::yolo::data {

// scan_images for polygon labels: the same records, counts, warnings and summary, and each
// record's `segments` holds one polygon per box (none when its labels are plain boxes). The result
// does not depend on the number of threads.
ScanResult scan_segment_images(const std::vector<std::string>& image_paths, int class_limit,
                               ThreadPool& pool);

}  // namespace kestrel::yolo::data
