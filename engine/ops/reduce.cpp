#include "engine/ops/reduce.h"

#include <algorithm>
#include <optional>

#include "engine/ops/common.h"
#include "engine/ops/elementwise.h"
#include "kernels/reduce.h"

namespace kestrel::ops {
namespace {

// Which dims are reduced; an empty list means all of them.
std::vector<bool> reduced_mask(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  const int64_t rank = x.dim();
  std::vector<bool> mask(rank, dims.empty());
  for (int64_t d : dims) {
    KESTREL_CHECK(d >= -rank && d < rank, op, ": dimension ", d, " out of range for ", x.describe(),
                  "; use -", rank, "..", rank - 1);
    const int64_t w = d < 0 ? d + rank : d;
    KESTREL_CHECK(!mask[w], op, ": dimension ", d, " listed twice for ", x.describe());
    mask[w] = true;
  }
  return mask;
}

// The kernels' view of the input: memory from data.data_ptr() read as [outer, reduce, inner].
struct KernelInput {
  Tensor data;
  kernels::ReduceShape shape;
};

// Visiting x's dims in `order`, adjacent dims that are all reduced or all kept merge into one
// extent. With a single reduced block the result is [outer kept, block, inner kept]; with several
// there is no such view.
std::optional<kernels::ReduceShape> single_block(const Tensor& x, const std::vector<int64_t>& order,
                                                 const std::vector<bool>& mask) {
  kernels::ReduceShape s;
  int blocks = 0;
  bool in_block = false;
  for (int64_t d : order) {
    const int64_t n = x.shape()[d];
    if (mask[d]) {
      if (!in_block) ++blocks;
      in_block = true;
      s.reduce *= n;
    } else {
      in_block = false;
      (blocks > 0 ? s.inner : s.outer) *= n;
    }
  }
  if (blocks > 1) return std::nullopt;
  return s;
}

// The dims of `order` that are kept, in that order.
std::vector<int64_t> kept_dims(const std::vector<int64_t>& order, const std::vector<bool>& mask) {
  std::vector<int64_t> kept;
  for (int64_t d : order)
    if (!mask[d]) kept.push_back(d);
  return kept;
}

// Reads the input in place whenever its memory, visited in stride order, is dense, holds one
// reduced block, and keeps the kept dims in their logical order (so the output comes out in
// logical order): NHWC per-channel sums (reduced dims outermost), and the same sums on an NCHW
// view of NHWC data, avoid a transposing copy. Otherwise one copy: contiguous when the logical
// order has one reduced block, else with the reduced dims permuted innermost.
KernelInput kernel_input(const Tensor& x_, const std::vector<bool>& mask) {
  Tensor x = x_.detach();  // the op records its own node; layout changes here are not part of it
  std::vector<int64_t> logical;  // size-1 dims fit anywhere and are left out
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[d] != 1) logical.push_back(d);
  std::vector<int64_t> memory = logical;
  std::stable_sort(memory.begin(), memory.end(),
                   [&](int64_t a, int64_t b) { return x.strides()[a] > x.strides()[b]; });
  int64_t expected_stride = 1;
  bool dense = true;
  for (auto d = memory.rbegin(); d != memory.rend(); ++d) {
    dense = dense && x.strides()[*d] == expected_stride;
    expected_stride *= x.shape()[*d];
  }
  if (dense && kept_dims(memory, mask) == kept_dims(logical, mask)) {
    if (auto s = single_block(x, memory, mask)) return {x, *s};
  }
  if (auto s = single_block(x, logical, mask)) return {x.contiguous(), *s};
  std::vector<int64_t> order;
  kernels::ReduceShape s;
  for (bool reduced : {false, true}) {
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (mask[d] != reduced) continue;
      order.push_back(d);
      (reduced ? s.reduce : s.outer) *= x.shape()[d];
    }
  }
  return {x.permute(order).contiguous(), s};
}

// The gradient of out = scale * sum(x over the masked dims): scale * g broadcast back over them.
struct SumBackward : autograd::Node {
  Shape input_shape;
  Shape kept_shape;  // the output's shape with the reduced dims kept as 1
  std::vector<bool> mask;
  double scale = 1.0;
  bool average = false;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor scaled = scale == 1.0 ? g[0] : mul(g[0], scale);
    Tensor kept = scaled.reshape(kept_shape);
    Shape strides = contiguous_strides(kept_shape);
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) strides[d] = 0;
    return {make_view(kept, input_shape, strides, kept.storage_offset()).contiguous()};
  }
  std::string name() const override { return average ? "MeanBackward" : "SumBackward"; }
};

Tensor reduce(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
              bool average) {
  check_kernel_dtype(op, x);
  const std::vector<bool> mask = reduced_mask(op, x, dims);
  Shape kept_shape, out_shape;
  int64_t count = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t n = x.shape()[d];
    kept_shape.push_back(mask[d] ? 1 : n);
    if (mask[d]) count *= n;
    if (!mask[d] || keepdim) out_shape.push_back(mask[d] ? 1 : n);
  }
  // A mean over no elements is 0 * inf = NaN, as in the reference framework.
  const double scale = average ? 1.0 / static_cast<double>(count) : 1.0;

  KernelInput in = kernel_input(x, mask);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  launch(
      x.device(), [&] { kernels::sum_cpu(x.dtype(), in.data.data_ptr(), out.data_ptr(), in.shape, scale); },
      [&](cudaStream_t s) {
        const size_t bytes = kernels::sum_cuda_workspace_bytes(in.shape);
        Tensor workspace;
        if (bytes > 0)
          workspace = Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8, x.device());
        kernels::sum_cuda(x.dtype(), in.data.data_ptr(), out.data_ptr(), in.shape, scale,
                          bytes > 0 ? workspace.data_ptr() : nullptr, s);
      });
  if (auto node = autograd::make_node<SumBackward>({&x})) {
    node->input_shape = x.shape();
    node->kept_shape = kept_shape;
    node->mask = mask;
    node->scale = scale;
    node->average = average;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce("sum", x, dims, keepdim, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce("mean", x, dims, keepdim, true);
}

Tensor sum_all(const Tensor& x) { return sum(x, {}); }
Tensor mean_all(const Tensor& x) { return mean(x, {}); }

Tensor sum_to(const Tensor& g, const Shape& shape) {
  KESTREL_CHECK(g.defined(), "sum_to: undefined input");
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  KESTREL_CHECK(lead >= 0, "sum_to: cannot sum ", g.describe(), " down to ", shape_str(shape),
                ", which has more dims");
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t have = g.shape()[lead + i];
    if (shape[i] == have) continue;
    KESTREL_CHECK(shape[i] == 1, "sum_to: ", g.describe(), " is not a broadcast of ",
                  shape_str(shape), ": target dim ", i, " is ", shape[i], " where only ", have,
                  " or 1 can broadcast");
    dims.push_back(lead + static_cast<int64_t>(i));
  }
  if (dims.empty()) return g;
  return sum(g, dims).reshape(shape);
}

}  // namespace kestrel::ops
