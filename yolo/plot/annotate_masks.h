// Instance masks drawn as the reference v7.0's segment/predict.py draws them: utils/plots.py's
// Annotator.masks, both of its paths, with its float32 arithmetic and alpha 0.5. A detection's
// colour is its class's (class_colour, BGR); masks are uint8 (n, h, w), 0 or 1, in the order of
// the detections (highest confidence first).
#pragma once
#include <opencv2/core.hpp>

#include <vector>

#include "engine/tensor.h"

namespace kestrel::yolo {

// The default path (im_gpu): the masks blended into the letterboxed input image `input` (BGR
// uint8, the masks' size) as the reference blends them into its input tensor: each pixel of the
// image as the model saw it (value / 255), with c_k = colour_k / 255 * alpha and
// a_k = prod_{j<=k} (1 - alpha m_j), becomes (x a_n + 2 sum_k m_k c_k a_k) * 255, truncated to
// uint8. Returns the blended image, still letterboxed (the caller cuts the padding off and resizes
// it to the frame, as scale_image does).
cv::Mat blend_masks_on_input(const cv::Mat& input, const Tensor& masks, const std::vector<cv::Scalar>& colours);

// The --retina-masks path (im_gpu None): masks already at the frame's size, blended into `frame`
// in place as the reference's numpy arithmetic does: with s = min(sum_k m_k, 1) and
// c = min(sum_k m_k colour_k, 255), each pixel becomes c alpha + x (1 - s alpha), truncated.
void blend_masks_on_frame(cv::Mat& frame, const Tensor& masks, const std::vector<cv::Scalar>& colours);

}  // namespace kestrel::yolo
