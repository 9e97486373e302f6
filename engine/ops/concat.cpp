#include "engine/ops/concat.h"

#include "engine/profiler.h"
#include "engine/ops/common.h"
#include "kernels/concat.h"

namespace kestrel::ops {
namespace {

// Copies a row block between buffers on `like`'s device, on its current stream.
void copy_block(const Tensor& like, const void* src, void* dst, const kernels::RowBlock& block) {
  launch(
      like.device(), [&] { kernels::copy_rows_cpu(like.element_size(), src, dst, block); },
      [&](cudaStream_t s) { kernels::copy_rows_cuda(like.element_size(), src, dst, block, s); });
}

// Each input is an [outer, inner] matrix occupying columns [offset, offset + inner) of the
// output's [outer, total] matrix.
struct Piece {
  Shape shape;
  int64_t offset = 0, inner = 0;
};

struct ConcatBackward : autograd::Node {
  std::vector<Piece> pieces;
  int64_t outer = 0, total = 0;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor dy = g[0].contiguous();
    const auto* base = static_cast<const char*>(dy.data_ptr());
    std::vector<Tensor> grads(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (!next_edges[i].fn) continue;
      const Piece& p = pieces[i];
      grads[i] = Tensor::empty(p.shape, dy.dtype(), dy.device());
      copy_block(dy, base + p.offset * dy.element_size(), grads[i].data_ptr(),
                 {outer, p.inner, total, p.inner});
    }
    return grads;
  }
  std::string name() const override { return "ConcatBackward"; }
};

// Validates the inputs and returns dim in [0, rank).
int64_t checked_dim(const std::vector<Tensor>& xs, int64_t dim) {
  KESTREL_CHECK(!xs.empty(), "concat: needs at least one tensor, got an empty list");
  for (size_t i = 0; i < xs.size(); ++i)
    KESTREL_CHECK(xs[i].defined(), "concat: input ", i, " is an undefined tensor");
  const Tensor& first = xs[0];
  const int64_t rank = first.dim();
  KESTREL_CHECK(rank > 0, "concat: cannot join 0-d tensors (", first.describe(),
                "); reshape them to [1] first");
  KESTREL_CHECK(dim >= -rank && dim < rank, "concat: dimension ", dim, " out of range for ",
                first.describe(), "; use a value in [", -rank, ", ", rank - 1, "]");
  if (dim < 0) dim += rank;
  for (size_t i = 1; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    KESTREL_CHECK(x.device() == first.device(), "concat: input ", i, " is ", x.describe(),
                  " but input 0 is ", first.describe(), "; move every input to one device");
    KESTREL_CHECK(x.dtype() == first.dtype(), "concat: input ", i, " is ", x.describe(),
                  " but input 0 is ", first.describe(), "; cast every input to one dtype");
    bool same = x.dim() == rank;
    for (int64_t d = 0; same && d < rank; ++d) same = d == dim || x.size(d) == first.size(d);
    KESTREL_CHECK(same, "concat along dimension ", dim, ": input ", i, " has shape ",
                  shape_str(x.shape()), " but input 0 has ", shape_str(first.shape()),
                  "; all sizes except dimension ", dim, " must match");
  }
  return dim;
}

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int64_t requested_dim) {
  const profiler::Scope timed("Concat", profiler::Phase::Forward);
  const int64_t dim = checked_dim(xs, requested_dim);

  Shape out_shape = xs[0].shape();
  out_shape[dim] = 0;
  for (const Tensor& x : xs) out_shape[dim] += x.size(dim);
  Tensor out = Tensor::empty(out_shape, xs[0].dtype(), xs[0].device());
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out_shape[d];
  const int64_t total = outer == 0 ? 0 : out.numel() / outer;

  std::vector<Piece> pieces;
  int64_t offset = 0;
  auto* base = static_cast<char*>(out.data_ptr());
  for (const Tensor& x_ : xs) {
    Tensor x = x_.contiguous();
    const int64_t inner = outer == 0 ? 0 : x.numel() / outer;
    copy_block(out, x.data_ptr(), base + offset * out.element_size(), {outer, inner, inner, total});
    pieces.push_back({x.shape(), offset, inner});
    offset += inner;
  }
  if (auto node = autograd::make_node<ConcatBackward>(xs)) {
    node->pieces = std::move(pieces);
    node->outer = outer;
    node->total = total;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kestrel::ops
