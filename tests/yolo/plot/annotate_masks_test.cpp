// Annotator.masks' two paths (yolo/plot/annotate_masks.h), pixel by pixel against the reference's
// arithmetic written out: the default blend into the input (cumulative (1 - alpha m) products, the
// colour sum times two, truncation) and --retina-masks' numpy blend (colour sum clipped at 255,
// coverage clipped at 1).
#include <gtest/gtest.h>

#include "yolo/plot/annotate_masks.h"

using kestrel::DType;
using kestrel::Tensor;

namespace {

Tensor masks_of(const std::vector<uint8_t>& values, int64_t n, int64_t h, int64_t w) {
  Tensor t = Tensor::empty({n, h, w}, DType::U8);
  std::copy(values.begin(), values.end(), t.data<uint8_t>());
  return t;
}

uint8_t input_blend(uint8_t x, const std::vector<std::pair<bool, double>>& masks_and_colours) {
  float inv = 1.0f, sum = 0.0f;
  for (const auto& [m, c] : masks_and_colours) {
    const float mk = m ? 1.0f : 0.0f;
    inv *= 1.0f - mk * 0.5f;
    sum += mk * (static_cast<float>(c) / 255.0f * 0.5f) * inv;
  }
  return static_cast<uint8_t>((static_cast<float>(x) / 255.0f * inv + sum * 2.0f) * 255.0f);
}

}  // namespace

TEST(AnnotateMasks, InputBlendFollowsTheReferenceArithmetic) {
  cv::Mat image(1, 3, CV_8UC3, cv::Scalar(10, 128, 255));
  // Pixel 0: no mask; pixel 1: the first mask; pixel 2: both (the second under the first).
  const Tensor masks = masks_of({0, 1, 1, 0, 0, 1}, 2, 1, 3);
  const std::vector<cv::Scalar> colours = {cv::Scalar(56, 56, 255), cv::Scalar(151, 157, 255)};
  const cv::Mat out = kestrel::yolo::blend_masks_on_input(image, masks, colours);
  for (int ch = 0; ch < 3; ++ch) {
    const uint8_t x = image.at<cv::Vec3b>(0, 0)[ch];
    EXPECT_EQ(out.at<cv::Vec3b>(0, 0)[ch], input_blend(x, {}));
    EXPECT_EQ(out.at<cv::Vec3b>(0, 1)[ch], input_blend(x, {{true, colours[0][ch]}, {false, colours[1][ch]}}));
    EXPECT_EQ(out.at<cv::Vec3b>(0, 2)[ch], input_blend(x, {{true, colours[0][ch]}, {true, colours[1][ch]}}));
  }
  // Without a mask the value comes back through x / 255 * 255, truncated: 10 stays 10, and the
  // input is left as it was.
  EXPECT_EQ(out.at<cv::Vec3b>(0, 0), cv::Vec3b(10, 128, 255));
  EXPECT_EQ(image.at<cv::Vec3b>(0, 1), cv::Vec3b(10, 128, 255));
}

TEST(AnnotateMasks, RetinaBlendClipsColourAndCoverage) {
  cv::Mat frame(1, 2, CV_8UC3, cv::Scalar(100, 101, 0));
  const Tensor masks = masks_of({1, 1, 0, 1}, 2, 1, 2);
  const std::vector<cv::Scalar> colours = {cv::Scalar(200, 10, 3), cv::Scalar(200, 20, 5)};
  kestrel::yolo::blend_masks_on_frame(frame, masks, colours);
  // One mask: colour / 2 + x / 2, truncated.
  EXPECT_EQ(frame.at<cv::Vec3b>(0, 0), cv::Vec3b(150, 55, 1));
  // Two: the colours' sum clipped at 255 (400 -> 255), coverage 1: (255 + 100) / 2 = 177.5 -> 177.
  EXPECT_EQ(frame.at<cv::Vec3b>(0, 1), cv::Vec3b(177, 65, 4));
}

TEST(AnnotateMasks, RefusesMismatchedInputs) {
  cv::Mat image(2, 2, CV_8UC3, cv::Scalar(0, 0, 0));
  EXPECT_THROW(kestrel::yolo::blend_masks_on_input(image, masks_of({1, 1, 1, 1}, 1, 2, 2), {}), kestrel::Error);
  EXPECT_THROW(kestrel::yolo::blend_masks_on_frame(image, masks_of({1, 1, 1}, 1, 1, 3), {cv::Scalar()}), kestrel::Error);
}
