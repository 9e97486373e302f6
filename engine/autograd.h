// Reverse-mode automatic differentiation on a dynamic tape.
//
// Every differentiable op that sees an input requiring grad creates a Node holding what its
// backward needs (SavedTensor) and edges to the nodes that produced its inputs. backward() walks
// the graph from the root in dependency order (a node runs once all gradients flowing into it
// have been summed), and AccumulateGrad nodes add the result into leaf tensors' .grad. Leaves may
// carry grad-ready hooks, fired exactly once per backward when the leaf's gradient is final: the
// DDP Reducer starts bucket all-reduces from them.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;  // null: the input needs no gradient
  int input_nr = 0;          // which of fn's gradient inputs this edge feeds
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  // grads[i] is the gradient of the node's i-th forward output (undefined if none flowed there).
  // Returns one gradient per next_edges entry (undefined where no gradient is needed).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors once backward has used them (unless the graph is retained).
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  int num_outputs = 1;  // number of forward outputs = gradients this node receives
  uint64_t sequence_nr;  // creation order: later nodes run first when both are ready
};

// A tensor kept for backward. Unpacking after release_saved() is an error that says why.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : tensor_(t.detach()), saved_(t.defined()) {}
  Tensor unpack() const;
  void release() { tensor_ = Tensor(); released_ = true; }

 private:
  Tensor tensor_;
  bool saved_ = false;
  bool released_ = false;
};

// Adds incoming gradients into a leaf's .grad, then fires the leaf's grad-ready hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_nr = 0;              // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::function<void(const Tensor&)>> ready_hooks;
};

// --- grad mode ---------------------------------------------------------------------------------
bool grad_enabled();
// Disables graph recording for the scope (validation, EMA, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// --- used by ops -------------------------------------------------------------------------------
// True when recording is on and any input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);
// The edge through which a gradient for `t` flows (null edge if t needs none).
Edge gradient_edge(const Tensor& t);

// Creates node N wired to `inputs`' gradient edges, or returns null when no gradient is needed:
//   if (auto node = make_node<MulBackward>({&a, &b})) { node->a = SavedTensor(a); ...
//     set_history(out, node); }
template <class N, class... Args>
std::shared_ptr<N> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  if (!needs_grad(inputs)) return nullptr;
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  for (const Tensor* t : inputs) node->next_edges.push_back(gradient_edge(*t));
  return node;
}
template <class N, class... Args>
std::shared_ptr<N> make_node(const std::vector<Tensor>& inputs, Args&&... args) {
  if (!needs_grad(inputs)) return nullptr;
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  return node;
}

// Marks `output` as the output_nr-th result of `node`.
void set_history(const Tensor& output, const std::shared_ptr<Node>& node, int output_nr = 0);

// Backpropagates from roots with the given gradients (a scalar root may pass an undefined one).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

}  // namespace kestrel::autograd
