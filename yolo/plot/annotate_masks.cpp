#include "yolo/plot/annotate_masks.h"

#include <algorithm>

#include "base/error.h"

namespace kestrel::yolo {
namespace {

constexpr float kAlpha = 0.5f;

void check_masks(const Tensor& masks, const cv::Mat& image, size_t colours, const char* what) {
  KESTREL_CHECK(masks.device().is_cpu() && masks.dtype() == DType::U8 && masks.dim() == 3 && masks.is_contiguous(),
                what, ": masks must be a contiguous uint8 (n, h, w) CPU tensor");
  KESTREL_CHECK(image.type() == CV_8UC3, what, ": the image must be 8-bit BGR");
  KESTREL_CHECK(masks.size(1) == image.rows && masks.size(2) == image.cols, what, ": masks of ", masks.size(1), "x",
                masks.size(2), " for an image of ", image.rows, "x", image.cols);
  KESTREL_CHECK(static_cast<size_t>(masks.size(0)) == colours, what, ": ", masks.size(0), " masks but ", colours,
                " colours");
}

}  // namespace

cv::Mat blend_masks_on_input(const cv::Mat& input, const Tensor& masks, const std::vector<cv::Scalar>& colours) {
  check_masks(masks, input, colours.size(), "blend_masks_on_input");
  const int64_t n = masks.size(0), h = input.rows, w = input.cols;
  // The reference: torch.tensor(colors) / 255.0, then * alpha, in float32.
  std::vector<float> c(static_cast<size_t>(n) * 3);
  for (int64_t k = 0; k < n; ++k)
    for (int ch = 0; ch < 3; ++ch) c[k * 3 + ch] = static_cast<float>(colours[k][ch]) / 255.0f * kAlpha;
  const uint8_t* m = masks.data<uint8_t>();
  cv::Mat out(input.rows, input.cols, CV_8UC3);
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* src = input.ptr<uint8_t>(static_cast<int>(y));
    uint8_t* dst = out.ptr<uint8_t>(static_cast<int>(y));
    for (int64_t x = 0; x < w; ++x) {
      float inv = 1.0f;  // the cumulative product of (1 - alpha m_j)
      float sum[3] = {0.0f, 0.0f, 0.0f};
      for (int64_t k = 0; k < n; ++k) {
        const float mk = m[(k * h + y) * w + x] ? 1.0f : 0.0f;
        inv *= 1.0f - mk * kAlpha;
        for (int ch = 0; ch < 3; ++ch) sum[ch] += mk * c[k * 3 + ch] * inv;
      }
      for (int ch = 0; ch < 3; ++ch) {
        const float v = static_cast<float>(src[x * 3 + ch]) / 255.0f;  // the input as the model saw it
        const float mixed = v * inv + sum[ch] * 2.0f;
        dst[x * 3 + ch] = static_cast<uint8_t>(mixed * 255.0f);  // .byte(): truncation
      }
    }
  }
  return out;
}

void blend_masks_on_frame(cv::Mat& frame, const Tensor& masks, const std::vector<cv::Scalar>& colours) {
  check_masks(masks, frame, colours.size(), "blend_masks_on_frame");
  const int64_t n = masks.size(0), h = frame.rows, w = frame.cols;
  const uint8_t* m = masks.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* px = frame.ptr<uint8_t>(static_cast<int>(y));
    for (int64_t x = 0; x < w; ++x) {
      float s = 0.0f, mc[3] = {0.0f, 0.0f, 0.0f};
      for (int64_t k = 0; k < n; ++k) {
        if (!m[(k * h + y) * w + x]) continue;
        s += 1.0f;
        for (int ch = 0; ch < 3; ++ch) mc[ch] += static_cast<float>(colours[k][ch]);
      }
      s = std::min(s, 1.0f);
      for (int ch = 0; ch < 3; ++ch) {
        const float blended = std::min(mc[ch], 255.0f) * kAlpha + static_cast<float>(px[x * 3 + ch]) * (1.0f - s * kAlpha);
        px[x * 3 + ch] = static_cast<uint8_t>(blended);  // numpy's unsafe cast: truncation
      }
    }
  }
}

}  // namespace kestrel::yolo
