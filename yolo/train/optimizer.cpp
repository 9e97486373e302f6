#include "yolo/train/optimizer.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "engine/autograd.h"
#include "engine/cuda_graph.h"
#include "engine/ops/launch.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "layers/conv.h"

namespace kestrel::yolo {
namespace {

// The device and dtype of a non-empty list's first tensor.
struct ListPlace {
  Device device;
  DType dtype;
};
ListPlace place_of(const std::vector<Tensor>& first_column) {
  return {first_column.front().device(), first_column.front().dtype()};
}

Tensor file_view(const Tensor& t, bool ohwi) { return ohwi ? t.permute({0, 3, 1, 2}) : t; }

}  // namespace

OptimizerKind parse_optimizer_kind(const std::string& name) {
  if (name == "SGD") return OptimizerKind::SGD;
  if (name == "Adam") return OptimizerKind::Adam;
  if (name == "AdamW") return OptimizerKind::AdamW;
  if (name == "RMSProp") return OptimizerKind::RMSProp;
  KESTREL_FAIL("optimizer '", name, "' is not known; choose SGD, Adam, AdamW or RMSProp");
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD: return "SGD";
    case OptimizerKind::Adam: return "Adam";
    case OptimizerKind::AdamW: return "AdamW";
    case OptimizerKind::RMSProp: return "RMSProp";
  }
  return "?";
}

std::vector<ParamGroup> make_param_groups(layers::Module& model, double lr, double momentum,
                                          double weight_decay) {
  std::set<const TensorImpl*> bn_weights;
  model.visit([&](layers::Module& m) {
    if (auto* bn = dynamic_cast<layers::BatchNorm2d*>(&m)) bn_weights.insert(bn->weight.impl());
  });
  std::vector<ParamGroup> groups(3);
  groups[0].label = "bias";
  groups[1].label = "weight(decay)";
  groups[2].label = "weight(no decay)";
  groups[1].weight_decay = weight_decay;
  for (ParamGroup& g : groups) {
    g.lr = g.initial_lr = lr;
    g.momentum = momentum;
  }
  for (const layers::StateEntry& e : model.state_entries()) {
    if (!e.is_parameter) continue;
    const size_t dot = e.name.rfind('.');
    const std::string leaf = dot == std::string::npos ? e.name : e.name.substr(dot + 1);
    const int g = leaf == "bias" ? 0 : bn_weights.count(e.slot->impl()) ? 2 : 1;
    groups[g].params.push_back({e.name, *e.slot, e.ohwi_conv_weight});
  }
  return groups;
}

int64_t nominal_accumulate(int64_t batch_size) {
  KESTREL_CHECK(batch_size >= 1, "batch size must be at least 1, got ", batch_size);
  return std::max<int64_t>(static_cast<int64_t>(std::nearbyint(64.0 / batch_size)), 1);
}

double scaled_weight_decay(double weight_decay, int64_t batch_size) {
  const int64_t accumulate = nominal_accumulate(batch_size);
  return weight_decay * (static_cast<double>(batch_size * accumulate) / 64.0);
}

Optimizer::Optimizer(OptimizerKind kind, std::vector<ParamGroup> groups)
    : kind_(kind), groups_(std::move(groups)) {
  std::set<const TensorImpl*> seen;
  bool first = true;
  for (const ParamGroup& g : groups_) {
    for (const Parameter& p : g.params) {
      KESTREL_CHECK(seen.insert(p.tensor.impl()).second, "Optimizer: parameter ", p.name,
                    " is in more than one group");
      KESTREL_CHECK(p.tensor.dtype() == DType::F32 || p.tensor.dtype() == DType::F64,
                    "Optimizer: parameter ", p.name, " is ", dtype_name(p.tensor.dtype()),
                    "; master weights are float32 (float64 in CPU tests)");
      if (first) device_ = p.tensor.device();
      first = false;
      KESTREL_CHECK(p.tensor.device() == device_, "Optimizer: parameter ", p.name, " is on ",
                    p.tensor.device().str(), " but the first parameter on ", device_.str(),
                    "; move the whole model to one device before building its optimizer");
    }
  }
  for (const ParamGroup& g : groups_) {
    std::vector<Slots>& slots = state_.emplace_back();
    for (const Parameter& p : g.params) {
      Slots s;
      s.a = Tensor::zeros_like(p.tensor);
      if (kind_ != OptimizerKind::SGD) s.b = Tensor::zeros_like(p.tensor);
      slots.push_back(s);
    }
    if (kind_ != OptimizerKind::SGD)
      counts_.push_back(
          Tensor::zeros({static_cast<int64_t>(g.params.size())}, DType::I64, device_));
  }
  hyper_ = Tensor::zeros({static_cast<int64_t>(groups_.size()), 2}, DType::F64, device_);
  upload_hyper();
}

