#include "yolo/model/pt_writer.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "base/error.h"
#include "engine/autograd.h"
#include "io/pickle_writer.h"
#include "io/torch_zip_writer.h"
#include "layers/blocks.h"
#include "layers/classify.h"
#include "layers/detect.h"
#include "layers/segment.h"
#include "yolo/common/yaml_load.h"
#include "yolo/model/classification_model.h"
#include "yolo/model/segmentation_model.h"
#include "yolo/model/weights_file.h"

namespace kestrel::yolo {
namespace {

namespace pk = pickle;
using pk::NodePtr;
using Attributes = std::vector<std::pair<std::string, NodePtr>>;

// What the writer reads of a DetectionModel or a SegmentationModel (the reference's
// SegmentationModel is a DetectionModel whose last row is Segment): one walk writes both.
struct ModelView {
  std::string type;  // the model's class
  const ModelConfig& config;
  const std::vector<ModelLayer>& layers;
  const layers::Detect& head;  // Detect, or Segment
  const std::vector<double>& strides;
};

ModelView view_of(const layers::Module& m) {
  if (auto* d = dynamic_cast<const DetectionModel*>(&m)) return {d->type_name(), d->config(), d->layers(), d->detect(), d->strides()};
  if (auto* s = dynamic_cast<const SegmentationModel*>(&m))
    return {s->type_name(), s->config(), s->layers(), s->segment(), s->strides()};
  KESTREL_FAIL("write_reference_pt: a ", m.type_name(), " is neither a DetectionModel nor a SegmentationModel");
}

const char* storage_global(DType dtype) {
  switch (dtype) {
    case DType::F16: return "torch.HalfStorage";
    case DType::F32: return "torch.FloatStorage";
    case DType::F64: return "torch.DoubleStorage";
    case DType::BF16: return "torch.BFloat16Storage";
    case DType::I64: return "torch.LongStorage";
    case DType::I32: return "torch.IntStorage";
    case DType::U8: return "torch.ByteStorage";
  }
  KESTREL_FAIL("write_reference_pt: a tensor of unknown dtype");
}

NodePtr int_tuple(const std::vector<int64_t>& values) {
  std::vector<NodePtr> items;
  for (int64_t v : values) items.push_back(pk::integer(v));
  return pk::tuple(std::move(items));
}

NodePtr pair(int64_t v) { return int_tuple({v, v}); }

NodePtr from_json(const json::Value& v) {
  switch (v.kind()) {
    case json::Value::Kind::Null: return pk::none();
    case json::Value::Kind::Bool: return pk::boolean(v.as_bool());
    case json::Value::Kind::Integer: return pk::integer(v.as_integer());
    case json::Value::Kind::Real: return pk::real(v.as_real());
    case json::Value::Kind::String: return pk::str(v.as_string());
    case json::Value::Kind::Array: {
      std::vector<NodePtr> items;
      for (const json::Value& x : v.as_array()) items.push_back(from_json(x));
      return pk::list(std::move(items));
    }
    case json::Value::Kind::Object: {
      NodePtr d = pk::dict();
      for (const auto& [k, x] : v.as_object()) d->set(k, from_json(x));
      return d;
    }
  }
  return pk::none();
}

// A plain yaml scalar as PyYAML's safe_load types it (YAML 1.1): null, bool, int, float, or str.
NodePtr yaml_scalar(const std::string& s) {
  static const std::regex kNull("~|null|Null|NULL|");
  static const std::regex kTrue("yes|Yes|YES|true|True|TRUE|on|On|ON");
  static const std::regex kFalse("no|No|NO|false|False|FALSE|off|Off|OFF");
  static const std::regex kInt("[-+]?(0|[1-9][0-9_]*)");
  static const std::regex kFloat("[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?");
  auto plain = [&] {
    std::string t = s;
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    return t;
  };
  if (std::regex_match(s, kNull)) return pk::none();
  if (std::regex_match(s, kTrue)) return pk::boolean(true);
  if (std::regex_match(s, kFalse)) return pk::boolean(false);
  if (std::regex_match(s, kInt)) {
    try {
      return pk::integer(std::stoll(plain()));
    } catch (const std::exception&) {
      return pk::str(s);  // beyond 64 bits: no model yaml holds such a number
    }
  }
  if (std::regex_match(s, kFloat) && s != "." && s != "-." && s != "+.") return pk::real(std::stod(plain()));
  return pk::str(s);
}

NodePtr from_yaml(const YAML::Node& n) {
  if (n.IsNull()) return pk::none();
  if (n.IsScalar()) return n.Tag() == "!" ? pk::str(n.Scalar()) : yaml_scalar(n.Scalar());
  if (n.IsSequence()) {
    std::vector<NodePtr> items;
    for (const YAML::Node& x : n) items.push_back(from_yaml(x));
    return pk::list(std::move(items));
  }
  NodePtr d = pk::dict();
  for (const auto& kv : n) d->entries.emplace_back(from_yaml(kv.first), from_yaml(kv.second));
  return d;
}

class CheckpointBuilder {
 public:
  CheckpointBuilder() { new_tree(); }

