#include "yolo/model/classification_model.h"


#include "base/error.h"
#include "engine/autograd.h"

namespace kestrel::yolo {

ModelConfig classifier_config(const ModelConfig& detection, int nc, int cutoff) {
  const std::string name = detection.path.empty() ? "the model" : detection.path;
  KESTREL_CHECK(!is_classifier_config(detection), name, " is already a classifier; it has no detection layers to cut");
  const int rows = static_cast<int>(detection.rows.size());
  KESTREL_CHECK(cutoff >= 2 && cutoff <= rows - 1, "--cutoff ", cutoff, " is outside [2, ", rows - 1, "]: ", name,
                " has ", rows, " layers and the Classify head replaces layer cutoff - 1 (the reference's default is ",
                kDefaultCutoff, ", the end of the backbone)");
  ModelConfig c = detection;
  c.nc = nc;
  c.rows.resize(cutoff);
  LayerRow& head = c.rows.back();
  KESTREL_CHECK(head.module != "Concat", name, ": layer ", cutoff - 1,
                " is a Concat, which the Classify head cannot replace (the reference takes the replaced "
                "layer's convolution's input channels); choose another --cutoff");
  head.number = 1;
  head.module = "Classify";
  head.args = {ConfigArg{std::to_string(nc), {}, false}};
  head.where = name + ", the Classify head (layer " + std::to_string(cutoff - 1) + ")";
  c.anchors.clear();  // a classifier has no anchors; the yaml keeps a count
  return c;
}

bool is_classifier_config(const ModelConfig& config) {
  return !config.rows.empty() && config.rows.back().module == "Classify";
}

ClassificationModel::ClassificationModel(const ModelConfig& config, uint64_t seed,
                                         const layers::BatchNorm2d::NormFn& norm)
    : config_(config) {
  KESTREL_CHECK(is_classifier_config(config_), config_.path.empty() ? "the model" : config_.path,
                ": a classifier's last row is Classify [nc]; build detectors as DetectionModel");
  Generator gen(seed);
  container_ = register_module("model", std::make_shared<LayerSequence>());
  BuiltRows rows = build_rows(config_, *container_, /*no=*/-1, gen, [&](const RowBuild& r) {
    KESTREL_CHECK(r.row.args.size() == 1, r.where, ": Classify takes [nc]");
    const int64_t nc = r.arg(0)->text == "nc" ? config_.nc : r.arg(0)->as_int(r.where);
    KESTREL_CHECK(nc >= 1, r.where, ": Classify needs at least one class, got ", nc);
    config_.nc = static_cast<int>(nc);
    int64_t c_in = 0;  // a list of inputs is concatenated on channels, as the reference's forward
    for (int f : r.from) c_in += f == 0 && r.ch.empty() ? config_.input_channels : r.ch[f];
    head_ = std::make_shared<layers::Classify>(c_in, nc, r.gen);
    return BuiltRow{head_, {std::to_string(c_in), std::to_string(nc)}, nc};
  });
  layers_ = std::move(rows.layers);
  saved_ = std::move(rows.saved);
  table_ = std::move(rows.table);
  if (norm) layers::set_batch_norm(*this, norm);
}

Tensor ClassificationModel::forward(const Tensor& x) {
  KESTREL_CHECK(x.dim() == 4 && x.size(3) == config_.input_channels, "classifier input must be NHWC ",
                "(batch, height, width, ", config_.input_channels, "), got ", x.describe());
  std::vector<Tensor> ins = run_rows(layers_, saved_, x, nullptr, nullptr);
  return ins.size() == 1 ? head_->forward(ins[0]) : head_->forward(ins);
}

void ClassificationModel::set_classes(int nc, uint64_t seed) {
  KESTREL_CHECK(nc >= 1, "a classifier needs at least one class, got ", nc);
  if (nc == config_.nc) return;
  Generator gen(seed);
  head_->set_classes(nc, gen);
  config_.nc = nc;
  config_.rows.back().args = {ConfigArg{std::to_string(nc), {}, false}};
  LayerInfo& row = table_.back();
  row.params = head_->parameter_count();
  row.args = python_list({std::to_string(head_->conv->conv->in_channels), std::to_string(nc)});
}

int64_t ClassificationModel::layer_count() const {
  return module_count() + (loaded_from_file_ ? 2 : 1);
}

double ClassificationModel::summary_gflops(int64_t img_size, bool fused) {
  const int64_t s = 32;
  const bool was_training = is_training();
  train(false);
  {
    autograd::NoGradGuard no_grad;
    const Device device = parameters().empty() ? Device::cpu() : parameters().front().device();
    forward(Tensor::zeros({1, s, s, config_.input_channels}, DType::F32, device));
  }
  train(was_training);
  double ops = thop_ops(*this, fused);
  // The head after its Conv: thop counts the Linear's multiplies (one image) and the average
  // pool's additions and one division per output.
  const layers::Linear& linear = *head_->linear;
  ops += static_cast<double>(linear.in_features * linear.out_features);
  const int64_t hw = head_->conv->conv->last_macs() /
                     (head_->conv->conv->in_channels * head_->conv->conv->out_channels * head_->conv->conv->kernel *
                      head_->conv->conv->kernel);
  ops += static_cast<double>((hw + 1) * head_->conv->conv->out_channels);
  return 2.0 * ops / 1e9 * (img_size / static_cast<double>(s)) * (img_size / static_cast<double>(s));
}

std::string ClassificationModel::summary(int64_t img_size, bool fused) {
  return summary_line("Model", *this, layer_count(), fused, summary_gflops(img_size, fused));
}

std::string ClassificationModel::describe(int64_t img_size) {
  return layer_table_text(table_) + summary(img_size) + "\n";
}

}  // namespace kestrel::yolo
