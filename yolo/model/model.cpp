#include "yolo/model/model.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "yolo/model/model_rows.h"

namespace kestrel::yolo {

int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

int64_t make_divisible(double x, int64_t divisor) {
  return static_cast<int64_t>(std::ceil(x / static_cast<double>(divisor))) * divisor;
}

DetectionModel::DetectionModel(const ModelConfig& config, std::optional<int> nc, uint64_t seed,
                               const layers::BatchNorm2d::NormFn& norm)
    : config_(config) {
  if (nc) {
    KESTREL_CHECK(*nc >= 1, "--nc must be at least 1, got ", *nc);
    config_.nc = *nc;
  }
  Generator gen(seed);
  build(gen);

  // Strides from a forward pass of a 256x256 image, in training mode as the reference does.
  const int64_t s = 256;
  std::vector<Tensor> out;
  {
    autograd::NoGradGuard no_grad;
    out = forward(Tensor::zeros({1, s, s, config_.input_channels}));
  }
  detect_->set_strides(level_strides(out, s));
  if (norm) layers::set_batch_norm(*this, norm);
}

void DetectionModel::build(Generator& gen) {
  auto container = std::make_shared<LayerSequence>();
  container_ = register_module("model", container);
  const int64_t no = config_.anchors_per_level * (config_.nc + 5);
  BuiltRows rows = build_rows(config_, *container, no, gen, [&](const RowBuild& r) {
    KESTREL_CHECK(r.row.module == "Detect", r.where, ": a detection model ends with Detect, not ", r.row.module);
    return build_detect(r);
  });
  KESTREL_CHECK(detect_, config_.path, ": no Detect layer");
  layers_ = std::move(rows.layers);
  saved_ = std::move(rows.saved);
  table_ = std::move(rows.table);
}

BuiltRow DetectionModel::build_detect(const RowBuild& r) {
  KESTREL_CHECK(!detect_, r.where, ": only one Detect layer is supported");
  std::vector<int64_t> level_ch;
  for (int f : r.from) level_ch.push_back(r.ch[f]);
  const std::vector<std::vector<double>> anchors = head_anchors(config_, r.from.size());
  detect_ = std::make_shared<layers::Detect>(config_.nc, anchors, level_ch, r.gen);
  return {detect_, {std::to_string(config_.nc), anchors_text(anchors), channels_text(level_ch)}, r.no};
}

std::vector<Tensor> DetectionModel::run(const Tensor& x, std::vector<Shape>* shapes, const LayerObserver* observe) {
  KESTREL_CHECK(x.dim() == 4 && x.size(3) == config_.input_channels, "model input must be NHWC ",
                "(batch, height, width, ", config_.input_channels, "), got ", x.describe());
  std::vector<Tensor> out = detect_->forward(run_rows(layers_, saved_, x, shapes, observe));
  if (shapes) shapes->push_back(out[0].shape());
  return out;
}

std::vector<Tensor> DetectionModel::forward(const Tensor& x) { return run(x); }

std::vector<Shape> DetectionModel::layer_output_shapes(const Tensor& x) {
  std::vector<Shape> shapes;
  run(x, &shapes);
  return shapes;
}

DetectionModel::Prediction DetectionModel::predict(const Tensor& x) {
  Prediction p;
  p.raw = run(x);
  p.boxes = detect_->decode(p.raw);
  return p;
}

DetectionModel::Prediction DetectionModel::predict(const Tensor& x, const LayerObserver& observe) {
  Prediction p;
  p.raw = run(x, nullptr, &observe);
  p.boxes = detect_->decode(p.raw);
  return p;
}

int64_t DetectionModel::layer_count() const {
  // Conv blocks share one SiLU module in the reference; it counts once.
  bool has_conv = false;
  for (const auto& row : config_.rows)
    has_conv = has_conv || row.module == "Conv" || row.module == "C3" ||
               row.module == "Bottleneck" || row.module == "SPPF";
  return module_count() + (has_conv ? 1 : 0);
}

double DetectionModel::gflops(int64_t img_size) {
  // As the reference: profile one stride-sized image, scale to img_size².
  const int64_t s = std::max<int64_t>(32, static_cast<int64_t>(*std::max_element(
                                              detect_->strides.begin(), detect_->strides.end())));
  const bool was_training = is_training();
  train(false);
  {
    autograd::NoGradGuard no_grad;
    forward(Tensor::zeros({1, s, s, config_.input_channels}));
  }
  train(was_training);
  int64_t macs = 0;
  visit([&](layers::Module& m) {
    if (auto* c = dynamic_cast<layers::Conv2d*>(&m)) macs += c->last_macs();
  });
  return 2.0 * static_cast<double>(macs) / 1e9 * (img_size / static_cast<double>(s)) *
         (img_size / static_cast<double>(s));
}

double DetectionModel::summary_gflops(int64_t img_size, bool fused) {
  const int64_t s = std::max<int64_t>(32, static_cast<int64_t>(*std::max_element(
                                              detect_->strides.begin(), detect_->strides.end())));
  const bool was_training = is_training();
  train(false);
  std::vector<Shape> shapes;
  {
    autograd::NoGradGuard no_grad;
    const Device device = parameters().empty() ? Device::cpu() : parameters().front().device();
    shapes = layer_output_shapes(Tensor::zeros({1, s, s, config_.input_channels}, DType::F32, device));
  }
  train(was_training);
  const double ops = thop_ops(*this, fused, upsample_shapes(layers_, shapes));
  return 2.0 * ops / 1e9 * (img_size / static_cast<double>(s)) * (img_size / static_cast<double>(s));
}

std::string DetectionModel::summary(int64_t img_size, bool fused) {
  return summary_line(summary_name(config_), *this, layer_count(), fused, summary_gflops(img_size, fused));
}

std::string DetectionModel::describe(int64_t img_size) { return layer_table_text(table_) + summary(img_size) + "\n"; }

}  // namespace kestrel::yolo
