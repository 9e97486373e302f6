#include "yolo/train/batch_prep.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "engine/ops/layout.h"
#include "engine/random.h"
#include "yolo/train/loss.h"

namespace kestrel::yolo {

int64_t run_target_rows(const std::vector<data::ImageRecord>& records, int64_t batch,
                        const Hyp& hyp, bool rect) {
  size_t most = 0;
  for (const data::ImageRecord& r : records) most = std::max(most, r.boxes.size());
  const bool mosaic = hyp.mosaic > 0 && !rect;
  const int64_t images = mosaic ? (hyp.mixup > 0 ? 8 : 4) : 1;
  return padded_target_rows(batch * images * static_cast<int64_t>(most));
}

Tensor pad_batch_targets(const Tensor& targets, int64_t run_rows, int64_t ni) {
  const int64_t m = targets.size(0);
  const int64_t rows = run_rows > 0 ? run_rows : padded_target_rows(m);
  KESTREL_CHECK(m <= rows, "batch ", ni, " holds ", m, " labels, more than the ", rows,
                " rows the graphed step was sized for; train with --cuda-graph off");
  return pad_targets(targets, rows);
}

// Host-side resize of a u8 NHWC batch (--multi-scale); boxes are normalised, so they stay.
Tensor resize_batch(const Tensor& images, int64_t size) {
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2);
  const double gain = static_cast<double>(size) / std::max(h, w);
  const int nh = static_cast<int>(std::ceil(h * gain / 32.0) * 32), nw = static_cast<int>(std::ceil(w * gain / 32.0) * 32);
  Tensor out = Tensor::empty({n, nh, nw, 3}, DType::U8, Device::cpu(), images.is_pinned());
  for (int64_t i = 0; i < n; ++i) {
    cv::Mat src(static_cast<int>(h), static_cast<int>(w), CV_8UC3, images.data<uint8_t>() + i * h * w * 3);
    cv::Mat dst(nh, nw, CV_8UC3, out.data<uint8_t>() + i * nh * nw * 3);
    cv::resize(src, dst, {nw, nh}, 0, 0, cv::INTER_LINEAR);
  }
  return out;
}

int64_t multi_scale_size(uint64_t seed, int rank, int64_t epoch, int64_t batch, int64_t img_size, int64_t gs) {
  // The top bit keeps these streams apart from the per-sample ones ((epoch << 32) + index).
  Generator g(seed + 1 + static_cast<uint64_t>(rank),
              (uint64_t{1} << 63) | (static_cast<uint64_t>(epoch) << 32) | static_cast<uint64_t>(batch));
  const int64_t lo = img_size / 2, hi = img_size * 3 / 2 + gs;
  return (lo + static_cast<int64_t>(g.uniform() * static_cast<double>(hi - lo))) / gs * gs;
}

BatchPrep::BatchPrep(const ComputeLoss& loss, Device device, DType compute, BatchPrepOptions options)
    : loss_(loss), device_(device), compute_(compute), options_(options), uploader_(device) {}

StepInputs BatchPrep::prepare(const data::Batch& batch, int64_t epoch, int64_t i, int64_t ni) {
  loss_.check_targets(batch.targets, batch.images.size(0));
  data::Batch upload = batch;
  if (options_.multi_scale)
    upload.images = resize_batch(batch.images, multi_scale_size(options_.seed, options_.rank, epoch, i,
                                                                options_.img_size, options_.stride));
  if (device_.is_cuda()) upload.targets = pad_batch_targets(batch.targets, options_.target_rows, ni);
  const data::DeviceBatch db = uploader_.to_device(upload);
  return {ops::images_to_input(db.images, compute_), db.targets};
}

}  // namespace kestrel::yolo