Optimizer::Rates Optimizer::rates(size_t group) const {
  KESTREL_CHECK(group < groups_.size(), "optimizer: no parameter group ", group, " (it has ", groups_.size(), ")");
  const ParamGroup& g = groups_[group];
  return Rates{g.lr, g.initial_lr, g.momentum, g.weight_decay};
}

void Optimizer::set_rates(size_t group, const Rates& r) {
  KESTREL_CHECK(group < groups_.size(), "optimizer: no parameter group ", group, " (it has ", groups_.size(), ")");
  ParamGroup& g = groups_[group];
  g.lr = r.lr;
  g.initial_lr = r.initial_lr;
  g.momentum = r.momentum;
  g.weight_decay = r.weight_decay;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups_)
    for (const Parameter& p : g.params) out.push_back(p.tensor);
  return out;
}

// A pinned upload buffer whose last copy has finished (Event::query, no wait), else a new one.
// In-flight buffers stay alive here: a pinned Storage released with its copy pending would wait
// for it (engine/storage.h), and one released after it finished would still report a host sync.
Tensor Optimizer::free_staging() {
  for (const Tensor& t : staging_) {
    std::optional<Event>& last = t.storage()->last_async_use;
    if (!last || last->query()) {
      last.reset();
      return t;
    }
  }
  staging_.push_back(Tensor::empty(hyper_.shape(), DType::F64, Device::cpu(), /*pinned=*/true));
  return staging_.back();
}

void Optimizer::upload_hyper() {
  if (groups_.empty()) return;
  const Tensor host = device_.is_cuda() ? free_staging() : hyper_;
  double* h = host.data<double>();  // [groups, 2] as kernels::GroupHyper
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    h[2 * gi] = groups_[gi].lr;
    h[2 * gi + 1] = groups_[gi].momentum;
  }
  if (device_.is_cuda()) hyper_.copy_(host, /*non_blocking=*/true);
}

void Optimizer::step(const Tensor& skip) {
  // Inside a CUDA graph capture the upload (a host-to-device copy) cannot be part of the graph:
  // whoever replays it uploads before each replay (TrainStep does).
  if (!device_.is_cuda() || !is_capturing(current_stream(device_))) upload_hyper();
  issue_step(skip);
}

void Optimizer::issue_step(const Tensor& skip) {
  const profiler::Scope timed("OptimizerStep", profiler::Phase::Update);
  autograd::NoGradGuard no_grad;
  const float* skip_flag = nullptr;
  if (skip.defined()) {
    KESTREL_CHECK(skip.numel() == 1 && skip.dtype() == DType::F32 && skip.is_contiguous() &&
                      skip.device() == device_,
                  "Optimizer::step: the skip flag must be a one-element float32 tensor on the "
                  "parameters' device (",
                  device_.str(), "), got ", skip.describe());
    skip_flag = skip.data<float>();
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    switch (kind_) {
      case OptimizerKind::SGD: issue_sgd(gi, skip_flag); break;
      case OptimizerKind::Adam:
      case OptimizerKind::AdamW: issue_adam(gi, skip_flag); break;
      case OptimizerKind::RMSProp: issue_rmsprop(gi, skip_flag); break;
    }
  }
}

