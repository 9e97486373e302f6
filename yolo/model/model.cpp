#include "yolo/model/model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "engine/autograd.h"

namespace kestrel::yolo {
namespace {

// The reference's nn.Sequential of layers ("model.0", "model.1", ...); layers are heterogeneous
// (Concat and Detect take several inputs), so the model routes them itself.
class LayerSequence : public layers::Module {
 public:
  void append(std::shared_ptr<layers::Module> m) { register_module(std::to_string(count_++), m); }
  std::string type_name() const override { return "torch.nn.modules.container.Sequential"; }

 private:
  int count_ = 0;
};

std::string python_number(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string python_list(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + "]";
}

std::string arg_text(const ConfigArg& a) {
  if (a.is_list) {
    std::vector<std::string> items;
    for (const auto& i : a.items) items.push_back(arg_text(i));
    return python_list(items);
  }
  if (a.text == "None" || a.text == "True" || a.text == "False") return a.text;
  // A yaml written from JSON (a .pt's model yaml) spells the booleans in lower case.
  if (a.text == "true" || a.text == "false") return a.text == "true" ? "True" : "False";
  char* end = nullptr;
  std::strtod(a.text.c_str(), &end);
  if (!a.text.empty() && *end == '\0') return a.text;
  return "'" + a.text + "'";
}

}  // namespace

// A yaml row being built: what a module's builder reads (the row, its repeat count after the depth
// gain, its input channels, the Detect output width that channel scaling leaves alone, the width
// gain, the absolute inputs and every earlier layer's channels).
struct RowBuild {
  const LayerRow& row;
  const std::string& where;
  int n;
  int64_t c_in, no;
  double gw;
  const std::vector<int>& from;
  const std::vector<int64_t>& ch;
  Generator& gen;

