#include "yolo/data/seg_loader.h"

#include <cuda_runtime.h>

#include <cstring>

#include "base/error.h"

namespace kestrel::yolo::data {

namespace {

// One sample's masks as f32 planes at `dst`, in order.
float* copy_masks(const std::vector<cv::Mat>& masks, float* dst) {
  for (const cv::Mat& m : masks) {
    cv::Mat plane(m.rows, m.cols, CV_32F, dst);
    m.convertTo(plane, CV_32F);
    dst += m.total();
  }
  return dst;
}

}  // namespace

SegLoader::SegLoader(std::shared_ptr<const SegAugmentPipeline> pipeline, LoaderOptions options, EpochOrder order)
    : pipeline_(std::move(pipeline)), options_(options),
      plan_(std::move(order), options, pipeline_ ? pipeline_->size() : 0, "segmentation loader") {
  KESTREL_CHECK(pipeline_ != nullptr, "segmentation loader: no pipeline given");
  KESTREL_CHECK(!options_.quad, "--quad is not available for segmentation (the reference has no quad ",
                "collate for masks); train without --quad");
  pinned_ = options_.pin_memory && cuda_available();
  const int device = options_.cuda_device;
  batches_ = std::make_unique<Batches>(
      options_.workers, options_.prefetch, "segmentation loader",
      [this](int64_t epoch, int64_t b, const EpochPlan& plan, const std::function<bool()>& cancelled,
             LoadBuffers* buffers) {
        return build(b, plan_.batch(plan.order, b), epoch, plan.partners, cancelled, buffers);
      },
      [device] {
        if (device >= 0) cudaSetDevice(device);
      });
}

SegLoader::~SegLoader() = default;  // batches_ stops and joins its workers first

std::optional<SegBatch> SegLoader::build(int64_t b, const std::vector<int64_t>& samples, int64_t epoch,
                                         const std::vector<int64_t>& partners,
                                         const std::function<bool()>& cancelled, LoadBuffers* buffers) const {
  const int64_t n = static_cast<int64_t>(samples.size());
  const auto [h, w] = batch_shape(pipeline_->images(), samples, b);
  const auto [mh, mw] = pipeline_->mask_shape(samples.front());
  SegBatch out;
  out.index = b;
  out.overlap = pipeline_->mask_options().overlap;
  out.images = Tensor::empty({n, h, w, 3}, DType::U8, Device::cpu(), pinned_);
  auto* pixels = out.images.data<uint8_t>();
  const size_t image_bytes = static_cast<size_t>(h) * w * 3;
  std::vector<SegSample> made;
  made.reserve(samples.size());
  int64_t planes = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (cancelled()) return std::nullopt;
    Generator gen = sample_generator(options_.seed, options_.rank, epoch, samples[i]);
    cv::Mat slot(h, w, CV_8UC3, pixels + i * image_bytes);
    made.push_back(pipeline_->get(samples[i], gen, partners, slot, buffers));
    const SegSample& s = made.back();
    KESTREL_CHECK(s.sample.image.rows == h && s.sample.image.cols == w, "segmentation loader: ", s.sample.path,
                  " came out ", s.sample.image.cols, "x", s.sample.image.rows, ", its batch is ", w, "x", h);
    if (s.sample.image.data != slot.data) s.sample.image.copyTo(slot);
    for (const cv::Mat& m : s.masks)
      KESTREL_CHECK(m.rows == mh && m.cols == mw, "segmentation loader: ", s.sample.path, "'s masks are ",
                    m.cols, "x", m.rows, ", its batch's ", mw, "x", mh);
    planes += static_cast<int64_t>(s.masks.size());
  }
  out.masks = Tensor::empty({planes, mh, mw}, DType::F32, Device::cpu(), pinned_);
  float* dst = out.masks.data<float>();
  std::vector<const std::vector<LabelBox>*> labels;
  for (const SegSample& s : made) {
    dst = copy_masks(s.masks, dst);
    labels.push_back(&s.sample.labels);
    out.paths.push_back(s.sample.path);
    out.shapes.push_back(s.sample.has_shapes ? std::optional<SampleShapes>(s.sample.shapes) : std::nullopt);
  }
  out.targets = collate_targets(labels, pinned_);
  return out;
}

SegBatch SegLoader::build_batch(int64_t epoch, int64_t b) const {
  KESTREL_CHECK(b >= 0 && b < len(), "segmentation loader: batch ", b, " outside [0, ", len(), ")");
  return *build(b, plan_.batch(plan_.order(epoch), b), epoch, plan_.partners(epoch), [] { return false; }, nullptr);
}

void SegLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  KESTREL_CHECK(epoch >= 0, "segmentation loader: epoch must be >= 0, got ", epoch);
  auto plan = std::make_shared<EpochPlan>();
  plan->order = plan_.order(epoch);
  plan->partners = plan_.partners(epoch);
  batches_->start_epoch(epoch, len(), first_batch, std::move(plan));
}

std::optional<SegBatch> SegLoader::next() { return batches_->next(); }

}  // namespace kestrel::yolo::data
