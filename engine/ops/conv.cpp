#include "engine/ops/conv.h"

#include <cstdint>
#include <optional>

#include "engine/profiler.h"
#include "engine/ops/common.h"
#include "engine/ops/elementwise.h"
#include "kernels/bf16_operands.h"
#include "kernels/conv2d_dnnl.h"
#include "kernels/conv_algo_cache.h"

namespace kestrel::ops {
namespace {

using kernels::Conv2dShape;
using kernels::ConvPass;
using kernels::WeightVersion;

// The most workspace an algorithm may use, offered to cuDNN's one-time search of a configuration.
// The block goes back to the caching allocator afterwards and serves the next search.
constexpr size_t kSearchWorkspaceBytes = size_t(256) << 20;

std::string params_str(const Conv2dParams& p) {
  return str("stride (", p.stride_h, ", ", p.stride_w, ") and padding (", p.pad_h, ", ", p.pad_w,
             ")");
}

// Validates the geometry of a convolution and returns it in the kernels' terms.
Conv2dShape conv_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  KESTREL_CHECK(x.size() == 4, "conv2d: the input must be 4-D NHWC [N, H, W, C], got ",
                shape_str(x), "; add a batch dimension with reshape");
  KESTREL_CHECK(w.size() == 4, "conv2d: the weight must be 4-D OHWI [O, KH, KW, C], got ",
                shape_str(w), "; OIHW weights convert with permute({0, 2, 3, 1})");
  for (int64_t d : x)
    KESTREL_CHECK(d > 0, "conv2d: the input ", shape_str(x), " has an empty dimension");
  for (int64_t d : w)
    KESTREL_CHECK(d > 0, "conv2d: the weight ", shape_str(w), " has an empty dimension");
  KESTREL_CHECK(x[3] == w[3], "conv2d: the input has ", x[3], " channels (NHWC ", shape_str(x),
                ") but the OHWI weight ", shape_str(w), " expects ", w[3],
                "; check the layer's input channels");
  KESTREL_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0,
                "conv2d: strides must be >= 1 and padding >= 0, got ", params_str(p));
  const Conv2dShape s{.n = x[0], .h = x[1], .w = x[2], .c = x[3], .o = w[0], .kh = w[1],
                      .kw = w[2], .stride_h = p.stride_h, .stride_w = p.stride_w,
                      .pad_h = p.pad_h, .pad_w = p.pad_w};
  KESTREL_CHECK(s.out_h() > 0 && s.out_w() > 0, "conv2d: empty output: the ", x[1], "x", x[2],
                " input with ", params_str(p), " is smaller than the ", w[1], "x", w[2],
                " kernel; use a larger input, more padding or a smaller kernel");
  return s;
}

void check_output_grad(const char* op, const Tensor& dy, const Conv2dShape& s) {
  const Shape expected{s.n, s.out_h(), s.out_w(), s.o};
  KESTREL_CHECK(dy.shape() == expected, op, ": the output gradient must be ", shape_str(expected),
                " for this convolution, got ", dy.describe());
}

// Contiguous data starting 16-byte aligned: cuDNN's vectorized kernels need it, and an algorithm
// cached for aligned buffers may not run on others. A view may start anywhere in its storage.
// Detached first, so that a copy made here records no autograd history.
Tensor dense(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  if (c.device().is_cpu() || reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0) return c;
  Tensor copy = Tensor::empty(c.shape(), c.dtype(), c.device());
  copy.copy_(c);
  return copy;
}

kernels::ConvMath conv_math(const Conv2dParams& p) { return {p.allow_tf32, p.deterministic}; }

