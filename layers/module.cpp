#include "layers/module.h"

namespace kestrel::layers {

void Module::register_parameter(const std::string& name, Tensor* slot, bool ohwi_conv_weight) {
  parameters_.push_back({name, slot, ohwi_conv_weight});
}

void Module::register_buffer(const std::string& name, Tensor* slot) {
  buffers_.push_back({name, slot, false});
}

void Module::collect(const std::string& prefix, bool parameters, NamedTensors& out) const {
  const std::string dot = prefix.empty() ? "" : prefix + ".";
  for (const Slot& s : parameters ? parameters_ : buffers_)
    if (s.tensor->defined()) out.emplace_back(dot + s.name, *s.tensor);
  for (const auto& [name, child] : children_) child->collect(dot + name, parameters, out);
}

NamedTensors Module::named_parameters(const std::string& prefix) const {
  NamedTensors out;
  collect(prefix, true, out);
  return out;
}

NamedTensors Module::named_buffers(const std::string& prefix) const {
  NamedTensors out;
  collect(prefix, false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

std::vector<StateEntry> Module::state_entries(const std::string& prefix) {
  const std::string dot = prefix.empty() ? "" : prefix + ".";
  std::vector<StateEntry> out;
  for (Slot& s : parameters_)
    if (s.tensor->defined()) out.push_back({dot + s.name, s.tensor, true, s.ohwi_conv_weight});
  for (Slot& s : buffers_)
    if (s.tensor->defined()) out.push_back({dot + s.name, s.tensor, false, false});
  for (auto& [name, child] : children_) {
    std::vector<StateEntry> sub = child->state_entries(dot + name);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

int64_t Module::module_count() const {
  int64_t n = 1;
  for (const auto& [name, child] : children_) n += child->module_count();
  return n;
}

void Module::visit(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [name, child] : children_) child->visit(fn);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  for (auto* list : {&parameters_, &buffers_}) {
    for (Slot& s : *list) {
      Tensor& t = *s.tensor;
      if (!t.defined() || t.device() == device) continue;
      const bool grad = t.requires_grad();
      t = t.detach().to(device);
      if (grad) t.set_requires_grad(true);
    }
  }
  for (auto& [name, child] : children_) child->to(device);
}

void Sequential::append(std::shared_ptr<UnaryModule> m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : items_) y = m->forward(y);
  return y;
}

}  // namespace kestrel::layers