  // Each module tree (a checkpoint's model, its EMA: deep copies in the reference) has its own
  // shared SiLU, made in the tree's mode.
  void new_tree() {
    act_ = module("torch.nn.modules.activation.SiLU", pk::ordered_dict(), pk::ordered_dict(), pk::ordered_dict(),
                  {{"inplace", pk::boolean(true)}});
  }

  std::vector<std::pair<std::string, std::string>>& storages() { return storages_; }

  // What the modules written next say: nn.Module.training, and each Parameter's requires_grad
  // (a training checkpoint's model: true, true; its EMA, as ModelEMA keeps it: false, false).
  void set_mode(bool training, bool requires_grad) {
    training_ = training;
    requires_grad_ = requires_grad;
    new_tree();
  }

  // A tensor record (torch._utils._rebuild_tensor_v2) with its storage: floating tensors as
  // `float_dtype`, conv weights from OHWI to OIHW.
  NodePtr tensor(const Tensor& source, bool ohwi, DType float_dtype) {
    autograd::NoGradGuard no_grad;
    Tensor t = ohwi ? source.permute({0, 3, 1, 2}) : source;
    if (is_floating(t.dtype()) && t.dtype() != float_dtype) t = t.to(float_dtype);
    t = t.to(Device::cpu()).contiguous();
    const std::string key = std::to_string(storages_.size());
    const int64_t numel = t.numel();
    storages_.emplace_back(key, std::string(static_cast<const char*>(t.data_ptr()),
                                            static_cast<size_t>(numel) * t.element_size()));
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end()), stride(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) stride[d - 1] = stride[d] * std::max<int64_t>(shape[d], 1);
    NodePtr storage = pk::persistent_id(pk::tuple(
        {pk::str("storage"), pk::global(storage_global(t.dtype())), pk::str(key), pk::str("cpu"), pk::integer(numel)}));
    return pk::call(pk::global("torch._utils._rebuild_tensor_v2"),
                    pk::tuple({storage, pk::integer(0), int_tuple(shape), int_tuple(stride), pk::boolean(false),
                               pk::ordered_dict()}));
  }
  // A torch.nn.Parameter, float16 (without a gradient, as strip_optimizer leaves them, unless
  // set_mode says otherwise).
  NodePtr parameter(const Tensor& source, bool ohwi = false) {
    return pk::call(pk::global("torch._utils._rebuild_parameter"),
                    pk::tuple({tensor(source, ohwi, DType::F16), pk::boolean(requires_grad_), pk::ordered_dict()}));
  }
  NodePtr empty_half() { return tensor(Tensor::empty({0}, DType::F16), false, DType::F16); }

  // An nn.Module instance: the attributes torch 1.13's Module.__init__ sets, then `attributes`.
  NodePtr module(const std::string& cls, NodePtr parameters, NodePtr buffers, NodePtr children,
                 const Attributes& attributes) {
    NodePtr s = pk::dict();
    s->set("training", pk::boolean(training_))
        .set("_parameters", std::move(parameters))
        .set("_buffers", std::move(buffers))
        .set("_non_persistent_buffers_set", pk::call(pk::global("__builtin__.set"), pk::tuple({pk::list()})))
        .set("_backward_hooks", pk::ordered_dict())
        .set("_is_full_backward_hook", pk::none())
        .set("_forward_hooks", pk::ordered_dict())
        .set("_forward_pre_hooks", pk::ordered_dict())
        .set("_state_dict_hooks", pk::ordered_dict())
        .set("_load_state_dict_pre_hooks", pk::ordered_dict())
        .set("_load_state_dict_post_hooks", pk::ordered_dict())
        .set("_modules", std::move(children));
    for (const auto& [k, v] : attributes) s->set(k, v);
    return pk::new_object(pk::global(cls), pk::tuple(), s);
  }
  NodePtr container(const std::string& cls, const std::vector<NodePtr>& items) {
    NodePtr children = pk::ordered_dict();
    for (size_t i = 0; i < items.size(); ++i) children->set(std::to_string(i), items[i]);
    return module(cls, pk::ordered_dict(), pk::ordered_dict(), children, {});
  }

