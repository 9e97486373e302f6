// Classification image transforms, as the reference's ClassificationDataset makes its samples.
//
// Training follows the reference's albumentations path (classify_albumentations, augment=True):
// the one the reference recommends and takes whenever albumentations is installed. Its steps, on
// the image converted from BGR to RGB:
//   RandomResizedCrop(size, size, scale=(0.08, 1), ratio=(3/4, 4/3)), INTER_LINEAR
//   HorizontalFlip(p=0.5)
//   ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0, p=0.5): the three factors
//     uniform in [0.6, 1.4], applied in a random order with albumentations' uint8 formulas
//   Normalize(IMAGENET_MEAN, IMAGENET_STD)
// Without albumentations the reference trains on the evaluation transform (centre crop, no
// augmentation at all). Evaluation is the reference's classify_transforms: CenterCrop (the
// largest centred square, resized to size x size, INTER_LINEAR), ToTensor (BGR to RGB, /255) and
// Normalize.
//
// The draws come from a Generator, not Python's `random`: the distributions are albumentations',
// the numbers are not. Each step's parameters are drawn first (draw_classify_augment), then the
// pixels are made (apply_classify_augment), so tests can see the parameters.
#pragma once
#include <array>
#include <opencv2/core.hpp>

#include "engine/random.h"

namespace kestrel::yolo::data {

// The reference's IMAGENET_MEAN and IMAGENET_STD (RGB, for values in [0, 1]).
inline constexpr std::array<float, 3> kImagenetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImagenetStd = {0.229f, 0.224f, 0.225f};

// CenterCrop: the min(h, w) square at ((h - m) / 2, (w - m) / 2), resized to size x size
// (INTER_LINEAR). Any 8-bit image; the channel order is kept.
cv::Mat center_crop(const cv::Mat& image, int size);

// A crop of the source image (pixels), as RandomResizedCrop chooses it.
struct ResizedCrop {
  int x = 0, y = 0, width = 0, height = 0;
  bool fallback = false;  // no attempt fitted: the central crop of the nearest allowed aspect
};

// RandomResizedCrop's parameters for a height x width image: up to 10 attempts of an area
// fraction uniform in `scale` and an aspect ratio (w/h) log-uniform in `ratio`, w and h rounded
// half to even, the first that fits placed uniformly; else the whole image cut to the ratio
// range, centred.
ResizedCrop draw_resized_crop(int height, int width, Generator& gen, std::array<double, 2> scale = {0.08, 1.0},
                              std::array<double, 2> ratio = {0.75, 1.0 / 0.75});

// ColorJitter's parameters: applied with probability p; then brightness, contrast and saturation
// factors uniform in [max(0, 1 - s), 1 + s] and the order of the (four, hue included) steps a
// uniform permutation. Hue stays 0 (the reference's hue=0), a no-op.
struct ColorJitterParams {
  bool applied = false;
  double brightness = 1, contrast = 1, saturation = 1;
  std::array<int, 4> order = {0, 1, 2, 3};  // 0 brightness, 1 contrast, 2 saturation, 3 hue
};
ColorJitterParams draw_color_jitter(Generator& gen, double strength = 0.4, double p = 0.5);

// albumentations' uint8 steps, in place on an RGB 8-bit image: brightness a LUT of
// trunc(clip(v * f)); contrast a LUT of trunc(clip(v * f + m * (1 - f))), m the mean of the image's
// (RGB to) grey; saturation cv::addWeighted(image, f, grey as RGB, 1 - f). A factor of 1 leaves the
// image alone, as albumentations.
void apply_color_jitter(cv::Mat& rgb, const ColorJitterParams& params);

struct ClassifyAugment {
  ResizedCrop crop;
  bool flip = false;
  ColorJitterParams jitter;
};
// All of a training sample's draws, in the reference's order (crop, flip with p=0.5, jitter).
ClassifyAugment draw_classify_augment(int height, int width, Generator& gen);
// The training transform's pixels: crop, resize to size x size, BGR to RGB, flip, jitter.
cv::Mat apply_classify_augment(const cv::Mat& bgr, int size, const ClassifyAugment& augment);
// draw_classify_augment then apply_classify_augment: an RGB size x size image.
cv::Mat classify_augment(const cv::Mat& bgr, int size, Generator& gen);

// The evaluation transform's pixels: center_crop, BGR to RGB.
cv::Mat classify_eval(const cv::Mat& bgr, int size);

// ToTensor + Normalize of an RGB 8-bit image into `out` (h * w * 3 floats, HWC): each value as
// torchvision computes it in float32, (v / 255 - mean[c]) / std[c].
void normalize_imagenet(const cv::Mat& rgb, float* out);

}  // namespace kestrel::yolo::data
