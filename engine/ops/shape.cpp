// Differentiable views and copies: reshape, permute, slice, contiguous, clone, device and dtype
// moves. Views share storage; their backward maps the gradient back onto the input's geometry.
#include <numeric>

#include "engine/profiler.h"
#include "engine/autograd.h"
#include "engine/tensor.h"

namespace kestrel {
namespace {

struct ReshapeBackward : autograd::Node {
  Shape input_shape;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override { return {g[0].reshape(input_shape)}; }
  std::string name() const override { return "ReshapeBackward"; }
};

struct PermuteBackward : autograd::Node {
  std::vector<int64_t> inverse;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override { return {g[0].permute(inverse)}; }
  std::string name() const override { return "PermuteBackward"; }
};

struct SliceBackward : autograd::Node {
  Shape input_shape;
  int64_t dim, start, end, step;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor gi = Tensor::zeros(input_shape, g[0].dtype(), g[0].device());
    gi.slice(dim, start, end, step).copy_(g[0]);
    return {gi};
  }
  std::string name() const override { return "SliceBackward"; }
};

struct IdentityBackward : autograd::Node {
  std::vector<Tensor> apply(std::vector<Tensor>& g) override { return {g[0]}; }
  std::string name() const override { return "CloneBackward"; }
};

struct ToDeviceBackward : autograd::Node {
  Device source;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override { return {g[0].to(source)}; }
  std::string name() const override { return "ToDeviceBackward"; }
};

struct ToDTypeBackward : autograd::Node {
  DType source;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override { return {g[0].to(source)}; }
  std::string name() const override { return "ToDTypeBackward"; }
};

int64_t wrap_dim(int64_t d, int64_t rank, const Tensor& t) {
  KESTREL_CHECK(d >= -rank && d < rank, "dimension ", d, " out of range for ", t.describe());
  return d < 0 ? d + rank : d;
}

}  // namespace

Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      KESTREL_CHECK(infer < 0, "reshape: only one dimension may be -1, got ", shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      KESTREL_CHECK(shape[i] >= 0, "reshape: invalid size ", shape[i], " in ", shape_str(requested),
                    "; sizes are >= 0 with at most one -1");
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    KESTREL_CHECK(known > 0 && numel() % known == 0, "reshape: cannot infer -1 in ",
                  shape_str(requested), " for ", describe());
    shape[infer] = numel() / known;
  }
  KESTREL_CHECK(shape_numel(shape) == numel(), "reshape: ", describe(), " has ", numel(),
                " elements, shape ", shape_str(requested), " needs ", shape_numel(shape));
  Tensor base = contiguous();
  Tensor out = make_view(base, shape, contiguous_strides(shape), base.storage_offset());
  if (auto node = autograd::make_node<ReshapeBackward>({this})) {
    node->input_shape = this->shape();
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  const int64_t rank = dim();
  KESTREL_CHECK(static_cast<int64_t>(dims.size()) == rank, "permute: ", dims.size(),
                " dims for ", describe());
  Shape shape(rank), strides_out(rank);
  std::vector<int64_t> inverse(rank, -1);
  for (int64_t i = 0; i < rank; ++i) {
    int64_t d = wrap_dim(dims[i], rank, *this);
    KESTREL_CHECK(inverse[d] < 0, "permute: dimension ", d, " repeated");
    inverse[d] = i;
    shape[i] = this->shape()[d];
    strides_out[i] = strides()[d];
  }
  Tensor out = make_view(*this, shape, strides_out, storage_offset());
  if (auto node = autograd::make_node<PermuteBackward>({this})) {
    node->inverse = inverse;
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(a, dim(), *this)], dims[wrap_dim(b, dim(), *this)]);
  return permute(dims);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), *this);
  KESTREL_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[d];
  auto clamp_index = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  start = clamp_index(start);
  end = std::max(clamp_index(end), start);
  Shape shape = this->shape();
  Shape st = strides();
  shape[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  Tensor out = make_view(*this, shape, st, storage_offset() + start * strides()[d]);
  if (auto node = autograd::make_node<SliceBackward>({this})) {
    node->input_shape = this->shape();
    node->dim = d;
    node->start = start;
    node->end = end;
    node->step = step;
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  const profiler::Scope timed("Copy", profiler::Phase::Forward);
  Tensor out = Tensor::empty(shape(), dtype(), device());
  out.copy_(*this);
  if (auto node = autograd::make_node<IdentityBackward>({this})) autograd::set_history(out, node);
  return out;
}

Tensor Tensor::to(Device target, bool non_blocking) const {
  if (target == device()) return *this;
  Tensor out = Tensor::empty(shape(), dtype(), target, non_blocking && target.is_cpu());
  out.copy_(*this, non_blocking);
  if (auto node = autograd::make_node<ToDeviceBackward>({this})) {
    node->source = device();
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), target, device());
  out.copy_(*this);
  if (autograd::grad_enabled() && requires_grad() && is_floating(target)) {
    auto node = autograd::make_node<ToDTypeBackward>({this});
    node->source = dtype();
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kestrel