  NodePtr conv2d(const layers::Conv2d& c) {
    NodePtr params = pk::ordered_dict();
    params->set("weight", parameter(c.weight, true));
    params->set("bias", c.bias.defined() ? parameter(c.bias) : pk::none());
    const int64_t p = c.padding;
    return module(c.type_name(), params, pk::ordered_dict(), pk::ordered_dict(),
                  {{"in_channels", pk::integer(c.in_channels)},
                   {"out_channels", pk::integer(c.out_channels)},
                   {"kernel_size", pair(c.kernel)},
                   {"stride", pair(c.stride)},
                   {"padding", pair(p)},
                   {"dilation", pair(1)},
                   {"transposed", pk::boolean(false)},
                   {"output_padding", pair(0)},
                   {"groups", pk::integer(1)},
                   {"padding_mode", pk::str("zeros")},
                   {"_reversed_padding_repeated_twice", int_tuple({p, p, p, p})}});
  }
  NodePtr batch_norm(const layers::BatchNorm2d& bn) {
    NodePtr params = pk::ordered_dict(), buffers = pk::ordered_dict();
    params->set("weight", parameter(bn.weight)).set("bias", parameter(bn.bias));
    buffers->set("running_mean", tensor(bn.running_mean, false, DType::F16))
        .set("running_var", tensor(bn.running_var, false, DType::F16))
        .set("num_batches_tracked", tensor(bn.num_batches_tracked, false, DType::F16));
    return module(bn.type_name(), params, buffers, pk::ordered_dict(),
                  {{"num_features", pk::integer(bn.weight.numel())},
                   {"eps", pk::real(bn.eps)},
                   {"momentum", pk::real(bn.momentum)},
                   {"affine", pk::boolean(true)},
                   {"track_running_stats", pk::boolean(true)}});
  }

