#include "yolo/data/loader.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "yolo/data/quad_collate.h"

namespace kestrel::yolo::data {

int dataloader_workers(int cores, int local_ranks, int64_t batch_size, int64_t dataset_size, int workers) {
  const int64_t batch = std::min(batch_size, dataset_size);
  const int64_t per_rank = std::max(cores, 0) / std::max(local_ranks, 1);
  return static_cast<int>(std::max<int64_t>(0, std::min({per_rank, batch > 1 ? batch : int64_t{0}, int64_t{workers}})));
}

EpochOrder sequential_order(int64_t n) {
  return {n, [n](int64_t) {
            std::vector<int64_t> all(n);
            for (int64_t i = 0; i < n; ++i) all[i] = i;
            return all;
          },
          {}};
}

EpochOrder distributed_order(const DistributedSampler& sampler) {
  return {sampler.num_samples(), [sampler](int64_t epoch) {
            DistributedSampler at_epoch = sampler;
            at_epoch.set_epoch(epoch);
            return at_epoch.indices();
          },
          {}};
}

BatchPlan::BatchPlan(EpochOrder order, const LoaderOptions& options, int64_t dataset_size, std::string what)
    : order_(std::move(order)), batch_size_(options.batch_size), quad_(options.quad),
      dataset_size_(dataset_size), what_(std::move(what)) {
  KESTREL_CHECK(options.batch_size > 0, what_, ": batch size must be positive, got ", options.batch_size);
  KESTREL_CHECK(options.workers >= 0 && options.prefetch >= 0, what_, ": workers and prefetch must be >= 0, got ",
                options.workers, " and ", options.prefetch);
  KESTREL_CHECK(order_.samples >= 0 && order_.indices, what_, ": needs an epoch order");
  KESTREL_CHECK(!options.quad || options.batch_size % 4 == 0, "--quad: the batch per rank (",
                options.batch_size, ") must be a multiple of 4; the quad collate makes one image of every 4");
}

int64_t BatchPlan::len() const {
  const int64_t full = order_.samples / batch_size_, rest = order_.samples % batch_size_;
  return full + (rest >= (quad_ ? 4 : 1) ? 1 : 0);
}

std::vector<int64_t> BatchPlan::order(int64_t epoch) const {
  std::vector<int64_t> order = order_.indices(epoch);
  KESTREL_CHECK(static_cast<int64_t>(order.size()) == order_.samples, what_, ": the order of ",
                "epoch ", epoch, " has ", order.size(), " samples, expected ", order_.samples);
  for (int64_t i : order)
    KESTREL_CHECK(i >= 0 && i < dataset_size_, what_, ": epoch ", epoch, " asks for ",
                  "sample ", i, " of a dataset of ", dataset_size_);
  return order;
}

std::vector<int64_t> BatchPlan::partners(int64_t epoch) const {
  return order_.partners ? order_.partners(epoch) : std::vector<int64_t>();
}

std::vector<int64_t> BatchPlan::batch(const std::vector<int64_t>& order, int64_t b) const {
  const int64_t begin = b * batch_size_;
  const int64_t end = std::min<int64_t>(begin + batch_size_, order.size());
  return {order.begin() + begin, order.begin() + end};
}

std::array<int, 2> batch_shape(const AugmentPipeline& pipeline, const std::vector<int64_t>& samples, int64_t b) {
  const std::array<int, 2> shape = pipeline.sample_shape(samples.front());
  for (int64_t index : samples)
    KESTREL_CHECK(pipeline.sample_shape(index) == shape, "data loader: batch ", b, " mixes ",
                  pipeline.record(samples.front()).image_path, " (", shape[1], "x", shape[0], ") with ",
                  pipeline.record(index).image_path, " (", pipeline.sample_shape(index)[1], "x",
                  pipeline.sample_shape(index)[0],
                  "); rectangular batches need the dataset's own (sequential) order");
  return shape;
}

Tensor collate_targets(const std::vector<const std::vector<LabelBox>*>& labels, bool pinned) {
  int64_t rows = 0;
  for (const std::vector<LabelBox>* l : labels) rows += static_cast<int64_t>(l->size());
  // Pinned like the images: a pageable source would make the upload synchronous.
  Tensor out = Tensor::empty({rows, 6}, DType::F32, Device::cpu(), pinned);
  auto* t = out.data<float>();
  for (size_t i = 0; i < labels.size(); ++i)
    for (const LabelBox& l : *labels[i]) {
      const float row[6] = {static_cast<float>(i), static_cast<float>(l.cls), l.x, l.y, l.w, l.h};
      std::memcpy(t, row, sizeof(row));
      t += 6;
    }
  return out;
}

Loader::Loader(std::shared_ptr<const AugmentPipeline> pipeline, LoaderOptions options,
               EpochOrder order)
    : pipeline_(std::move(pipeline)), options_(options),
      plan_(std::move(order), options, pipeline_ ? pipeline_->size() : 0, "data loader") {
  KESTREL_CHECK(pipeline_ != nullptr, "data loader: no pipeline given");
  pinned_ = options_.pin_memory && cuda_available();
  const int device = options_.cuda_device;
  batches_ = std::make_unique<Batches>(
      options_.workers, options_.prefetch, "data loader",
      [this](int64_t epoch, int64_t b, const EpochPlan& plan, const std::function<bool()>& cancelled,
             LoadBuffers* buffers) {
        return build(b, plan_.batch(plan.order, b), epoch, plan.partners, cancelled, buffers);
      },
      [device] {
        if (device >= 0) cudaSetDevice(device);
      });
}

Loader::~Loader() = default;  // batches_ stops and joins its workers first

int64_t Loader::len() const { return plan_.len(); }

std::optional<Batch> Loader::build(int64_t b, const std::vector<int64_t>& samples, int64_t epoch,
                                   const std::vector<int64_t>& partners,
                                   const std::function<bool()>& cancelled,
                                   LoadBuffers* buffers) const {
  // Every sample of a batch has the batch's shape; each is made straight into its slot.
  const int64_t n = static_cast<int64_t>(samples.size());
  const auto [h, w] = batch_shape(*pipeline_, samples, b);
  Batch out;
  out.index = b;
  out.images = Tensor::empty({n, h, w, 3}, DType::U8, Device::cpu(), pinned_);
  auto* pixels = out.images.data<uint8_t>();
  const size_t image_bytes = static_cast<size_t>(h) * w * 3;
  std::vector<Sample> made;
  made.reserve(samples.size());
  for (int64_t i = 0; i < n; ++i) {
    if (cancelled()) return std::nullopt;
    Generator gen = sample_generator(options_.seed, options_.rank, epoch, samples[i]);
    cv::Mat slot(h, w, CV_8UC3, pixels + i * image_bytes);
    made.push_back(pipeline_->get(samples[i], gen, partners, slot, buffers));
    const Sample& s = made.back();
    KESTREL_CHECK(s.image.rows == h && s.image.cols == w, "data loader: ", s.path, " came out ",
                  s.image.cols, "x", s.image.rows, ", its batch is ", w, "x", h);
    if (s.image.data != slot.data) s.image.copyTo(slot);
  }
  std::vector<const std::vector<LabelBox>*> labels;
  for (const Sample& s : made) {
    labels.push_back(&s.labels);
    out.paths.push_back(s.path);
    out.shapes.push_back(s.has_shapes ? std::optional<SampleShapes>(s.shapes) : std::nullopt);
  }
  out.targets = collate_targets(labels, pinned_);
  if (options_.quad) {
    Generator gen = quad_generator(options_.seed, options_.rank, epoch, b);
    return quad_collate(out, gen, pinned_);
  }
  return out;
}

Batch Loader::build_batch(int64_t epoch, int64_t b) const {
  KESTREL_CHECK(b >= 0 && b < len(), "data loader: batch ", b, " outside [0, ", len(), ")");
  return *build(b, plan_.batch(plan_.order(epoch), b), epoch, plan_.partners(epoch), [] { return false; }, nullptr);
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  KESTREL_CHECK(epoch >= 0, "data loader: epoch must be >= 0, got ", epoch);
  auto plan = std::make_shared<EpochPlan>();
  plan->order = plan_.order(epoch);
  plan->partners = plan_.partners(epoch);
  batches_->start_epoch(epoch, len(), first_batch, std::move(plan));
}

std::optional<Batch> Loader::next() { return batches_->next(); }

}  // namespace kestrel::yolo::data