  const ConfigArg* arg(size_t k) const { return k < row.args.size() ? &row.args[k] : nullptr; }
  // The reference's width gain: channels times gw, up to a multiple of 8 (not Detect's outputs).
  int64_t scaled(int64_t c2) const { return c2 != no ? make_divisible(c2 * gw, 8) : c2; }
  // n copies in an nn.Sequential, or the module itself when n is 1 (as the reference's m_).
  template <class Make>
  std::shared_ptr<layers::Module> repeat(Make make) const {
    if (n == 1) return make();
    auto seq = std::make_shared<layers::Sequential>();
    for (int r = 0; r < n; ++r) seq->append(make());
    return seq;
  }
};

// A built row: its module, its arguments as the reference's table prints them, its output channels.
struct BuiltRow {
  std::shared_ptr<layers::Module> module;
  std::vector<std::string> args;
  int64_t c_out = 0;
};

namespace {

BuiltRow build_conv(const RowBuild& r) {
  KESTREL_CHECK(r.arg(0) && r.row.args.size() <= 4, r.where, ": Conv takes [c2, k, s, p]");
  const int64_t c_out = r.scaled(r.arg(0)->as_int(r.where));
  const int64_t k = r.arg(1) ? r.arg(1)->as_int(r.where) : 1;
  const int64_t st = r.arg(2) ? r.arg(2)->as_int(r.where) : 1;
  std::optional<int64_t> p;
  if (r.arg(3) && !r.arg(3)->is_none()) p = r.arg(3)->as_int(r.where);
  BuiltRow b{r.repeat([&] { return std::make_shared<layers::Conv>(r.c_in, c_out, k, st, p, r.gen); }),
             {std::to_string(r.c_in), std::to_string(c_out)}, c_out};
  for (size_t a = 1; a < r.row.args.size(); ++a) b.args.push_back(arg_text(r.row.args[a]));
  return b;
}

BuiltRow build_c3_or_bottleneck(const RowBuild& r) {
  KESTREL_CHECK(r.arg(0) && r.row.args.size() <= 2, r.where, ": ", r.row.module, " takes [c2, shortcut]");
  const int64_t c_out = r.scaled(r.arg(0)->as_int(r.where));
  const bool shortcut = r.arg(1) ? r.arg(1)->as_bool(r.where) : true;
  BuiltRow b;
  b.c_out = c_out;
  if (r.row.module == "C3") {
    b.module = std::make_shared<layers::C3>(r.c_in, c_out, r.n, shortcut, r.gen);
    b.args = {std::to_string(r.c_in), std::to_string(c_out), std::to_string(r.n)};
  } else {
    b.module = r.repeat([&] { return std::make_shared<layers::Bottleneck>(r.c_in, c_out, shortcut, 0.5, r.gen); });
    b.args = {std::to_string(r.c_in), std::to_string(c_out)};
  }
  if (r.arg(1)) b.args.push_back(arg_text(*r.arg(1)));
  return b;
}

BuiltRow build_sppf(const RowBuild& r) {
  KESTREL_CHECK(r.arg(0) && r.row.args.size() <= 2, r.where, ": SPPF takes [c2, k]");
  const int64_t c_out = r.scaled(r.arg(0)->as_int(r.where));
  const int64_t k = r.arg(1) ? r.arg(1)->as_int(r.where) : 5;
  return {r.repeat([&] { return std::make_shared<layers::SPPF>(r.c_in, c_out, k, r.gen); }),
          {std::to_string(r.c_in), std::to_string(c_out), std::to_string(k)}, c_out};
}

BuiltRow build_upsample(const RowBuild& r) {
  KESTREL_CHECK(r.row.args.size() == 3 && r.arg(0)->is_none() && r.arg(1)->as_int(r.where) == 2 &&
                    r.arg(2)->text == "nearest",
                r.where, ": only nn.Upsample [None, 2, 'nearest'] is supported");
  BuiltRow b{r.repeat([] { return std::make_shared<layers::Upsample>(); }), {}, r.c_in};
  for (const auto& a : r.row.args) b.args.push_back(arg_text(a));
  return b;
}

BuiltRow build_concat(const RowBuild& r) {
  KESTREL_CHECK(r.row.args.size() == 1 && r.arg(0)->as_int(r.where) == 1, r.where,
                ": only Concat [1] (channels) is supported");
  int64_t c_out = 0;
  for (int f : r.from) c_out += r.ch[f];
  return {std::make_shared<layers::Concat>(), {"1"}, c_out};
}

// Every row but Detect's (DetectionModel::build_detect), by the yaml's module name.
BuiltRow build_row(const RowBuild& r) {
  using Builder = BuiltRow (*)(const RowBuild&);
  static const std::map<std::string, Builder> builders = {
      {"Conv", build_conv},   {"C3", build_c3_or_bottleneck}, {"Bottleneck", build_c3_or_bottleneck},
      {"SPPF", build_sppf},   {"nn.Upsample", build_upsample}, {"Concat", build_concat}};
  const auto it = builders.find(r.row.module);
  KESTREL_CHECK(it != builders.end(), r.where, ": unsupported module '", r.row.module,
                "'; Kestrel builds Conv, C3, Bottleneck, SPPF, nn.Upsample, Concat and Detect");
  return it->second(r);
}

}  // namespace

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
  std::vector<double> strides;
  for (const Tensor& o : out) strides.push_back(static_cast<double>(s) / o.size(2));
  detect_->set_strides(strides);
  if (norm) layers::set_batch_norm(*this, norm);
}

void DetectionModel::build(Generator& gen) {
  auto container = std::make_shared<LayerSequence>();
  container_ = register_module("model", container);
  const int64_t no = config_.anchors_per_level * (config_.nc + 5);
  std::vector<int64_t> ch;  // output channels per layer
  for (size_t i = 0; i < config_.rows.size(); ++i) {
    const LayerRow& row = config_.rows[i];
    std::vector<int> from;
    for (int f : row.from) from.push_back(f < 0 ? static_cast<int>(i) + f : f);
    const int64_t c_in = i == 0 ? config_.input_channels : ch[from[0]];
    const int n = row.number > 1 ? static_cast<int>(std::max<int64_t>(round_half_even(row.number * config_.depth_multiple), 1))
                                 : row.number;
    const RowBuild r{row, row.where, n, c_in, no, config_.width_multiple, from, ch, gen};
    BuiltRow built;
    if (row.module == "Detect") {
      KESTREL_CHECK(i + 1 == config_.rows.size(), row.where, ": Detect must be the last layer");
      built = build_detect(r);
    } else {
      built = build_row(r);
    }
    container->append(built.module);
    layers_.push_back({built.module, from});
    std::vector<std::string> from_text;
    for (int f : row.from) from_text.push_back(std::to_string(f));
    table_.push_back({static_cast<int>(i), row.from_is_list ? python_list(from_text) : from_text[0], n,
                      built.module->parameter_count(), built.module->type_name(), python_list(built.args)});
    ch.push_back(built.c_out);
  }
  KESTREL_CHECK(detect_, config_.path, ": no Detect layer");
  saved_.assign(layers_.size(), false);
  for (size_t i = 0; i < layers_.size(); ++i)
    for (int f : layers_[i].from)
      if (f != static_cast<int>(i) - 1) saved_[f] = true;
}

BuiltRow DetectionModel::build_detect(const RowBuild& r) {
  KESTREL_CHECK(!detect_, r.where, ": only one Detect layer is supported");
  std::vector<int64_t> level_ch;
  for (int f : r.from) level_ch.push_back(r.ch[f]);
  std::vector<std::vector<double>> anchors = config_.anchors;
  if (anchors.empty()) {  // a count only: provisional anchors until AutoAnchor, as the reference
    for (size_t l = 0; l < r.from.size(); ++l) {
      std::vector<double> level;
      for (int64_t k = 0; k < 2 * config_.anchors_per_level; ++k) level.push_back(static_cast<double>(k));
      anchors.push_back(level);
    }
  }
  detect_ = std::make_shared<layers::Detect>(config_.nc, anchors, level_ch, r.gen);
  std::vector<std::string> levels, chs;
  for (const auto& l : anchors) {
    std::vector<std::string> v;
    for (double x : l) v.push_back(python_number(x));
    levels.push_back(python_list(v));
  }
  for (int64_t c : level_ch) chs.push_back(std::to_string(c));
  return {detect_, {std::to_string(config_.nc), python_list(levels), python_list(chs)}, r.no};
}

std::vector<Tensor> DetectionModel::run(const Tensor& x, std::vector<Shape>* shapes, const LayerObserver* observe) {
  KESTREL_CHECK(x.dim() == 4 && x.size(3) == config_.input_channels, "model input must be NHWC ",
                "(batch, height, width, ", config_.input_channels, "), got ", x.describe());
  std::vector<Tensor> outputs(layers_.size());
  Tensor previous = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    auto input = [&](int f) { return f == static_cast<int>(i) - 1 ? previous : outputs[f]; };
    if (auto* unary = dynamic_cast<layers::UnaryModule*>(layer.module.get())) {
      previous = unary->forward(i == 0 ? x : input(layer.from[0]));
    } else {
      std::vector<Tensor> ins;
      for (int f : layer.from) ins.push_back(input(f));
      if (auto* cat = dynamic_cast<layers::Concat*>(layer.module.get())) {
        previous = cat->forward(ins);
      } else {
        std::vector<Tensor> out = detect_->forward(ins);
        if (shapes) shapes->push_back(out[0].shape());
        return out;
      }
    }
    if (shapes) shapes->push_back(previous.shape());
    if (observe) (*observe)(static_cast<int>(i), *layer.module, previous);
    if (saved_[i]) outputs[i] = previous;
  }
  KESTREL_FAIL("model has no Detect layer");
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
  double ops = 0;
  visit([&](layers::Module& m) {
    if (auto* c = dynamic_cast<layers::Conv2d*>(&m)) ops += static_cast<double>(c->last_macs());
    if (auto* c = dynamic_cast<layers::Conv*>(&m); c && !fused)
      ops += 4.0 * static_cast<double>(c->conv->last_macs() / (c->conv->in_channels * c->conv->kernel * c->conv->kernel));
  });
  for (size_t i = 0; i < layers_.size() && i < shapes.size(); ++i)
    if (dynamic_cast<const layers::Upsample*>(layers_[i].module.get())) {
      double n = 1;
      for (int64_t d : shapes[i]) n *= static_cast<double>(d);
      ops += n;
    }
  return 2.0 * ops / 1e9 * (img_size / static_cast<double>(s)) * (img_size / static_cast<double>(s));
}

