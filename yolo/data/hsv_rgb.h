// The training samples' HSV gains and BGR to RGB swap in one pass over the pixels, equal bit for
// bit to OpenCV's three steps: cv::cvtColor(BGR2HSV), a per-channel table, cv::cvtColor(HSV2RGB).
//
// - BGR to HSV is OpenCV's 8-bit algorithm, which is integer: v = max, s and h through its division
//   tables (255 * 2^12 / v and 30 * 2^12 / diff, rounded), descaled by 12 bits.
// - HSV to RGB is OpenCV's float algorithm for 8-bit images (h * 6/180, s / 255, v / 255, the
//   sector's four products, * 255 truncated). Its SIMD build may fuse 1 - s f into one
//   multiply-add (it does in the AVX2 code Debian ships) and that changes a few results, so the
//   first use compares both roundings with cv::cvtColor over every (h, s, v) of the 8-bit domain
//   and keeps the one that agrees everywhere; where neither does, the fused path is off and
//   callers keep OpenCV's steps.
// - cv::cvtColor converts a row's last (width mod 4 x vector lanes) pixels with other code
//   (rounding instead of truncation), so the fused path takes rows whose width is a multiple of 64
//   (640, 320, ...); the training mosaic's always is.
#pragma once
#include <array>
#include <cstdint>
#include <opencv2/core.hpp>

namespace kestrel::yolo::data {

// The reference's per-channel tables of the gains r on OpenCV's 8-bit HSV: hue -> (x rh) mod 180,
// saturation and value -> clip(x r, 0, 255), each truncated to uint8 as numpy's astype does.
std::array<std::array<uint8_t, 256>, 3> hsv_gain_tables(const std::array<double, 3>& r);

// Whether this machine's cv::cvtColor(HSV2RGB) is reproduced (decided once, on first use).
bool fused_hsv_available();

// The 8-bit BGR image in place to RGB with the HSV gains r applied, in one pass; false (the image
// untouched) where the fused path cannot promise OpenCV's bits: fused_hsv_available() is false or
// the width is not a multiple of 64.
// `portable` skips the AVX2 row for the compiler's (tests compare both with OpenCV).
bool fused_hsv_gains_to_rgb(cv::Mat& image, const std::array<double, 3>& r, bool portable = false);

}  // namespace kestrel::yolo::data
