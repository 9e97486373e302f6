// Module: a node of the model tree owning named parameters, buffers and child modules, as the
// reference's nn.Module does, so state-dict names come out the same ("model.2.m.0.cv1.conv.weight").
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::layers {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// One entry of a module's state (the reference's state_dict order: a module's parameters, then its
// buffers, then its children's). Conv weights are OHWI in memory and OIHW in files.
struct StateEntry {
  std::string name;
  Tensor* slot;
  bool is_parameter;
  bool ohwi_conv_weight;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The reference's class path, shown in the model table ("models.common.Conv").
  virtual std::string type_name() const = 0;

  // Parameters / buffers of this module and its descendants, names prefixed with `prefix.`.
  NamedTensors named_parameters(const std::string& prefix = "") const;
  NamedTensors named_buffers(const std::string& prefix = "") const;
  std::vector<Tensor> parameters() const;
  int64_t parameter_count() const;

  std::vector<StateEntry> state_entries(const std::string& prefix = "");

  // Modules in this subtree, this one included (the reference's len(list(m.modules())), where a
  // module reachable twice counts once: Conv's shared SiLU is counted by the model, not here).
  int64_t module_count() const;

  // Calls fn on this module and every descendant, parents first.
  void visit(const std::function<void(Module&)>& fn);

  void train(bool on = true);
  bool is_training() const { return training_; }
  // Moves every parameter and buffer to `device` (keeping requires_grad).
  void to(Device device);

 protected:
  void register_parameter(const std::string& name, Tensor* slot, bool ohwi_conv_weight = false);
  void register_buffer(const std::string& name, Tensor* slot);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    children_.emplace_back(name, child);
    return child;
  }

 private:
  void collect(const std::string& prefix, bool parameters, NamedTensors& out) const;

  struct Slot {
    std::string name;
    Tensor* tensor;
    bool ohwi_conv_weight = false;
  };
  std::vector<Slot> parameters_;
  std::vector<Slot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A module with one input and one output (everything but Concat and Detect).
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
};

// The reference's nn.Sequential: children named "0", "1", ... applied in order.
class Sequential : public UnaryModule {
 public:
  void append(std::shared_ptr<UnaryModule> m);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "torch.nn.modules.container.Sequential"; }
  size_t size() const { return items_.size(); }
  const std::vector<std::shared_ptr<UnaryModule>>& items() const { return items_; }

 private:
  std::vector<std::shared_ptr<UnaryModule>> items_;
};

}  // namespace kestrel::layers