  // Any module of the reference's detection and segmentation models; `layer` are the attributes parse_model sets
  // on a yaml row's module (i, f, type, np), empty below that.
  NodePtr node(const layers::Module& m, const Attributes& layer = {}) {
    using namespace layers;
    auto with = [&](Attributes own) {
      own.insert(own.end(), layer.begin(), layer.end());
      return own;
    };
    auto children = [&](const std::vector<std::pair<std::string, NodePtr>>& items) {
      NodePtr c = pk::ordered_dict();
      for (const auto& [k, v] : items) c->set(k, v);
      return c;
    };
    if (auto* c = dynamic_cast<const Conv*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(),
                    children({{"conv", conv2d(*c->conv)}, {"bn", batch_norm(*c->bn)}, {"act", act_}}), with({}));
    if (auto* b = dynamic_cast<const Bottleneck*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(),
                    children({{"cv1", node(*b->cv1)}, {"cv2", node(*b->cv2)}}), with({{"add", pk::boolean(b->add)}}));
    if (auto* c3 = dynamic_cast<const C3*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(),
                    children({{"cv1", node(*c3->cv1)}, {"cv2", node(*c3->cv2)}, {"cv3", node(*c3->cv3)},
                              {"m", node(*c3->m)}}),
                    with({}));
    if (auto* s = dynamic_cast<const SPPF*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(),
                    children({{"cv1", node(*s->cv1)}, {"cv2", node(*s->cv2)}, {"m", node(*s->m)}}), with({}));
    if (auto* seq = dynamic_cast<const Sequential*>(&m)) {
      std::vector<NodePtr> items;
      for (const auto& item : seq->items()) items.push_back(node(*item));
      return container(m.type_name(), items);
    }
    if (auto* p = dynamic_cast<const MaxPool2d*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(), pk::ordered_dict(),
                    with({{"kernel_size", pk::integer(p->kernel)},
                          {"stride", pk::integer(p->stride)},
                          {"padding", pk::integer(p->padding)},
                          {"dilation", pk::integer(1)},
                          {"return_indices", pk::boolean(false)},
                          {"ceil_mode", pk::boolean(false)}}));
    if (dynamic_cast<const Upsample*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(), pk::ordered_dict(),
                    with({{"name", pk::str("Upsample")},
                          {"size", pk::none()},
                          {"scale_factor", pk::real(2.0)},
                          {"mode", pk::str("nearest")},
                          {"align_corners", pk::none()},
                          {"recompute_scale_factor", pk::none()}}));
    if (dynamic_cast<const Concat*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(), pk::ordered_dict(),
                    with({{"d", pk::integer(1)}}));
    if (auto* c = dynamic_cast<const Classify*>(&m)) {
      // The head's Conv takes Conv.default_act, another SiLU than the backbone's (which the
      // reference unpickled from the detector's file).
      const NodePtr head_act = module("torch.nn.modules.activation.SiLU", pk::ordered_dict(), pk::ordered_dict(),
                                      pk::ordered_dict(), {{"inplace", pk::boolean(true)}});
      const NodePtr conv = module(c->conv->type_name(), pk::ordered_dict(), pk::ordered_dict(),
                                  children({{"conv", conv2d(*c->conv->conv)}, {"bn", batch_norm(*c->conv->bn)},
                                            {"act", head_act}}),
                                  {});
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(),
                    children({{"conv", conv}, {"pool", node(*c->pool)}, {"drop", node(*c->drop)},
                              {"linear", node(*c->linear)}}),
                    with({}));
    }
    if (dynamic_cast<const AdaptiveAvgPool2d*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(), pk::ordered_dict(),
                    {{"output_size", pk::integer(1)}});
    if (auto* d = dynamic_cast<const Dropout*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(), pk::ordered_dict(),
                    {{"p", pk::real(d->p)}, {"inplace", pk::boolean(true)}});
    if (auto* l = dynamic_cast<const Linear*>(&m)) {
      NodePtr params = pk::ordered_dict();
      params->set("weight", parameter(l->weight)).set("bias", parameter(l->bias));
      return module(m.type_name(), params, pk::ordered_dict(), pk::ordered_dict(),
                    {{"in_features", pk::integer(l->in_features)}, {"out_features", pk::integer(l->out_features)}});
    }
    if (auto* p = dynamic_cast<const Proto*>(&m))
      return module(m.type_name(), pk::ordered_dict(), pk::ordered_dict(),
                    children({{"cv1", node(*p->cv1)}, {"upsample", node(*p->upsample)}, {"cv2", node(*p->cv2)},
                              {"cv3", node(*p->cv3)}}),
                    with({}));
    if (auto* s = dynamic_cast<const Segment*>(&m); s && s->type_name() == "models.yolo.Segment") return detect(*s, layer);
    if (auto* d = dynamic_cast<const Detect*>(&m); d && d->type_name() == "models.yolo.Detect") return detect(*d, layer);
    KESTREL_FAIL("write_reference_pt: the model holds a ", m.type_name(), ", which Kestrel does not write to ",
                 "a YOLOv5 .pt yet (models of Conv, C3, Bottleneck, SPPF, Upsample, Concat, Detect, Segment, Proto "
                 "and Classify)");
  }