Optimizer::Stepping Optimizer::stepping(size_t gi, int state_columns) const {
  const ParamGroup& g = groups_[gi];
  Stepping out;
  out.cols.resize(2 + state_columns);
  for (size_t k = 0; k < g.params.size(); ++k) {
    std::vector<Tensor> grad = gradients_of({g.params[k].tensor});
    if (grad.empty()) continue;
    out.cols[0].push_back(g.params[k].tensor);
    out.cols[1].push_back(grad[0]);
    out.cols[2].push_back(state_[gi][k].a);
    if (state_columns > 1) out.cols[3].push_back(state_[gi][k].b);
    out.index.push_back(k);
  }
  return out;
}

void Optimizer::issue_sgd(size_t gi, const float* skip) {
  const ParamGroup& g = groups_[gi];
  const std::vector<std::vector<Tensor>> cols = stepping(gi, 1).cols;
  if (cols[0].empty()) return;
  const kernels::TensorList list = make_tensor_list(cols, "SGD step");
  const auto* hyper = reinterpret_cast<const kernels::GroupHyper*>(hyper_.data<double>()) + gi;
  const kernels::SgdConfig cfg{g.weight_decay, /*nesterov=*/true};
  const ListPlace at = place_of(cols[0]);
  ops::launch(
      at.device, [&] { kernels::sgd_step_cpu(at.dtype, list, hyper, cfg, skip); },
      [&](cudaStream_t s) { kernels::sgd_step_cuda(at.dtype, list, hyper, cfg, s, skip); });
}

Optimizer::Counted Optimizer::counted_list(size_t gi, const char* what) const {
  const Stepping st = stepping(gi, 2);
  Counted out{make_tensor_list(st.cols, what), Device::cpu(), DType::F32};
  if (st.index.empty()) return out;
  int64_t* group_counts = counts_[gi].data<int64_t>();
  for (size_t j = 0; j < st.index.size(); ++j) out.list.counts[j] = group_counts + st.index[j];
  const ListPlace at = place_of(st.cols[0]);
  out.device = at.device;
  out.dtype = at.dtype;
  return out;
}

void Optimizer::issue_adam(size_t gi, const float* skip) {
  const Counted c = counted_list(gi, "Adam step");
  if (c.list.size() == 0) return;
  const auto* hyper = reinterpret_cast<const kernels::GroupHyper*>(hyper_.data<double>()) + gi;
  const kernels::AdamConfig cfg{0.999, 1e-8, groups_[gi].weight_decay,
                                kind_ == OptimizerKind::AdamW};
  ops::launch(
      c.device, [&] { kernels::adam_step_cpu(c.dtype, c.list, hyper, cfg, skip); },
      [&](cudaStream_t s) { kernels::adam_step_cuda(c.dtype, c.list, hyper, cfg, s, skip); });
}

// torch.optim.RMSprop's defaults besides lr and momentum: alpha 0.99, eps 1e-8, not centered.
void Optimizer::issue_rmsprop(size_t gi, const float* skip) {
  const Counted c = counted_list(gi, "RMSProp step");
  if (c.list.size() == 0) return;
  const auto* hyper = reinterpret_cast<const kernels::GroupHyper*>(hyper_.data<double>()) + gi;
  const kernels::RmspropConfig cfg{0.99, 1e-8, groups_[gi].weight_decay};
  ops::launch(
      c.device, [&] { kernels::rmsprop_step_cpu(c.dtype, c.list, hyper, cfg, skip); },
      [&](cudaStream_t s) { kernels::rmsprop_step_cuda(c.dtype, c.list, hyper, cfg, s, skip); });
}

