#include "yolo/model/model_rows.h"

#include <charconv>
#include <cstdio>
#include <cmath>
#include <map>

#include "base/error.h"
#include "yolo/model/model.h"

namespace kestrel::yolo {

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

}  // namespace

// Every row but the head's, by the yaml's module name.
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

BuiltRows build_rows(const ModelConfig& config, LayerSequence& container, int64_t no, Generator& gen,
                     const std::function<BuiltRow(const RowBuild&)>& head) {
  BuiltRows out;
  std::vector<int64_t> ch;  // output channels per layer
  for (size_t i = 0; i < config.rows.size(); ++i) {
    const LayerRow& row = config.rows[i];
    std::vector<int> from;
    for (int f : row.from) from.push_back(f < 0 ? static_cast<int>(i) + f : f);
    const int64_t c_in = i == 0 ? config.input_channels : ch[from[0]];
    const int n = row.number > 1 ? static_cast<int>(std::max<int64_t>(std::nearbyint(row.number * config.depth_multiple), 1))
                                 : row.number;
    const RowBuild r{row, row.where, n, c_in, no, config.width_multiple, from, ch, gen};
    const bool known = row.module != "Detect" && row.module != "Segment" && row.module != "Classify";
    KESTREL_CHECK(known || i + 1 == config.rows.size(), row.where, ": ", row.module, " must be the last layer");
    const BuiltRow built = known ? build_row(r) : head(r);
    container.append(built.module);
    out.layers.push_back({built.module, from});
    std::vector<std::string> from_text;
    for (int f : row.from) from_text.push_back(std::to_string(f));
    out.table.push_back({static_cast<int>(i), row.from_is_list ? python_list(from_text) : from_text[0], n,
                         built.module->parameter_count(), built.module->type_name(), python_list(built.args)});
    ch.push_back(built.c_out);
  }
  out.saved.assign(out.layers.size(), false);
  for (size_t i = 0; i < out.layers.size(); ++i)
    for (int f : out.layers[i].from)
      if (f != static_cast<int>(i) - 1) out.saved[f] = true;
  return out;
}

std::vector<Tensor> run_rows(const std::vector<ModelLayer>& layers, const std::vector<bool>& saved,
                             const Tensor& x, std::vector<Shape>* shapes, const LayerObserver* observe) {
  KESTREL_CHECK(!layers.empty(), "the model has no layers");
  std::vector<Tensor> outputs(layers.size());
  Tensor previous = x;
  const size_t head = layers.size() - 1;
  auto inputs_of = [&](size_t i) {
    std::vector<Tensor> ins;
    for (int f : layers[i].from) ins.push_back(i == 0 ? x : f == static_cast<int>(i) - 1 ? previous : outputs[f]);
    return ins;
  };
  for (size_t i = 0; i < head; ++i) {
    const ModelLayer& layer = layers[i];
    if (auto* unary = dynamic_cast<layers::UnaryModule*>(layer.module.get())) {
      previous = unary->forward(inputs_of(i)[0]);
    } else if (auto* cat = dynamic_cast<layers::Concat*>(layer.module.get())) {
      previous = cat->forward(inputs_of(i));
    } else {
      KESTREL_FAIL("layer ", i, " (", layer.module->type_name(), ") can only be a model's last layer");
    }
    if (shapes) shapes->push_back(previous.shape());
    if (observe) (*observe)(static_cast<int>(i), *layer.module, previous);
    if (saved[i]) outputs[i] = previous;
  }
  return inputs_of(head);
}

std::string summary_name(const ModelConfig& config) {
  std::string name = config.name;
  if (name.rfind("yolov5", 0) == 0) name = "YOLOv5" + name.substr(6);
  return name.empty() ? "Model" : name;
}

double thop_ops(layers::Module& model, bool fused, const std::vector<Shape>& upsampled) {
  double ops = 0;
  model.visit([&](layers::Module& m) {
    if (auto* c = dynamic_cast<layers::Conv2d*>(&m)) ops += static_cast<double>(c->last_macs());
    if (auto* c = dynamic_cast<layers::Conv*>(&m); c && !fused)
      ops += 4.0 * static_cast<double>(c->conv->last_macs() / (c->conv->in_channels * c->conv->kernel * c->conv->kernel));
  });
  for (const Shape& shape : upsampled) {
    double n = 1;
    for (int64_t d : shape) n *= static_cast<double>(d);
    ops += n;
  }
  return ops;
}

std::vector<Shape> upsample_shapes(const std::vector<ModelLayer>& layers, const std::vector<Shape>& shapes) {
  std::vector<Shape> out;
  for (size_t i = 0; i < layers.size() && i < shapes.size(); ++i)
    if (dynamic_cast<const layers::Upsample*>(layers[i].module.get())) out.push_back(shapes[i]);
  return out;
}

std::vector<std::vector<double>> head_anchors(const ModelConfig& config, size_t levels) {
  if (!config.anchors.empty()) return config.anchors;
  std::vector<double> level;
  for (int64_t k = 0; k < 2 * config.anchors_per_level; ++k) level.push_back(static_cast<double>(k));
  return std::vector<std::vector<double>>(levels, level);
}

std::string anchors_text(const std::vector<std::vector<double>>& anchors) {
  std::vector<std::string> levels;
  for (const auto& l : anchors) {
    std::vector<std::string> v;
    for (double x : l) v.push_back(python_number(x));
    levels.push_back(python_list(v));
  }
  return python_list(levels);
}

std::string channels_text(const std::vector<int64_t>& channels) {
  std::vector<std::string> out;
  for (int64_t c : channels) out.push_back(std::to_string(c));
  return python_list(out);
}

std::vector<double> level_strides(const std::vector<Tensor>& raw, int64_t size) {
  std::vector<double> strides;
  for (const Tensor& level : raw) strides.push_back(static_cast<double>(size) / static_cast<double>(level.size(2)));
  return strides;
}

std::string summary_line(const std::string& name, layers::Module& model, int64_t layer_count, bool fused, double gflops) {
  int64_t layers = layer_count, params = model.parameter_count(), grads = 0;
  if (fused) {  // each folded BatchNorm leaves the model, with its weight and bias; its conv gains a bias
    model.visit([&](layers::Module& m) {
      if (auto* c = dynamic_cast<layers::Conv*>(&m)) layers -= 1, params -= c->conv->out_channels;
    });
  } else {
    for (const Tensor& p : model.parameters())
      if (p.requires_grad()) grads += p.numel();
  }
  char flops[32];
  std::snprintf(flops, sizeof flops, "%.1f", gflops);
  return str(name, " summary: ", layers, " layers, ", params, " parameters, ", grads, " gradients, ", flops, " GFLOPs");
}

std::string layer_table_text(const std::vector<LayerInfo>& table) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "\n%3s%18s%3s%10s  %-40s%-30s\n", "", "from", "n", "params", "module", "arguments");
  out += line;
  for (const LayerInfo& l : table) {
    std::snprintf(line, sizeof line, "%3d%18s%3d%10lld  %-40s%-30s\n", l.index, l.from.c_str(), l.number,
                  static_cast<long long>(l.params), l.type.c_str(), l.args.c_str());
    out += line;
  }
  return out;
}

}  // namespace kestrel::yolo