// The algorithm for a pass of this configuration (buffer order as in kernels/conv2d.h), by the
// rules of kernels/conv_algo_cache.h: cuDNN's ranking at a first sight; when it repeats, a timed
// search on these very buffers (which overwrites `out`), kept unless its scratch could not be had.
// Runs inside ops::launch's CUDA form for dev, on its stream.
kernels::Conv2dAlgo cudnn_algo(ConvPass pass, DType t, const Conv2dShape& s,
                               const Conv2dParams& p, Device dev, const void* in0,
                               const void* in1, void* out, cudaStream_t stream) {
  const kernels::ConvMath m = conv_math(p);
  auto timed = [&]() -> kernels::TimedChoice {
    Tensor scratch;
    try {
      scratch = Tensor::empty({int64_t(kSearchWorkspaceBytes)}, DType::U8, dev);
    } catch (const Error&) {
      // Short of memory: the search considers only algorithms that need no workspace, and its
      // choice is not kept (the next sight searches again).
    }
    kernels::TimedChoice c;
    c.full_scratch = scratch.defined();
    c.algo = kernels::conv2d_time_algo_cuda(pass, t, s, m, in0, in1, out,
                                            c.full_scratch ? scratch.data_ptr() : nullptr,
                                            c.full_scratch ? kSearchWorkspaceBytes : 0, stream);
    return c;
  };
  return kernels::conv2d_algo_cuda(pass, t, s, m, kSearchWorkspaceBytes, timed, stream);
}

void run_cudnn(ConvPass pass, DType t, const Conv2dShape& s, const kernels::Conv2dAlgo& algo,
               Device dev, const void* in0, const void* in1, void* out, bool accumulate,
               cudaStream_t stream) {
  Tensor workspace;
  if (algo.workspace_bytes > 0)
    workspace = Tensor::empty({int64_t(algo.workspace_bytes)}, DType::U8, dev);
  kernels::conv2d_run_cuda(pass, t, s, algo, in0, in1, out, accumulate,
                           workspace.defined() ? workspace.data_ptr() : nullptr, stream);
}

// A backward pass on CUDA: no accumulation, so the search may scribble on `out` first.
void cudnn_pass(ConvPass pass, DType t, const Conv2dShape& s, const Conv2dParams& p, Device dev,
                const void* in0, const void* in1, void* out, cudaStream_t stream) {
  const kernels::Conv2dAlgo algo = cudnn_algo(pass, t, s, p, dev, in0, in1, out, stream);
  run_cudnn(pass, t, s, algo, dev, in0, in1, out, false, stream);
}

// The CPU runs float32 through oneDNN and float64 through the im2col + OpenBLAS reference (the
// gradient checks' ground truth). OpenBLAS thus never runs in a float32 step, and its threads stay
// asleep while oneDNN's OpenMP threads (OMP_NUM_THREADS) do the work.
bool use_dnnl(const Tensor& t) { return t.device().is_cpu() && t.dtype() == DType::F32; }

// A backward pass's checks of the output gradient dy and the other operand (w for data, x for
// filter); the pass's geometry.
Conv2dShape checked_backward(const char* op, const Tensor& dy, const Tensor& other,
                             const Shape& x_shape, const Shape& w_shape, const Conv2dParams& p) {
  check_compatible(op, other, dy, false);
  const Conv2dShape s = conv_shape(x_shape, w_shape, p);
  check_kernel_dtype(op, other);
  check_output_grad(op, dy, s);
  return s;
}

// dx for backward-data; wv names the filter's contents for oneDNN's reordered-filter cache.
Tensor backward_data(const Tensor& dy_, const Tensor& w_, const Shape& x_shape,
                     const Conv2dParams& p, WeightVersion wv) {
  const Conv2dShape s = checked_backward("conv2d backward-data", dy_, w_, x_shape, w_.shape(), p);
  Tensor dy = dense(dy_), w = dense(w_);
  Tensor dx = Tensor::empty(x_shape, w.dtype(), w.device());
  launch(
      w.device(),
      [&] {
        if (use_dnnl(w))
          kernels::conv2d_backward_data_dnnl(s, dy.data<float>(), w.data<float>(), wv,
                                             dx.data<float>());
        else
          kernels::conv2d_backward_data_cpu(w.dtype(), s, dy.data_ptr(), w.data_ptr(),
                                            dx.data_ptr());
      },
      [&](cudaStream_t stream) {
        cudnn_pass(ConvPass::BackwardData, w.dtype(), s, p, w.device(), dy.data_ptr(),
                   w.data_ptr(), dx.data_ptr(), stream);
      });
  return dx;
}

