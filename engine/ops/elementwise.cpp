#include "engine/ops/elementwise.h"

#include "engine/profiler.h"
#include "engine/ops/common.h"
#include "kernels/elementwise.h"

namespace kestrel::ops {
namespace {

using kernels::Binary;
using kernels::Unary;

// out = a op b elementwise; all three contiguous, alike in shape, dtype and device.
void binary_into(Binary op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  launch(
      a.device(),
      [&] {
        kernels::binary_cpu(op, a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(),
                            alpha);
      },
      [&](cudaStream_t s) {
        kernels::binary_cuda(op, a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(),
                             alpha, s);
      });
}

Tensor binary_raw(Binary op, const Tensor& a_, const Tensor& b_, double alpha = 1.0) {
  const profiler::Scope timed("Elementwise", profiler::Phase::Forward);
  check_compatible("elementwise op", a_, b_);
  Tensor a = a_.contiguous(), b = b_.contiguous();
  Tensor out = Tensor::empty_like(a);
  binary_into(op, a, b, out, alpha);
  return out;
}

Tensor scale_raw(const Tensor& a_, double scale) {
  Tensor a = a_.contiguous();
  Tensor out = Tensor::empty_like(a);
  launch(
      a.device(),
      [&] { kernels::affine_scalar_cpu(a.dtype(), a.data_ptr(), out.data_ptr(), a.numel(), scale, 0.0); },
      [&](cudaStream_t s) {
        kernels::affine_scalar_cuda(a.dtype(), a.data_ptr(), out.data_ptr(), a.numel(), scale, 0.0,
                                    s);
      });
  return out;
}

struct AddBackward : autograd::Node {
  double b_sign = 1.0;  // +1 for add, -1 for sub
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    return {g[0], b_sign == 1.0 ? g[0] : scale_raw(g[0], -1.0)};
  }
  std::string name() const override { return "AddBackward"; }
};

struct MulBackward : autograd::Node {
  autograd::SavedTensor a, b;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor ga = next_edges[0].fn ? binary_raw(Binary::Mul, g[0], b.unpack()) : Tensor();
    Tensor gb = next_edges[1].fn ? binary_raw(Binary::Mul, g[0], a.unpack()) : Tensor();
    return {ga, gb};
  }
  void release_saved() override {
    a.release();
    b.release();
  }
  std::string name() const override { return "MulBackward"; }
};

struct ScaleBackward : autograd::Node {
  double scale = 1.0;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override { return {scale_raw(g[0], scale)}; }
  std::string name() const override { return "ScaleBackward"; }
};

struct UnaryBackward : autograd::Node {
  Unary op;
  autograd::SavedTensor saved;  // x for SiLU, y for sigmoid
  explicit UnaryBackward(Unary op) : op(op) {}
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor s = saved.unpack();
    Tensor dy = g[0].contiguous();
    Tensor dx = Tensor::empty_like(s);
    launch(
        s.device(),
        [&] {
          kernels::unary_backward_cpu(op, s.dtype(), s.data_ptr(), dy.data_ptr(), dx.data_ptr(),
                                      s.numel());
        },
        [&](cudaStream_t stream) {
          kernels::unary_backward_cuda(op, s.dtype(), s.data_ptr(), dy.data_ptr(), dx.data_ptr(),
                                       s.numel(), stream);
        });
    return {dx};
  }
  void release_saved() override { saved.release(); }
  std::string name() const override { return op == Unary::Silu ? "SiluBackward" : "SigmoidBackward"; }
};

Tensor unary(Unary op, const Tensor& x_) {
  const profiler::Scope timed(op == Unary::Silu ? "Silu" : "Sigmoid", profiler::Phase::Forward);
  Tensor x = x_.contiguous();
  Tensor y = Tensor::empty_like(x);
  launch(
      x.device(), [&] { kernels::unary_forward_cpu(op, x.dtype(), x.data_ptr(), y.data_ptr(), x.numel()); },
      [&](cudaStream_t s) {
        kernels::unary_forward_cuda(op, x.dtype(), x.data_ptr(), y.data_ptr(), x.numel(), s);
      });
  if (auto node = autograd::make_node<UnaryBackward>({&x_}, op)) {
    node->saved = autograd::SavedTensor(op == Unary::Silu ? x : y);
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Binary::Add, a, b);
  if (auto node = autograd::make_node<AddBackward>({&a, &b})) autograd::set_history(out, node);
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Binary::Sub, a, b);
  if (auto node = autograd::make_node<AddBackward>({&a, &b})) {
    node->b_sign = -1.0;
    autograd::set_history(out, node);
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Binary::Mul, a, b);
  if (auto node = autograd::make_node<MulBackward>({&a, &b})) {
    if (b.requires_grad()) node->a = autograd::SavedTensor(a);
    if (a.requires_grad()) node->b = autograd::SavedTensor(b);
    autograd::set_history(out, node);
  }
  return out;
}

Tensor mul(const Tensor& a, double scale) {
  Tensor out = scale_raw(a, scale);
  if (auto node = autograd::make_node<ScaleBackward>({&a})) {
    node->scale = scale;
    autograd::set_history(out, node);
  }
  return out;
}

Tensor silu(const Tensor& x) { return unary(Unary::Silu, x); }
Tensor sigmoid(const Tensor& x) { return unary(Unary::Sigmoid, x); }

void add_(const Tensor& dst, const Tensor& src_) {
  check_compatible("add_", dst, src_);
  KESTREL_CHECK(dst.is_contiguous(), "add_: destination must be contiguous, got ", dst.describe());
  Tensor src = src_.contiguous();
  binary_into(Binary::Add, dst, src, dst, 1.0);
}

}  // namespace kestrel::ops
