// Kestrel's built-in dataset (`--data synthetic`, and the demo's): filled shapes whose class is
// their shape (circle, rectangle, triangle, cross) in varied sizes, colours and positions on
// textured backgrounds, overlapping each other and cut by the image borders, written once as
// real JPEG files and YOLO labels with a dataset yaml. Deterministic: the same bytes on every
// machine with the same libjpeg-turbo, and small enough to generate in seconds.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "yolo/data/records.h"

namespace kestrel::yolo::data {

inline constexpr int kSyntheticClasses = 4;
inline constexpr const char* kSyntheticNames[kSyntheticClasses] = {"circle", "rectangle",
                                                                   "triangle", "cross"};
inline constexpr int kSyntheticTrainImages = 300;
inline constexpr int kSyntheticValImages = 100;
// The dataset is one dataset everywhere: train image i is render_synthetic_image(kSyntheticSeed,
// i), val image i is stream kSyntheticValStreams + i.
inline constexpr uint64_t kSyntheticSeed = 0x6B657374726C31ull;
inline constexpr uint64_t kSyntheticValStreams = 1u << 20;

struct SyntheticImage {
  cv::Mat image;                 // BGR 8-bit, 320 wide, 240..320 high
  std::vector<LabelBox> boxes;   // tight around each shape's pixels inside the image
  cv::Mat owner;                 // CV_32S: index into boxes of the shape seen at each pixel, -1 none
};

// Image `index` of a split drawn from Philox stream (seed, stream): a pure function of them.
SyntheticImage render_synthetic_image(uint64_t seed, uint64_t stream);

// Makes sure `cache_dir` holds the dataset (images/{train,val}, labels/{train,val},
// synthetic.yaml) and returns the yaml's path. Generates it, into a temporary folder renamed into
// place, when the marker file naming this generator version is missing or different. Concurrent
// callers (ranks of one job) should let one rank call it first and wait at a barrier.
std::string ensure_synthetic_dataset(const std::string& cache_dir);

// What `--data` names, as a dataset yaml path: "synthetic" is ensure_synthetic_dataset(
// synthetic_dir); anything else is returned as given.
std::string resolve_data_argument(const std::string& data, const std::string& synthetic_dir);

// $XDG_CACHE_HOME/kestrel/synthetic-v1, else $HOME/.cache/kestrel/synthetic-v1, else
// ./.cache/kestrel/synthetic-v1.
std::string default_synthetic_dir();

}  // namespace kestrel::yolo::data
