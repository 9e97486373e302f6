#include "engine/autograd.h"

#include <atomic>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "engine/ops/elementwise.h"
#include "engine/profiler.h"

namespace kestrel::autograd {
namespace {

thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence_nr{0};  // a counter only: orders nodes, holds no state

// AccumulateGrad runs as soon as it is ready: its hooks start DDP communication.
constexpr uint64_t kAccumulatePriority = UINT64_MAX;

}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr++) {}

Tensor SavedTensor::unpack() const {
  KESTREL_CHECK(!released_,
                "a tensor saved for backward was already freed: this graph was backpropagated "
                "through once; pass retain_graph=true to the first backward to go through it again");
  return tensor_;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  sequence_nr = kAccumulatePriority;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>& grads) {
  Tensor leaf(leaf_);
  Tensor& g = grads[0];
  KESTREL_CHECK(g.shape() == leaf.shape(), "gradient ", g.describe(), " does not match leaf ",
                leaf.describe());
  AutogradMeta& meta = *leaf_->autograd;
  if (!meta.grad.defined()) {
    // Own the gradient's memory: an op may hand the same gradient tensor to several inputs.
    Tensor own = Tensor::empty(leaf.shape(), leaf.dtype(), leaf.device());
    own.copy_(g);
    meta.grad = own;
  } else {
    ops::add_(meta.grad, g);
  }
  for (auto& hook : meta.ready_hooks) hook(meta.grad);
  return {};
}

bool grad_enabled() { return t_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.requires_grad()) return {};
  AutogradMeta& meta = *t.impl()->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    // The accumulator holds the leaf; the leaf holds the accumulator weakly (no cycle).
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(const Tensor& output, const std::shared_ptr<Node>& node, int output_nr) {
  TensorImpl* impl = output.impl();
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  impl->autograd->requires_grad = true;
  impl->autograd->grad_fn = node;
  impl->autograd->output_nr = output_nr;
}

namespace {

using RootEdges = std::vector<std::pair<Edge, Tensor>>;

// The roots' gradients (ones for a one-element root given none), each on the edge into the root's
// node: a synthetic set of edges backward starts from.
RootEdges root_edges(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  RootEdges starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    KESTREL_CHECK(r.requires_grad(), "backward on a tensor that does not require grad ",
                  "(no input of the computation required grad, or it ran under NoGradGuard)");
    Tensor g = grads[i];
    if (!g.defined()) {
      KESTREL_CHECK(r.numel() == 1, "backward without a gradient needs a one-element root, got ",
                    r.describe());
      g = Tensor::ones(r.shape(), r.dtype(), r.device());
    }
    KESTREL_CHECK(g.shape() == r.shape(), "backward: gradient ", g.describe(), " for root ",
                  r.describe());
    starts.push_back({gradient_edge(r), g});
  }
  return starts;
}

// For each node reachable from the roots, how many edges lead into it: a node runs once all of
// them have delivered.
std::unordered_map<Node*, int> count_dependencies(const RootEdges& starts) {
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  auto reach = [&](Node* n) {
    dependencies[n] += 1;
    if (seen.insert(n).second) stack.push_back(n);
  };
  for (const auto& [edge, g] : starts) reach(edge.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges)
      if (e.fn) reach(e.fn.get());
  }
  return dependencies;
}

// Gradient buffers per node input, summed as gradients arrive.
class GradientBuffers {
 public:
  void add(const Edge& e, const Tensor& g) {
    auto& buf = buffers_[e.fn.get()];
    if (buf.empty()) buf.resize(e.fn->num_outputs);
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? ops::add(slot, g) : g;  // out of place: slot may alias a gradient handed elsewhere
  }
  // A node's gradients, one per output (undefined where none arrived), handed over once.
  std::vector<Tensor> take(Node* node) {
    std::vector<Tensor> inputs = std::move(buffers_[node]);
    buffers_.erase(node);
    inputs.resize(node->num_outputs);
    return inputs;
  }

 private:
  std::unordered_map<Node*, std::vector<Tensor>> buffers_;
};

// One node's backward: its gradients w.r.t. its inputs, one per next edge. A node no gradient
// reached is not run (its leaves' hooks do not fire in this backward) and hands on nothing.
std::vector<Tensor> run_node(Node& node, std::vector<Tensor>& inputs, bool retain_graph) {
  bool any_gradient = false;
  for (const Tensor& g : inputs) any_gradient = any_gradient || g.defined();
  std::vector<Tensor> outputs;
  if (any_gradient) {
    std::optional<profiler::Scope> timed;  // named as the forward op: Conv2dBackward -> Conv2d
    if (profiler::enabled()) {
      std::string op = node.name();
      if (op.ends_with("Backward")) op.resize(op.size() - 8);
      timed.emplace(op, profiler::Phase::Backward);
    }
    outputs = node.apply(inputs);
  } else {
    outputs.resize(node.next_edges.size());
  }
  if (!retain_graph) node.release_saved();
  KESTREL_CHECK(outputs.size() == node.next_edges.size(), node.name(), " returned ", outputs.size(),
                " gradients for ", node.next_edges.size(), " inputs");
  return outputs;
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  KESTREL_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ",
                grads.size(), " gradients");
  NoGradGuard no_grad;  // gradients of gradients are not recorded
  const RootEdges starts = root_edges(roots, grads);
  std::unordered_map<Node*, int> dependencies = count_dependencies(starts);
  GradientBuffers buffers;
  // Ready nodes run latest-recorded first (the reverse of the forward), as PyTorch's engine.
  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)> ready(
      later_first);
  for (const auto& [edge, g] : starts) {
    buffers.add(edge, g);
    if (--dependencies[edge.fn.get()] == 0) ready.push(edge.fn);
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> inputs = buffers.take(node.get());
    const std::vector<Tensor> outputs = run_node(*node, inputs, retain_graph);
    // Successors of a node that did not run still get their dependency counts decremented.
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.fn) continue;
      if (outputs[i].defined()) buffers.add(e, outputs[i]);
      if (--dependencies[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
}

}  // namespace kestrel::autograd
