#include "yolo/model/segmentation_model.h"

#include <algorithm>

#include "base/error.h"
#include "engine/autograd.h"
#include "yolo/model/model.h"

namespace kestrel::yolo {
namespace {

// Far beyond the official models (32 masks, Proto of 320 channels in yolov5x-seg), so that a
// typo is refused here rather than building a model no machine can hold.
constexpr int64_t kMaxMasks = 1024;
constexpr int64_t kMaxProtoChannels = 8192;

}  // namespace

bool is_segmentation_config(const ModelConfig& config) {
  return !config.rows.empty() && config.rows.back().module == "Segment";
}

SegmentationModel::SegmentationModel(const ModelConfig& config, std::optional<int> nc, uint64_t seed,
                                     const layers::BatchNorm2d::NormFn& norm)
    : config_(config) {
  const std::string name = config_.path.empty() ? "the model" : config_.path;
  KESTREL_CHECK(is_segmentation_config(config_), name,
                ": a segmentation model's last row is Segment [nc, anchors, nm, npr] (models/yolov5s-seg.yaml); "
                "build detectors as DetectionModel");
  if (nc) {
    KESTREL_CHECK(*nc >= 1, "--nc must be at least 1, got ", *nc);
    config_.nc = *nc;
  }
  Generator gen(seed);
  container_ = register_module("model", std::make_shared<LayerSequence>());
  // The channel scaling leaves a row of Detect's output width alone, as the reference's parse_model
  // (which knows that width as anchors x (nc + 5) for every head).
  const int64_t no = config_.anchors_per_level * (config_.nc + 5);
  BuiltRows rows = build_rows(config_, *container_, no, gen, [&](const RowBuild& r) {
    KESTREL_CHECK(r.row.module == "Segment", r.where, ": a segmentation model ends with Segment, not ", r.row.module);
    return build_segment(r);
  });
  layers_ = std::move(rows.layers);
  saved_ = std::move(rows.saved);
  table_ = std::move(rows.table);

  // Strides from a forward pass of a 256x256 image, in training mode as the reference does.
  const int64_t s = 256;
  Output out;
  {
    autograd::NoGradGuard no_grad;
    out = forward(Tensor::zeros({1, s, s, config_.input_channels}));
  }
  segment_->set_strides(level_strides(out.raw, s));
  if (norm) layers::set_batch_norm(*this, norm);
}

BuiltRow SegmentationModel::build_segment(const RowBuild& r) {
  KESTREL_CHECK(r.row.args.size() == 4, r.where, ": Segment takes [nc, anchors, nm, npr] (the reference's ",
                "[nc, anchors, 32, 256]), got ", r.row.args.size(), " arguments");
  const int64_t nm = r.arg(2)->as_int(r.where);
  KESTREL_CHECK(nm >= 1 && nm <= kMaxMasks, r.where, ": nm ", nm, " masks is outside [1, ", kMaxMasks,
                "] (the official models use 32)");
  const int64_t npr_yaml = r.arg(3)->as_int(r.where);
  KESTREL_CHECK(npr_yaml >= 1, r.where, ": npr (Proto's channels) must be at least 1, got ", npr_yaml);
  const int64_t npr = make_divisible(static_cast<double>(npr_yaml) * r.gw, 8);  // as parse_model scales it
  KESTREL_CHECK(npr <= kMaxProtoChannels, r.where, ": npr ", npr_yaml, " gives ", npr,
                " Proto channels at width_multiple ", r.gw, "; at most ", kMaxProtoChannels,
                " are supported (the official models use 256)");
  std::vector<int64_t> level_ch;
  for (int f : r.from) level_ch.push_back(r.ch[f]);
  const std::vector<std::vector<double>> anchors = head_anchors(config_, r.from.size());
  segment_ = std::make_shared<layers::Segment>(config_.nc, anchors, nm, npr, level_ch, r.gen);
  return {segment_,
          {std::to_string(config_.nc), anchors_text(anchors), std::to_string(nm), std::to_string(npr),
           channels_text(level_ch)},
          r.no};
}

SegmentationModel::Output SegmentationModel::run(const Tensor& x, std::vector<Shape>* shapes) {
  KESTREL_CHECK(x.dim() == 4 && x.size(3) == config_.input_channels, "model input must be NHWC ",
                "(batch, height, width, ", config_.input_channels, "), got ", x.describe());
  Output out = segment_->forward(run_rows(layers_, saved_, x, shapes, nullptr));
  if (shapes) shapes->push_back(out.raw[0].shape());
  return out;
}

SegmentationModel::Output SegmentationModel::forward(const Tensor& x) { return run(x); }

std::vector<Shape> SegmentationModel::layer_output_shapes(const Tensor& x) {
  std::vector<Shape> shapes;
  run(x, &shapes);
  return shapes;
}

SegmentationModel::Prediction SegmentationModel::predict(const Tensor& x) {
  Output out = run(x);
  Prediction p;
  p.boxes = segment_->decode(out.raw);
  p.protos = std::move(out.protos);
  p.raw = std::move(out.raw);
  return p;
}

int64_t SegmentationModel::layer_count() const {
  // Conv blocks share one SiLU module in the reference; it counts once (Proto has Convs).
  return module_count() + 1;
}

double SegmentationModel::summary_gflops(int64_t img_size, bool fused) {
  const int64_t s =
      std::max<int64_t>(32, static_cast<int64_t>(*std::max_element(strides().begin(), strides().end())));
  const bool was_training = is_training();
  train(false);
  std::vector<Shape> shapes;
  {
    autograd::NoGradGuard no_grad;
    const Device device = parameters().empty() ? Device::cpu() : parameters().front().device();
    shapes = layer_output_shapes(Tensor::zeros({1, s, s, config_.input_channels}, DType::F32, device));
  }
  train(was_training);
  double ops = thop_ops(*this, fused, upsample_shapes(layers_, shapes));
  // Proto's upsample: four outputs per element of cv1's output.
  const layers::Conv2d& cv1 = *segment_->proto->cv1->conv;
  ops += 4.0 * static_cast<double>(cv1.last_macs() / (cv1.in_channels * cv1.kernel * cv1.kernel));
  return 2.0 * ops / 1e9 * (img_size / static_cast<double>(s)) * (img_size / static_cast<double>(s));
}

std::string SegmentationModel::summary(int64_t img_size, bool fused) {
  return summary_line(summary_name(config_), *this, layer_count(), fused, summary_gflops(img_size, fused));
}

std::string SegmentationModel::describe(int64_t img_size) {
  return layer_table_text(table_) + summary(img_size) + "\n";
}

}  // namespace kestrel::yolo