// dw; on oneDNN also the bias gradient into *db (when db is not null), from the same pass.
Tensor backward_filter(const Tensor& x_, const Tensor& dy_, const Shape& weight_shape,
                       const Conv2dParams& p, Tensor* db) {
  const Conv2dShape s =
      checked_backward("conv2d backward-filter", dy_, x_, x_.shape(), weight_shape, p);
  Tensor x = dense(x_), dy = dense(dy_);
  Tensor dw = Tensor::empty(weight_shape, x.dtype(), x.device());
  launch(
      x.device(),
      [&] {
        if (use_dnnl(x)) {
          if (db) *db = Tensor::empty({s.o}, x.dtype(), x.device());
          kernels::conv2d_backward_filter_dnnl(s, x.data<float>(), dy.data<float>(),
                                               dw.data<float>(), db ? db->data<float>() : nullptr);
        } else {
          kernels::conv2d_backward_filter_cpu(x.dtype(), s, x.data_ptr(), dy.data_ptr(),
                                              dw.data_ptr());
        }
      },
      [&](cudaStream_t stream) {
        cudnn_pass(ConvPass::BackwardFilter, x.dtype(), s, p, x.device(), x.data_ptr(),
                   dy.data_ptr(), dw.data_ptr(), stream);
      });
  if (db && !db->defined()) *db = conv2d_backward_bias(dy);
  return dw;
}

// --- bfloat16 operands (ConvOperands) ---------------------------------------------------------

bool cpu_has_native_bf16() {
  static const bool native = kernels::cpu_bf16_support().native();  // fixed for the process
  return native;
}

void check_bf16_operands(const Tensor& x, const Conv2dParams& p) {
  KESTREL_CHECK(x.device().is_cpu() && x.dtype() == DType::F32,
                "conv2d: bfloat16 operands are the CPU's float32 mixed precision, got ", x.describe(),
                "; on CUDA mixed precision runs on bfloat16 activations instead");
  KESTREL_CHECK(p.operands != ConvOperands::Bfloat16 || cpu_has_native_bf16(),
                "conv2d: bfloat16 operands need a CPU with AVX-512 BF16 or AMX, which this one lacks; "
                "use ConvOperands::Bfloat16Emulated to check the arithmetic, or Float32");
}

// t (dense, CPU float32) rounded to bfloat16: a BF16 tensor for oneDNN's bf16 kernels, or float32
// holding the rounded values for the emulation.
Tensor bf16_operand(const Tensor& t, ConvOperands o) {
  if (o == ConvOperands::Bfloat16) {
    Tensor q = Tensor::empty(t.shape(), DType::BF16, t.device());
    kernels::float_to_bf16_cpu(t.data<float>(), static_cast<uint16_t*>(q.data_ptr()), t.numel());
    return q;
  }
  Tensor q = Tensor::empty(t.shape(), DType::F32, t.device());
  kernels::round_to_bf16_cpu(t.data<float>(), q.data<float>(), t.numel());
  return q;
}

const uint16_t* bf16_bits(const Tensor& t) { return static_cast<const uint16_t*>(t.data_ptr()); }

// dx from rounded operands (bf16_operand; natively wq is the float32 filter, which oneDNN rounds):
// float32.
Tensor backward_data_bf16(const Tensor& dyq, const Tensor& wq, const Shape& x_shape,
                          const Conv2dParams& p) {
  if (p.operands == ConvOperands::Bfloat16Emulated)
    return backward_data(dyq, wq, x_shape, p, kernels::kUncachedWeights);
  const Conv2dShape s = conv_shape(x_shape, wq.shape(), p);
  check_output_grad("conv2d backward-data", dyq, s);
  Tensor dx = Tensor::empty(x_shape, DType::F32, wq.device());
  kernels::conv2d_backward_data_dnnl_bf16(s, bf16_bits(dyq), wq.data<float>(), dx.data<float>());
  return dx;
}

// dw from rounded operands: float32.
Tensor backward_filter_bf16(const Tensor& xq, const Tensor& dyq, const Shape& w_shape,
                            const Conv2dParams& p) {
  if (p.operands == ConvOperands::Bfloat16Emulated) return backward_filter(xq, dyq, w_shape, p, nullptr);
  const Conv2dShape s = conv_shape(xq.shape(), w_shape, p);
  check_output_grad("conv2d backward-filter", dyq, s);
  Tensor dw = Tensor::empty(w_shape, DType::F32, xq.device());
  kernels::conv2d_backward_filter_dnnl_bf16(s, bf16_bits(xq), bf16_bits(dyq), dw.data<float>());
  return dw;
}