std::string DetectionModel::summary(int64_t img_size, bool fused) {
  std::string name = config_.name;
  if (name.rfind("yolov5", 0) == 0) name = "YOLOv5" + name.substr(6);
  if (name.empty()) name = "Model";
  int64_t layers = layer_count(), params = parameter_count(), grads = 0;
  if (fused) {  // each folded BatchNorm leaves the model, with its weight and bias; its conv gains a bias
    visit([&](layers::Module& m) {
      if (auto* c = dynamic_cast<layers::Conv*>(&m)) layers -= 1, params -= c->conv->out_channels;
    });
  } else {
    for (const Tensor& p : parameters())
      if (p.requires_grad()) grads += p.numel();
  }
  char flops[32];
  std::snprintf(flops, sizeof flops, "%.1f", summary_gflops(img_size, fused));
  return str(name, " summary: ", layers, " layers, ", params, " parameters, ", grads, " gradients, ", flops, " GFLOPs");
}

std::string DetectionModel::describe(int64_t img_size) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "\n%3s%18s%3s%10s  %-40s%-30s\n", "", "from", "n", "params",
                "module", "arguments");
  os << line;
  for (const LayerInfo& l : table_) {
    std::snprintf(line, sizeof line, "%3d%18s%3d%10lld  %-40s%-30s\n", l.index, l.from.c_str(),
                  l.number, static_cast<long long>(l.params), l.type.c_str(), l.args.c_str());
    os << line;
  }
  os << summary(img_size) << "\n";
  return os.str();
}

}  // namespace kestrel::yolo
