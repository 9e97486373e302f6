#include "yolo/plot/plot_classify.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "yolo/data/classify_transforms.h"
#include "yolo/data/image_codec.h"
#include "yolo/plot/plot_text.h"

namespace kestrel::yolo {

void plot_classify_images(const Tensor& images, const std::vector<int64_t>& labels,
                          const std::vector<int64_t>& predicted, const std::vector<std::string>& names,
                          const std::string& path) {
  KESTREL_CHECK(images.dim() == 4 && images.size(3) == 3, "plot_classify_images: images must be (B, h, w, 3), got ",
                images.describe());
  const Tensor host = images.to(Device::cpu()).to(DType::F32).contiguous();
  const int n = static_cast<int>(std::min<int64_t>(25, host.size(0)));
  if (n == 0) return;
  const int cols = std::max(1, std::min(8, static_cast<int>(std::lround(std::sqrt(static_cast<double>(n))))));
  const int rows = (n + cols - 1) / cols;
  const int h = static_cast<int>(host.size(1)), w = static_cast<int>(host.size(2));
  // Tiles of at least 160 pixels, a title line above each, as the reference's 300-dpi figure.
  const int tile = std::max(160, std::max(h, w));
  const double font = 0.45 * tile / 160.0;
  const int title = static_cast<int>(text_size("Ag", font).height * 2.2) + 4;
  const int pad = tile / 16;
  cv::Mat canvas(rows * (tile + title + pad) + pad, cols * (tile + pad) + pad, CV_8UC3, cv::Scalar(255, 255, 255));
  const float* px = host.data<float>();
  for (int i = 0; i < n; ++i) {
    cv::Mat rgb(h, w, CV_8UC3);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c) {
          const float v = px[((static_cast<int64_t>(i) * h + y) * w + x) * 3 + c] * data::kImagenetStd[c] +
                          data::kImagenetMean[c];
          rgb.at<cv::Vec3b>(y, x)[2 - c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
        }
    cv::Mat scaled;
    cv::resize(rgb, scaled, cv::Size(tile, tile), 0, 0, cv::INTER_NEAREST);
    const int x0 = pad + (i % cols) * (tile + pad), y0 = pad + (i / cols) * (tile + title + pad);
    scaled.copyTo(canvas(cv::Rect(x0, y0 + title, tile, tile)));
    if (i < static_cast<int>(labels.size())) {
      auto name = [&](int64_t k) { return k >= 0 && k < static_cast<int64_t>(names.size()) ? names[k] : "class" + std::to_string(k); };
      std::string text = name(labels[i]);
      if (i < static_cast<int>(predicted.size())) text += "-" + name(predicted[i]);
      put_text(canvas, text, cv::Point(x0 + tile / 2, y0 + title / 2), font, Align::kCentre, Align::kCentre);
    }
  }
  data::write_image(path, canvas);
}

}  // namespace kestrel::yolo