struct Conv2dBackward : autograd::Node {
  Conv2dParams params;
  Shape x_shape, w_shape;
  // x and w as the forward multiplied them (rounded, with bfloat16 operands)
  autograd::SavedTensor x;  // kept only when the weight needs a gradient
  autograd::SavedTensor w;  // kept only when the input needs a gradient
  // The version the forward pass gave w's contents (oneDNN only), for backward-data's lookup.
  WeightVersion w_version = kernels::kUncachedWeights;
  bool bf16_activations = false;  // the CPU's bfloat16 activations: x and dy bfloat16, w float32
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor dy = dense(g[0]);
    if (bf16_activations) return apply_bf16_activations(dy);
    if (params.operands != ConvOperands::Float32) return apply_bf16(dy);
    Tensor dx = next_edges[0].fn ? backward_data(dy, w.unpack(), x_shape, params, w_version)
                                 : Tensor();
    Tensor db;
    Tensor dw = next_edges[1].fn ? backward_filter(x.unpack(), dy, w_shape, params,
                                                   next_edges[2].fn ? &db : nullptr)
                                 : Tensor();
    if (next_edges[2].fn && !db.defined()) db = conv2d_backward_bias(dy);
    return {dx, dw, db};
  }
  // dy rounded once for both passes; the bias gradient from dy itself.
  std::vector<Tensor> apply_bf16(const Tensor& dy) {
    const bool data = next_edges[0].fn != nullptr, filter = next_edges[1].fn != nullptr;
    const Tensor dyq = data || filter ? bf16_operand(dy, params.operands) : Tensor();
    return {data ? backward_data_bf16(dyq, w.unpack(), x_shape, params) : Tensor(),
            filter ? backward_filter_bf16(x.unpack(), dyq, w_shape, params) : Tensor(),
            next_edges[2].fn ? conv2d_backward_bias(dy) : Tensor()};
  }
  // dx bfloat16 from oneDNN's bf16 backward-data, dw and the bias gradient float32.
  std::vector<Tensor> apply_bf16_activations(const Tensor& dy) {
    const Conv2dShape s = conv_shape(x_shape, w_shape, params);
    KESTREL_CHECK(dy.dtype() == DType::BF16, "conv2d backward on bfloat16 activations: the output gradient must be "
                  "bfloat16 too, got ", dy.describe());
    check_output_grad("conv2d backward", dy, s);
    Tensor dx, dw;
    if (next_edges[0].fn) {
      dx = Tensor::empty(x_shape, DType::BF16, dy.device());
      kernels::conv2d_backward_data_dnnl_bf16_io(s, bf16_bits(dy), w.unpack().data<float>(), w_version,
                                                 static_cast<uint16_t*>(dx.data_ptr()));
    }
    if (next_edges[1].fn) {
      dw = Tensor::empty(w_shape, DType::F32, dy.device());
      kernels::conv2d_backward_filter_dnnl_bf16(s, bf16_bits(x.unpack()), bf16_bits(dy), dw.data<float>());
    }
    return {dx, dw, next_edges[2].fn ? conv2d_backward_bias(dy) : Tensor()};
  }
  void release_saved() override {
    x.release();
    w.release();
  }
  std::string name() const override { return "Conv2dBackward"; }
};

// Gives y (the convolution of x_, w_, b_) its backward node, which keeps x (for dw) and w (for dx;
// wv names its contents) only where the other operand needs a gradient.
void record_backward(const Tensor& x_, const Tensor& w_, const Tensor& b_, const Conv2dParams& p,
                     const Tensor& x, const Tensor& w, WeightVersion wv, const Tensor& y,
                     bool bf16_activations = false) {
  if (auto node = autograd::make_node<Conv2dBackward>({&x_, &w_, &b_})) {
    node->params = p;
    node->bf16_activations = bf16_activations;
    node->x_shape = x_.shape();
    node->w_shape = w_.shape();
    if (w_.requires_grad()) node->x = autograd::SavedTensor(x);
    if (x_.requires_grad()) node->w = autograd::SavedTensor(w);
    node->w_version = wv;
    autograd::set_history(y, node);
  }
}

// A forward convolution's checked operands: the geometry, the dense inputs and the output.
struct ForwardOperands {
  Conv2dShape s;
  Tensor x, w, b, y;
};

