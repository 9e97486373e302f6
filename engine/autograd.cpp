#include "engine/autograd.h"

#include <atomic>
#include <optional>
#include <queue>
#include <unordered_map>

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

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  KESTREL_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ",
                grads.size(), " gradients");
  NoGradGuard no_grad;  // gradients of gradients are not recorded

  // Root gradients go into a synthetic set of edges.
  std::vector<std::pair<Edge, Tensor>> starts;
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

  // Count, for each node reachable from the roots, how many edges lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (auto& [edge, g] : starts) {
    dependencies[edge.fn.get()] += 1;
    if (!seen[edge.fn.get()]) {
      seen[edge.fn.get()] = true;
      stack.push_back(edge.fn.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      dependencies[e.fn.get()] += 1;
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
  }

  // Gradient buffers per node input, summed as gradients arrive.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto accumulate = [&](const Edge& e, const Tensor& g) {
    auto& buf = buffers[e.fn.get()];
    if (buf.empty()) buf.resize(e.fn->num_outputs);
    Tensor& slot = buf[e.input_nr];
    if (!slot.defined()) {
      slot = g;
    } else {
      slot = ops::add(slot, g);  // out of place: slot may alias a gradient handed elsewhere
    }
  };

  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>,
                      decltype(later_first)>
      ready(later_first);
  for (auto& [edge, g] : starts) {
    accumulate(edge, g);
    if (--dependencies[edge.fn.get()] == 0) ready.push(edge.fn);
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> inputs = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    inputs.resize(node->num_outputs);
    bool any_gradient = false;
    for (const Tensor& g : inputs) any_gradient = any_gradient || g.defined();
    // A node no gradient reached is not run (its leaves' hooks do not fire in this backward);
    // its successors still get their dependency counts decremented.
    std::vector<Tensor> outputs;
    if (any_gradient) {
      std::optional<profiler::Scope> timed;  // named as the forward op: Conv2dBackward -> Conv2d
      if (profiler::enabled()) {
        std::string op = node->name();
        if (op.ends_with("Backward")) op.resize(op.size() - 8);
        timed.emplace(op, profiler::Phase::Backward);
      }
      outputs = node->apply(inputs);
    } else {
      outputs.resize(node->next_edges.size());
    }
    if (!retain_graph) node->release_saved();
    KESTREL_CHECK(outputs.size() == node->next_edges.size(), node->name(), " returned ",
                  outputs.size(), " gradients for ", node->next_edges.size(), " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.fn) continue;
      if (outputs[i].defined()) accumulate(e, outputs[i]);
      if (--dependencies[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
}

}  // namespace kestrel::autograd
