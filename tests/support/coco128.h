// The shared coco128 (128 real COCO images; train and val are the same images) for tests that
// want real data. Tests skip, naming kCoco128, where it is absent: the project never needs it.
#pragma once
#include <filesystem>
#include <string>

namespace kestrel::testing {

inline const std::filesystem::path kCoco128 = "/work/shared/datasets/coco128";
// coco128-seg: the 100 of coco128's images with instance polygons (train and val the same).
inline const std::filesystem::path kCoco128Seg = "/work/shared/datasets/coco128-seg";
// coco128-cls: ten classes of object crops from coco128, train/<class>/ and val/<class>/.
inline const std::filesystem::path kCoco128Cls = "/work/shared/datasets/coco128-cls";

// coco128 as a dataset of the scratch folder `dir`: the images linked, the labels copied, and a
// yaml whose `path` is `dir`, so that label caches (written beside the labels folder) land there,
// not in the shared, read-only set. Returns the yaml's path.
std::string scratch_coco128(const std::filesystem::path& dir);

// The first `images` label files of coco128-seg (by name) with their images, as a dataset of the
// scratch folder `dir` (images linked, labels copied, coco128-seg's 80 names), named seg.yaml.
// Returns the yaml's path.
std::string scratch_coco128_seg(const std::filesystem::path& dir, int images);

}  // namespace kestrel::testing