ForwardOperands forward_operands(const Tensor& x_, const Tensor& w_, const Tensor& b_,
                                 const Conv2dParams& p) {
  check_compatible("conv2d", x_, w_, false);
  const Conv2dShape s = conv_shape(x_.shape(), w_.shape(), p);
  check_kernel_dtype("conv2d", x_);
  if (b_.defined()) {
    check_compatible("conv2d (bias)", x_, b_, false);
    KESTREL_CHECK(b_.dim() == 1 && b_.size(0) == s.o, "conv2d: the bias must be [", s.o,
                  "] to match the weight ", w_.describe(), ", got ", b_.describe());
  }
  Tensor x = dense(x_);
  Tensor y = Tensor::empty({s.n, s.out_h(), s.out_w(), s.o}, x.dtype(), x.device());
  return {s, x, dense(w_), b_.defined() ? dense(b_) : Tensor(), y};
}

// conv2d on bfloat16 operands (ConvOperands).
Tensor conv2d_bf16(const Tensor& x_, const Tensor& w_, const Tensor& b_, const Conv2dParams& p) {
  const profiler::Scope timed("Conv2d", profiler::Phase::Forward);
  const ForwardOperands o = forward_operands(x_, w_, b_, p);
  check_bf16_operands(o.x, p);
  // Natively, oneDNN rounds the float32 filter as it reorders it into the pass's layout.
  const bool native = p.operands == ConvOperands::Bfloat16;
  const Tensor xq = bf16_operand(o.x, p.operands), wq = native ? o.w : bf16_operand(o.w, p.operands);
  const float* bias = o.b.defined() ? o.b.data<float>() : nullptr;
  if (native)
    kernels::conv2d_forward_dnnl_bf16(o.s, bf16_bits(xq), wq.data<float>(), bias, o.y.data<float>());
  else
    kernels::conv2d_forward_dnnl(o.s, xq.data<float>(), wq.data<float>(), kernels::kUncachedWeights,
                                 bias, o.y.data<float>());
  record_backward(x_, w_, b_, p, xq, wq, kernels::kUncachedWeights, o.y);
  return o.y;
}

// The checked operands of a convolution on the CPU's bfloat16 activations: x (and y) bfloat16, w and b
// float32 (oneDNN rounds w as it reorders it), on a CPU with bfloat16 arithmetic.
ForwardOperands bf16_activation_operands(const Tensor& x_, const Tensor& w_, const Tensor& b_, const Conv2dParams& p) {
  KESTREL_CHECK(w_.defined() && w_.device().is_cpu() && w_.dtype() == DType::F32 &&
                    (!b_.defined() || (b_.device().is_cpu() && b_.dtype() == DType::F32)),
                "conv2d on bfloat16 activations takes the float32 weights and bias, on the CPU; got ",
                w_.defined() ? w_.describe() : "an undefined weight");
  KESTREL_CHECK(cpu_has_native_bf16(),
                "conv2d: bfloat16 activations need a CPU with AVX-512 BF16 or AMX, which this one lacks; "
                "run in float32");
  KESTREL_CHECK(p.operands == ConvOperands::Float32, "conv2d: bfloat16 operands round float32 activations; the ",
                "activations ", x_.describe(), " are bfloat16 already");
  const Conv2dShape s = conv_shape(x_.shape(), w_.shape(), p);
  if (b_.defined())
    KESTREL_CHECK(b_.dim() == 1 && b_.size(0) == s.o, "conv2d: the bias must be [", s.o, "] to match the weight ",
                  w_.describe(), ", got ", b_.describe());
  const Tensor x = dense(x_);
  return {s, x, dense(w_), b_.defined() ? dense(b_) : Tensor(),
          Tensor::empty({s.n, s.out_h(), s.out_w(), s.o}, DType::BF16, x.device())};
}

// y = act(conv(x, w) + b) on bfloat16 activations, y rounded once after the activation.
void forward_bf16_activations(const ForwardOperands& o, WeightVersion wv, ConvActivation act) {
  kernels::conv2d_forward_dnnl_bf16_io(o.s, bf16_bits(o.x), o.w.data<float>(), wv,
                                       o.b.defined() ? o.b.data<float>() : nullptr,
                                       static_cast<uint16_t*>(o.y.data_ptr()),
                                       act == ConvActivation::Silu ? kernels::ConvActivation::Silu
                                                                   : kernels::ConvActivation::None);
}