void Optimizer::zero_grad(bool set_to_none) {
  if (set_to_none) {
    for (const ParamGroup& g : groups_)
      for (const Parameter& p : g.params) p.tensor.set_grad(Tensor());
    return;
  }
  // One list per dtype (all of device_); gradients_of makes a strided gradient contiguous.
  std::map<DType, std::vector<Tensor>> by_dtype;
  for (const Tensor& grad : gradients_of(parameters())) by_dtype[grad.dtype()].push_back(grad);
  for (const auto& [dtype, grads] : by_dtype) {
    const kernels::TensorList list = make_tensor_list({grads}, "zero_grad");
    const ListPlace at = place_of(grads);
    ops::launch(
        at.device, [&] { kernels::zero_cpu(at.dtype, list); },
        [&](cudaStream_t s) { kernels::zero_cuda(at.dtype, list, s); });
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t k = 0; k < groups_[gi].params.size(); ++k) {
      const Parameter& p = groups_[gi].params[k];
      const Slots& s = state_[gi][k];
      if (kind_ == OptimizerKind::SGD) {
        out.emplace_back(p.name + ".momentum_buffer", file_view(s.a, p.ohwi_conv_weight));
      } else {
        const bool rmsprop = kind_ == OptimizerKind::RMSProp;
        out.emplace_back(p.name + (rmsprop ? ".square_avg" : ".exp_avg"),
                         file_view(s.a, p.ohwi_conv_weight));
        out.emplace_back(p.name + (rmsprop ? ".momentum_buffer" : ".exp_avg_sq"),
                         file_view(s.b, p.ohwi_conv_weight));
        const Tensor& counts = counts_[gi];
        out.emplace_back(p.name + ".step",
                         make_view(counts, {}, {}, counts.storage_offset() + static_cast<int64_t>(k)));
      }
    }
  return out;
}

std::vector<const void*> Optimizer::state_addresses() const {
  const auto address = [](const Tensor& t) -> const void* { return t.defined() ? t.data_ptr() : nullptr; };
  std::vector<const void*> out;
  for (const auto& group : state_)
    for (const Slots& s : group) {
      out.push_back(address(s.a));
      out.push_back(address(s.b));
    }
  for (const Tensor& c : counts_) out.push_back(address(c));
  out.push_back(address(hyper_));
  return out;
}

std::string Optimizer::describe() const {
  std::ostringstream os;
  os << optimizer_kind_name(kind_) << "(lr=" << (groups_.empty() ? 0.0 : groups_[0].lr)
     << ") with parameter groups";
  if (groups_.size() == 3)  // the reference's log line: BN weights, decayed weights, biases
    os << " " << groups_[2].params.size() << " weight(decay=0.0), " << groups_[1].params.size()
       << " weight(decay=" << groups_[1].weight_decay << "), " << groups_[0].params.size()
       << " bias";
  else
    for (const ParamGroup& g : groups_) os << " " << g.params.size() << " " << g.label;
  return os.str();
}

Optimizer smart_optimizer(layers::Module& model, OptimizerKind kind, double lr, double momentum,
                          double weight_decay) {
  return Optimizer(kind, make_param_groups(model, lr, momentum, weight_decay));
}

kernels::TensorList make_tensor_list(const std::vector<std::vector<Tensor>>& columns,
                                     const char* what) {
  KESTREL_CHECK(!columns.empty() && columns.size() <= size_t(kernels::kMaxListDepth), what,
                ": 1 to ", kernels::kMaxListDepth, " buffers per tensor, got ", columns.size());
  kernels::TensorList list(static_cast<int>(columns.size()));
  const size_t n = columns[0].size();
  if (n == 0) return list;
  const Tensor& ref = columns[0][0];
  for (const auto& col : columns)
    KESTREL_CHECK(col.size() == n, what, ": buffer lists of different lengths (", col.size(),
                  " and ", n, ")");
  for (size_t k = 0; k < n; ++k) {
    for (const auto& col : columns) {
      const Tensor& t = col[k];
      KESTREL_CHECK(t.defined() && t.is_contiguous(), what, ": tensor ", k,
                    " is undefined or not contiguous; make it contiguous first");
      KESTREL_CHECK(t.device() == ref.device() && t.dtype() == ref.dtype(), what, ": tensor ", k,
                    " is ", t.describe(), " but the first is ", ref.describe(),
                    "; keep the whole model and its state on one device, in one dtype");
      KESTREL_CHECK(t.numel() == columns[0][k].numel(), what, ": tensor ", k, " has ", t.numel(),
                    " elements in one buffer and ", columns[0][k].numel(), " in another");
    }
  }
  for (size_t k = 0; k < n; ++k) {
    switch (columns.size()) {
      case 1: list.add({columns[0][k].data_ptr()}, columns[0][k].numel()); break;
      case 2:
        list.add({columns[0][k].data_ptr(), columns[1][k].data_ptr()}, columns[0][k].numel());
        break;
      case 3:
        list.add({columns[0][k].data_ptr(), columns[1][k].data_ptr(), columns[2][k].data_ptr()},
                 columns[0][k].numel());
        break;
      default:
        list.add({columns[0][k].data_ptr(), columns[1][k].data_ptr(), columns[2][k].data_ptr(),
                  columns[3][k].data_ptr()},
                 columns[0][k].numel());
    }
  }
  return list;
}