  // Detect, or Segment: Detect's attributes, then (in the order Segment.__init__ sets them) nm,
  // npr, the proto module and `detect`, the function Detect.forward, which pickle writes by
  // reference as getattr(models.yolo.Detect, 'forward').
  NodePtr detect(const layers::Detect& d, const Attributes& layer) {
    const auto* segment = dynamic_cast<const layers::Segment*>(&d);
    std::vector<NodePtr> convs;
    for (const auto& c : d.convs) convs.push_back(conv2d(*c));
    NodePtr buffers = pk::ordered_dict();
    buffers->set("anchors", tensor(d.anchors, false, DType::F16));
    std::vector<NodePtr> grid, anchor_grid;
    for (int64_t i = 0; i < d.nl; ++i) {
      grid.push_back(empty_half());
      anchor_grid.push_back(empty_half());
    }
    NodePtr children = pk::ordered_dict();
    children->set("m", container("torch.nn.modules.container.ModuleList", convs));
    Attributes attributes = {{"nc", pk::integer(d.nc)},   {"no", pk::integer(d.no)},
                             {"nl", pk::integer(d.nl)},   {"na", pk::integer(d.na)},
                             {"grid", pk::list(grid)},    {"anchor_grid", pk::list(anchor_grid)},
                             {"inplace", pk::boolean(true)}};
    if (segment) {
      children->set("proto", node(*segment->proto));
      attributes.emplace_back("nm", pk::integer(segment->nm));
      attributes.emplace_back("npr", pk::integer(segment->npr));
      attributes.emplace_back("detect", pk::call(pk::global("__builtin__.getattr"),
                                                 pk::tuple({pk::global("models.yolo.Detect"), pk::str("forward")})));
    }
    attributes.insert(attributes.end(), layer.begin(), layer.end());
    attributes.emplace_back("stride", tensor(Tensor::from_vector(d.strides, {d.nl}), false, DType::F16));
    return module(d.type_name(), pk::ordered_dict(), buffers, children, attributes);
  }

 private:
  bool training_ = true, requires_grad_ = false;
  NodePtr act_;  // the one SiLU every Conv shares (the reference's Conv.default_act)
  std::vector<std::pair<std::string, std::string>> storages_;
};

// The yaml the model was built from, as text.
std::string model_yaml_text(const ModelView& model, const PtWriteOptions& o) {
  if (!o.model_yaml.empty()) return o.model_yaml;
  const ModelConfig& c = model.config;
  if (!c.name.empty() && std::filesystem::is_regular_file(c.path)) return read_file_bytes(c.path);
  return model_config_yaml(c);
}

NodePtr yaml_dict(const ModelView& model, const PtWriteOptions& o) {
  const YAML::Node root = load_yaml(model_yaml_text(model, o), "the model yaml");
  NodePtr yaml = from_yaml(root);
  KESTREL_CHECK(yaml->kind == pk::Node::Kind::Dict, "write_reference_pt: the model yaml is no mapping");
  // As the reference's DetectionModel: nc the model's, ch added when absent.
  bool has_nc = false, has_ch = false;
  for (auto& [k, v] : yaml->entries) {
    if (k->kind != pk::Node::Kind::String) continue;
    if (k->text == "nc") {
      v = pk::integer(model.head.nc);
      has_nc = true;
    }
    has_ch = has_ch || k->text == "ch";
  }
  if (!has_nc) yaml->set("nc", pk::integer(model.head.nc));
  if (!has_ch) yaml->set("ch", pk::integer(model.config.input_channels));
  return yaml;
}

// The model's Sequential of yaml rows, each module with the attributes parse_model sets (i, f,
// type, np; a Classify head, which the reference's _from_detection_model puts in place of a row,
// has no np), and the rows' saved outputs (`save`, sorted, as parse_model lists them).
NodePtr row_sequence(const ModelConfig& config, const std::vector<ModelLayer>& layers, CheckpointBuilder& b,
                     std::vector<int64_t>& save) {
  KESTREL_CHECK(layers.size() == config.rows.size(), "write_reference_pt: the model has ", layers.size(),
                " layers for ", config.rows.size(), " yaml rows");
  std::vector<NodePtr> built;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerRow& row = config.rows[i];
    std::vector<NodePtr> from;
    for (int f : row.from) {
      from.push_back(pk::integer(f));
      const int64_t n = static_cast<int64_t>(i);
      if (f != -1) save.push_back(((f % n) + n) % n);  // Python's x % i
    }
    KESTREL_CHECK(!from.empty(), "write_reference_pt: layer ", i, " has no input");
    const layers::Module& m = *layers[i].module;
    Attributes layer = {{"i", pk::integer(static_cast<int64_t>(i))},
                        {"f", row.from_is_list ? pk::list(from) : from[0]},
                        {"type", pk::str(m.type_name())}};
    if (!dynamic_cast<const layers::Classify*>(&m)) layer.emplace_back("np", pk::integer(m.parameter_count()));
    built.push_back(b.node(m, layer));
  }
  std::sort(save.begin(), save.end());
  return b.container("torch.nn.modules.container.Sequential", built);
}