// Training's convolution on the CPU's bfloat16 activations (--amp bf16): y bfloat16; its backward
// gives dx in bfloat16 and dw, db in float32 (Conv2dBackward::apply_bf16_activations).
Tensor conv2d_bf16_activations(const Tensor& x_, const Tensor& w_, const Tensor& b_, const Conv2dParams& p) {
  const profiler::Scope timed("Conv2d", profiler::Phase::Forward);
  const ForwardOperands o = bf16_activation_operands(x_, w_, b_, p);
  // A fresh version per forward, as float32's: one reorder per pass per optimizer step.
  const WeightVersion wv = kernels::conv2d_dnnl_new_weight_version();
  forward_bf16_activations(o, wv, ConvActivation::None);
  record_backward(x_, w_, b_, p, o.x, o.w, wv, o.y, /*bf16_activations=*/true);
  return o.y;
}

// Inference on the CPU's bfloat16 activations, the filter's reorder cached by wv.
Tensor conv2d_inference_bf16(const Tensor& x_, const Tensor& w_, const Tensor& b_, const Conv2dParams& p,
                             ConvActivation act, WeightVersion wv) {
  const profiler::Scope timed("Conv2d", profiler::Phase::Forward);
  const ForwardOperands o = bf16_activation_operands(x_, w_, b_, p);
  if (o.w.data_ptr() != w_.data_ptr()) wv = kernels::kUncachedWeights;  // a copy: the version is not its
  forward_bf16_activations(o, wv, act);
  return o.y;
}

}  // namespace

Tensor conv2d(const Tensor& x_, const Tensor& w_, const Tensor& b_, const Conv2dParams& p) {
  if (x_.defined() && x_.device().is_cpu() && x_.dtype() == DType::BF16) return conv2d_bf16_activations(x_, w_, b_, p);
  if (p.operands != ConvOperands::Float32) return conv2d_bf16(x_, w_, b_, p);
  const profiler::Scope timed("Conv2d", profiler::Phase::Forward);
  const ForwardOperands o = forward_operands(x_, w_, b_, p);
  const Conv2dShape& s = o.s;  // named references, not a structured binding: lambdas capture them
  const Tensor &x = o.x, &w = o.w, &b = o.b, &y = o.y;
  // Tensors carry no version counter, so nothing tells this op whether w was written since its
  // last call (the optimizer, EMA and checkpoint loading write weights in place). Every forward
  // therefore takes a fresh version: oneDNN reorders the filter once for this forward and once for
  // its backward-data (the two layouts differ), i.e. once per pass per optimizer step, into cached
  // buffers rewritten in place, and a stale filter can never be read.
  const WeightVersion wv =
      use_dnnl(x) ? kernels::conv2d_dnnl_new_weight_version() : kernels::kUncachedWeights;
  launch(
      x.device(),
      [&] {
        if (use_dnnl(x))
          kernels::conv2d_forward_dnnl(s, x.data<float>(), w.data<float>(), wv,
                                       b.defined() ? b.data<float>() : nullptr, y.data<float>());
        else
          kernels::conv2d_forward_cpu(x.dtype(), s, x.data_ptr(), w.data_ptr(),
                                      b.defined() ? b.data_ptr() : nullptr, y.data_ptr());
      },
      [&](cudaStream_t stream) {
        const kernels::Conv2dAlgo algo =
            cudnn_algo(ConvPass::Forward, x.dtype(), s, p, x.device(), x.data_ptr(), w.data_ptr(),
                       y.data_ptr(), stream);
        // The bias goes in first and the convolution accumulates onto it after the search.
        if (b.defined())
          kernels::conv2d_fill_bias_cuda(x.dtype(), s.n * s.out_h() * s.out_w(), s.o, b.data_ptr(),
                                         y.data_ptr(), stream);
        run_cudnn(ConvPass::Forward, x.dtype(), s, algo, x.device(), x.data_ptr(), w.data_ptr(),
                  y.data_ptr(), b.defined(), stream);
      });
  record_backward(x_, w_, b_, p, x, w, wv, y);
  return y;
}