std::vector<Tensor> gradients_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    KESTREL_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype(), "gradient of ", p.describe(),
                  " is ", g.describe(), "; gradients must match their float32 master weights");
    if (!g.is_contiguous()) {
      g = g.contiguous();
      p.set_grad(g);
    }
    out.push_back(g);
  }
  return out;
}

Tensor grad_norm(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads = gradients_of(params);
  if (grads.empty()) return Tensor::zeros({});
  const ListPlace at = place_of(grads);
  const kernels::TensorList list = make_tensor_list({grads}, "gradient norm");
  return ops::launch(
      at.device,
      [&] {
        const double norm = kernels::global_norm_cpu(at.dtype, list);
        return Tensor::scalar(at.dtype == DType::F64 ? norm : static_cast<float>(norm), at.dtype);
      },
      [&](cudaStream_t s) {
        Tensor workspace = Tensor::empty({kernels::norm_partial_count(list)}, DType::F64, at.device);
        Tensor norm = Tensor::empty({}, DType::F32, at.device);
        kernels::global_norm_cuda(at.dtype, list, workspace.data<double>(), norm.data<float>(), s);
        return norm;
      });
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const profiler::Scope timed("ClipGradNorm", profiler::Phase::Update);
  KESTREL_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be positive, got ", max_norm);
  Tensor norm = grad_norm(params);
  std::vector<Tensor> grads = gradients_of(params);
  if (grads.empty()) return norm;
  const ListPlace at = place_of(grads);
  const kernels::TensorList list = make_tensor_list({grads}, "gradient clipping");
  ops::launch(
      at.device,
      [&] {
        // A CPU scalar, read by this CPU path directly (no device to wait for).
        const double coef = at.dtype == DType::F64
                                ? kernels::clip_coef<double>(*norm.data<double>(), max_norm)
                                : kernels::clip_coef<float>(*norm.data<float>(),
                                                            static_cast<float>(max_norm));
        kernels::scale_cpu(at.dtype, list, coef);
      },
      [&](cudaStream_t s) {
        kernels::clip_scale_cuda(at.dtype, list, norm.data<float>(), max_norm, s);
      });
  return norm;
}

Tensor scale_grads(const std::vector<Tensor>& params, double factor) {
  std::vector<Tensor> grads = gradients_of(params);
  if (grads.empty()) return Tensor::zeros({});
  const ListPlace at = place_of(grads);
  const kernels::TensorList list = make_tensor_list({grads}, "gradient scaling");
  return ops::launch(
      at.device,
      [&] { return Tensor::scalar(kernels::scale_cpu(at.dtype, list, factor) ? 1.0 : 0.0); },
      [&](cudaStream_t s) {
        Tensor flag = Tensor::zeros({}, DType::F32, at.device);
        kernels::scale_cuda(at.dtype, list, factor, flag.data<float>(), s);
        return flag;
      });
}

}  // namespace kestrel::yolo