NodePtr model_node(const layers::Module& source, const PtWriteOptions& o, CheckpointBuilder& b) {
  const ModelView model = view_of(source);
  const ModelConfig& config = model.config;
  std::vector<int64_t> save;
  NodePtr children = pk::ordered_dict();
  children->set("model", row_sequence(config, model.layers, b, save));

  Attributes attributes;
  if (!config.name.empty())
    attributes.emplace_back("yaml_file", pk::str(std::filesystem::path(config.path).filename().string()));
  attributes.emplace_back("yaml", yaml_dict(model, o));
  std::vector<NodePtr> saved;
  for (int64_t s : save) saved.push_back(pk::integer(s));
  attributes.emplace_back("save", pk::list(saved));
  const int64_t nc = model.head.nc;
  KESTREL_CHECK(o.names.empty() || static_cast<int64_t>(o.names.size()) == nc, "write_reference_pt: ",
                o.names.size(), " class names for a model of ", nc, " classes");
  NodePtr names = pk::dict();
  for (int64_t i = 0; i < nc; ++i)
    names->entries.emplace_back(pk::integer(i), pk::str(o.names.empty() ? "class" + std::to_string(i) : o.names[i]));
  attributes.emplace_back("names", names);
  attributes.emplace_back("inplace", pk::boolean(true));
  attributes.emplace_back("stride", b.tensor(Tensor::from_vector(model.strides, {static_cast<int64_t>(model.strides.size())}),
                                             false, DType::F32));
  attributes.emplace_back("nc", pk::integer(nc));
  if (!o.hyp.empty()) attributes.emplace_back("hyp", from_json(json::Value(o.hyp)));
  if (!o.class_weights.empty()) {
    KESTREL_CHECK(static_cast<int64_t>(o.class_weights.size()) == nc, "write_reference_pt: ",
                  o.class_weights.size(), " class weights for a model of ", nc, " classes");
    attributes.emplace_back("class_weights", b.tensor(Tensor::from_vector(o.class_weights, {nc}), false, DType::F32));
  }
  return b.module(model.type, pk::ordered_dict(), pk::ordered_dict(), children, attributes);
}

// classify/train.py's model: ClassificationModel(model=DetectionModel, nc, cutoff) as
// _from_detection_model leaves it (the backbone's rows with their i, f, type, np; the Classify head
// with the replaced row's i, f and its type, no np), then the names train.py attaches.
NodePtr classifier_node(const ClassificationModel& model, const PtWriteOptions& o, CheckpointBuilder& b) {
  std::vector<int64_t> unused;  // the reference's classifier sets save = [] whatever its rows read
  NodePtr children = pk::ordered_dict();
  children->set("model", row_sequence(model.config(), model.layers(), b, unused));
  const int64_t nc = model.nc();
  KESTREL_CHECK(o.names.empty() || static_cast<int64_t>(o.names.size()) == nc, "write_reference_pt: ",
                o.names.size(), " class names for a classifier of ", nc, " classes");
  std::vector<NodePtr> names;
  for (int64_t i = 0; i < nc; ++i) names.push_back(pk::str(o.names.empty() ? "class" + std::to_string(i) : o.names[i]));
  const Attributes attributes = {
      {"stride", b.tensor(Tensor::from_vector(std::vector<float>{8, 16, 32}, {3}), false, DType::F32)},
      {"save", pk::list()},
      {"nc", pk::integer(nc)},
      {"names", pk::list(names)}};
  return b.module(model.type_name(), pk::ordered_dict(), pk::ordered_dict(), children, attributes);
}

}  // namespace