Tensor conv2d_inference(const Tensor& x_, const Tensor& w_, const Tensor& b_,
                        const Conv2dParams& p, ConvActivation act, WeightVersion wv) {
  KESTREL_CHECK(!autograd::grad_enabled() ||
                    !(x_.requires_grad() || w_.requires_grad() ||
                      (b_.defined() && b_.requires_grad())),
                "conv2d_inference records no gradients: run it under autograd::NoGradGuard, or "
                "use conv2d for training");
  if (x_.defined() && x_.device().is_cpu() && x_.dtype() == DType::BF16)
    return conv2d_inference_bf16(x_, w_, b_, p, act, wv);
  if (!use_dnnl(x_) || x_.dtype() != w_.dtype() || p.operands != ConvOperands::Float32) {
    Tensor y = conv2d(x_, w_, b_, p);
    return act == ConvActivation::Silu ? silu(y) : y;
  }
  const profiler::Scope timed("Conv2d", profiler::Phase::Forward);
  const ForwardOperands o = forward_operands(x_, w_, b_, p);
  const Conv2dShape& s = o.s;  // named references, not a structured binding: lambdas capture them
  const Tensor &x = o.x, &w = o.w, &b = o.b, &y = o.y;
  // A copy made by dense() is a new buffer: the caller's version does not describe it.
  if (w.data_ptr() != w_.data_ptr()) wv = kernels::kUncachedWeights;
  kernels::conv2d_forward_dnnl(s, x.data<float>(), w.data<float>(), wv,
                               b.defined() ? b.data<float>() : nullptr, y.data<float>(),
                               act == ConvActivation::Silu ? kernels::ConvActivation::Silu
                                                           : kernels::ConvActivation::None);
  return y;
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dParams& p) {
  return backward_data(dy, w, x_shape, p, kernels::kUncachedWeights);
}

Tensor conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Shape& weight_shape,
                              const Conv2dParams& p) {
  return backward_filter(x, dy, weight_shape, p, nullptr);
}

Tensor conv2d_backward_bias(const Tensor& dy_) {
  KESTREL_CHECK(dy_.defined() && dy_.dim() == 4,
                "conv2d backward-bias: the output gradient must be 4-D NHWC, got ",
                dy_.defined() ? dy_.describe() : "an undefined tensor");
  // bfloat16 activations on the CPU: the float32 bias's gradient.
  const bool cpu_bf16 = dy_.device().is_cpu() && dy_.dtype() == DType::BF16;
  if (!cpu_bf16) check_kernel_dtype("conv2d backward-bias", dy_);
  Tensor dy = dense(dy_);
  const int64_t rows = dy.size(0) * dy.size(1) * dy.size(2), channels = dy.size(3);
  Tensor db = Tensor::empty({channels}, cpu_bf16 ? DType::F32 : dy.dtype(), dy.device());
  launch(
      dy.device(),
      [&] {
        kernels::conv2d_backward_bias_cpu(dy.dtype(), rows, channels, dy.data_ptr(),
                                          db.data_ptr());
      },
      [&](cudaStream_t stream) {
        Tensor partials = Tensor::empty({kernels::conv2d_bias_grad_partials(rows, channels)},
                                        DType::F32, dy.device());
        kernels::conv2d_backward_bias_cuda(dy.dtype(), rows, channels, dy.data_ptr(),
                                           db.data_ptr(), partials.data<float>(), stream);
      });
  return db;
}

std::string conv2d_algorithm(ConvPass pass, const Tensor& x, const Tensor& weight,
                             const Conv2dParams& p) {
  check_compatible("conv2d_algorithm", x, weight, false);
  const Conv2dShape s = conv_shape(x.shape(), weight.shape(), p);
  return launch(
      x.device(),
      [&]() -> std::string {
        if (p.operands == ConvOperands::Bfloat16) return kernels::conv2d_dnnl_implementation_bf16(pass, s);
        return use_dnnl(x) ? kernels::conv2d_dnnl_implementation(pass, s) : "im2col_gemm";
      },
      [&](cudaStream_t) -> std::string {
        std::optional<kernels::Conv2dAlgo> algo =
            kernels::conv2d_cached_algo_cuda(pass, x.dtype(), s, conv_math(p));
        return algo ? algo->name : "";
      });
}

}  // namespace kestrel::ops