namespace {

// An optimizer's state_dict as torch 1.13 saves one for smart_optimizer's three groups: 'state'
// keyed by each parameter's index (numbered through the groups in order), 'param_groups' with
// each optimizer's defaults in torch's key order (the first group from the constructor, the
// other two from add_param_group, whose weight_decay comes first) and the scheduler's initial_lr.
NodePtr optimizer_node(const PtOptimizerState& o, CheckpointBuilder& b) {
  const bool adam = o.kind == "Adam" || o.kind == "AdamW";
  KESTREL_CHECK(adam || o.kind == "SGD", "write_reference_pt: no torch optimizer state for ", o.kind);
  NodePtr state = pk::dict();
  std::vector<NodePtr> groups;
  int64_t index = 0;
  for (size_t g = 0; g < o.groups.size(); ++g) {
    const PtOptimizerGroup& group = o.groups[g];
    std::vector<NodePtr> ids;
    for (const auto& slots : group.state) {
      NodePtr s = pk::dict();
      for (const auto& [slot, t] : slots) {
        if (slot == "step") {  // torch >= 1.12: a float32 scalar tensor
          s->set(slot, b.tensor(t.to(Device::cpu()).to(DType::F32), false, DType::F32));
        } else {
          s->set(slot, b.tensor(t, false, DType::F32));
        }
      }
      if (!s->entries.empty()) state->entries.emplace_back(pk::integer(index), s);
      ids.push_back(pk::integer(index++));
    }
    NodePtr d = pk::dict();
    const bool first = g == 0;
    // torch's optimizers keep weight_decay as given: 0 (an int) for the constructor's group.
    const NodePtr decay = first ? pk::integer(0) : pk::real(group.weight_decay);
    if (!first) d->set("weight_decay", decay);
    d->set("lr", pk::real(group.lr));
    if (adam) {
      d->set("betas", pk::tuple({pk::real(group.momentum), pk::real(0.999)})).set("eps", pk::real(1e-8));
      if (first) d->set("weight_decay", decay);
      d->set("amsgrad", pk::boolean(false))
          .set("maximize", pk::boolean(false))
          .set("foreach", pk::none())
          .set("capturable", pk::boolean(false))
          .set("differentiable", pk::boolean(false))
          .set("fused", pk::boolean(false));
    } else {
      d->set("momentum", pk::real(group.momentum)).set("dampening", pk::integer(0));
      if (first) d->set("weight_decay", decay);
      d->set("nesterov", pk::boolean(true))
          .set("maximize", pk::boolean(false))
          .set("foreach", pk::none())
          .set("differentiable", pk::boolean(false));
    }
    d->set("initial_lr", pk::real(group.initial_lr)).set("params", pk::list(std::move(ids)));
    groups.push_back(d);
  }
  NodePtr out = pk::dict();
  out->set("state", state).set("param_groups", pk::list(std::move(groups)));
  return out;
}

}  // namespace

void write_reference_pt(const layers::Module& model, const std::string& path, const PtWriteOptions& o,
                        const PtTrainingState* training) {
  CheckpointBuilder b;
  NodePtr root = pk::dict();
  if (const auto* classifier = dynamic_cast<const ClassificationModel*>(&model)) {
    KESTREL_CHECK(!training, "write_reference_pt: classify/train.py's checkpoints hold no optimizer or "
                  "second model; write a classifier without a training state");
    b.set_mode(false, false);  // the EMA, as ModelEMA keeps it
    root->set("epoch", pk::integer(o.epoch.value_or(-1)))
        .set("best_fitness", o.best_fitness ? pk::real(*o.best_fitness) : pk::none())
        .set("model", classifier_node(*classifier, o, b))
        .set("ema", pk::none())
        .set("updates", o.updates ? pk::integer(*o.updates) : pk::none())
        .set("optimizer", pk::none());
  } else if (training) {
    KESTREL_CHECK(training->ema, "write_reference_pt: a training checkpoint needs its EMA");
    b.set_mode(true, true);
    NodePtr model_record = model_node(model, o, b);
    b.set_mode(false, false);
    NodePtr ema_record = model_node(*training->ema, o, b);
    root->set("epoch", pk::integer(training->epoch))
        .set("best_fitness", pk::real(o.best_fitness.value_or(0.0)))
        .set("model", model_record)
        .set("ema", ema_record)
        .set("updates", pk::integer(training->updates))
        .set("optimizer", optimizer_node(training->optimizer, b));
  } else {
    NodePtr model_record = model_node(model, o, b);
    root->set("epoch", pk::integer(-1))
        .set("best_fitness", o.best_fitness ? pk::real(*o.best_fitness) : pk::none())
        .set("model", model_record)
        .set("ema", pk::none())
        .set("updates", pk::none())
        .set("optimizer", pk::none());
  }
  root->set("opt", from_json(json::Value(o.opt))).set("git", pk::none()).set("date", pk::str(o.date));
  const std::string data_pkl = pk::dump(root);
  TorchZipWriter writer(path, o.archive_name);
  writer.write_pickle(data_pkl);
  for (const auto& [key, bytes] : b.storages()) writer.add_storage(key, bytes);
  writer.commit();
}

}  // namespace kestrel::yolo
