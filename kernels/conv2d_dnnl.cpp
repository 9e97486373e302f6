// oneDNN float32 convolutions: primitives cached per configuration, filters reordered into the
// blocked format oneDNN chooses and cached per (pointer, configuration, version). See
// kernels/conv2d_dnnl.h for the contract.
#include "kernels/conv2d_dnnl.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dnnl.h>
#include <dnnl.hpp>

#include "base/error.h"

namespace kestrel::kernels {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;
constexpr memory::data_type kBf16 = memory::data_type::bf16;

// Reordered filters kept at most: yolov5s's filters take 28 MB in each of the forward and
// backward-data layouts, yolov5x's 350 MB. Beyond the bound the least recently used copy goes (a
// model too large for it is reordered on every call: slower, never wrong).
constexpr size_t kMaxCachedFilterBytes = size_t(512) << 20;

// The operands' type: float32, or bfloat16 (x, w and dy in bfloat16; y, dx, dw and the bias in
// float32, accumulated in float32), or bfloat16 in and out (bfloat16 activations: x, y, dy and dx
// bfloat16, w rounded by its reorder, the bias float32, accumulated in float32; backward-weights
// of bfloat16 activations is the Bf16 pass, its dw float32).
enum class Operands : uint8_t { F32, Bf16, Bf16InOut };

// One configuration of one pass: the shape, the pass, whether a bias (or its gradient) goes
// with it, the post-op and the operands' type.
struct Key {
  std::array<int64_t, 15> v;
  auto operator<=>(const Key&) const = default;
};

Key key_of(ConvPass pass, const Conv2dShape& s, bool bias, ConvActivation act,
           Operands operands = Operands::F32) {
  return Key{{s.n, s.h, s.w, s.c, s.o, s.kh, s.kw, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
              int64_t(pass), int64_t(bias), int64_t(act), int64_t(operands)}};
}

memory::data_type operand_type(Operands o) { return o == Operands::F32 ? kF32 : kBf16; }
memory::data_type result_type(Operands o) { return o == Operands::Bf16InOut ? kBf16 : kF32; }

// oneDNN's logical dimensions are NCHW / OIHW whatever the layout; the tags say NHWC / OHWI.
// Operands are x, w and dy; results (y, dx, dw) stay float32.
memory::desc activation_md(int64_t n, int64_t c, int64_t h, int64_t w,
                           memory::data_type t = kF32) {
  return memory::desc({n, c, h, w}, t, tag::nhwc);
}
memory::desc src_md(const Conv2dShape& s, memory::data_type t = kF32) {
  return activation_md(s.n, s.c, s.h, s.w, t);
}
memory::desc dst_md(const Conv2dShape& s, memory::data_type t = kF32) {
  return activation_md(s.n, s.o, s.out_h(), s.out_w(), t);
}
memory::desc weights_md(const Conv2dShape& s, tag t, memory::data_type type = kF32) {
  return memory::desc({s.o, s.c, s.kh, s.kw}, type, t);
}
memory::desc bias_md(const Conv2dShape& s) { return memory::desc({s.o}, kF32, tag::a); }
memory::dims strides(const Conv2dShape& s) { return {s.stride_h, s.stride_w}; }
// Both sides padded alike: oneDNN's output size (in + pad_l + pad_r - k) / stride + 1 then equals
// conv_out_size, with the same rounding down.
memory::dims padding(const Conv2dShape& s) { return {s.pad_h, s.pad_w}; }

// A primitive and the scratch memory it needs: every primitive runs in user scratchpad mode (see
// ScratchPool).
struct Runnable {
  dnnl::primitive prim;
  memory::desc scratch;
};

// Backward-weights as one GEMM per group of images, dW (O x KH*KW*C) = dY^T (O x M) . im2col(x)
// (M x KH*KW*C), in oneDNN's sgemm, where oneDNN 3.2 has no brgemm backward-weights kernel for the
// CPU (AVX2) and would take one of its older jit kernels:
// - 3x3 (`jit:`, 27-67 GFLOP/s on yolov5s's shapes): the GEMM ran them at 74-100 GFLOP/s, 2.3-3.3x
//   on the stride-2 ones, 1.5x on the stride-1 ones with 64 or more input channels; with fewer
//   channels at stride 1 the direct kernel stays ahead.
// - 1x1 at stride 1 without padding (`jit_1x1:`): NHWC makes x itself the M x C matrix, so the
//   GEMM needs no im2col and runs over all images at once: 10-18 % less time summed over
//   yolov5s's fifteen 1x1 shapes at batch 16 (docs/history/performance.md).
// A choice by shape and by oneDNN's own choice, never by timing, so every run computes alike.
constexpr const char* kGemmBackwardFilter = "im2col+sgemm";
constexpr const char* kGemmBackwardFilter1x1 = "sgemm";

bool is_pointwise(const Conv2dShape& s) {
  return s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
}

// bf16 operands: oneDNN 3.2 runs backward-weights on AVX-512 BF16 through its older jit_bf16 kernels;
// as one bf16 matmul (brgemm) per group of images, dW = dY^T . im2col(x), accumulated in float32,
// they ran faster (docs/history/performance.md, "bfloat16 on the CPU"): pointwise and 3x3 convolutions.
constexpr const char* kMatmulBackwardFilter = "im2col+bf16 matmul";
constexpr const char* kMatmulBackwardFilter1x1 = "bf16 matmul";

bool matmul_backward_filter_wins(const Conv2dShape& s) {
#if DNNL_VERSION_MAJOR >= 3
  return is_pointwise(s) || (s.kh == 3 && s.kw == 3);
#else
  (void)s;
  return false;  // oneDNN 2.6's matmul API is not wired here
#endif
}

bool gemm_backward_filter_wins(const Conv2dShape& s, std::string_view onednn_choice) {
  if (is_pointwise(s)) return onednn_choice.starts_with("jit_1x1:");
  const bool old_jit = onednn_choice.starts_with("jit:");  // not brgconv, not oneDNN's own gemm
  return old_jit && s.kh == 3 && s.kw == 3 &&
         ((s.stride_h == 2 && s.stride_w == 2) || (s.stride_h == 1 && s.stride_w == 1 && s.c >= 64));
}

// A built convolution with the filter layout it wants and the reorder between that layout and
// OHWI (absent when oneDNN takes OHWI as it is).
struct Primitive {
  Runnable conv;
  memory::desc filter;  // the layout conv reads (forward, backward-data) or writes (weights)
  std::optional<Runnable> filter_reorder;  // OHWI -> filter, or filter -> OHWI for weights
  std::string implementation;
  bool gemm = false;  // backward-weights through gemm_backward_filter (float32) or
                      // matmul_backward_filter (bf16) instead of conv
};

// Scratch buffers for the primitives, leased to one call at a time and kept for the next: calls
// running concurrently on several threads (DDP ranks as threads in one process) never share
// scratch, and the steady state allocates nothing. oneDNN's default (library) scratchpad mode
// shares one scratchpad between primitives unless the library was built with
// DNNL_ENABLE_CONCURRENT_EXEC, and Debian's build hangs in a backward-weights barrier when two
// threads convolve at once.
class ScratchPool {
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t size = 0;
  };

 public:
  class Lease {
   public:
    Lease(ScratchPool& pool, size_t bytes) : pool_(pool) {
      {
        std::lock_guard lock(pool_.mutex_);
        if (!pool_.free_.empty()) {
          buffer_ = std::move(pool_.free_.back());
          pool_.free_.pop_back();
        }
      }
      if (buffer_.size < bytes) buffer_ = {std::make_unique_for_overwrite<uint8_t[]>(bytes), bytes};
    }
    ~Lease() {
      std::lock_guard lock(pool_.mutex_);
      pool_.free_.push_back(std::move(buffer_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    void* data() const { return buffer_.data.get(); }

   private:
    ScratchPool& pool_;
    Buffer buffer_;
  };

 private:
  std::mutex mutex_;
  std::vector<Buffer> free_;
};

struct CachedFilter {
  WeightVersion version = kUncachedWeights;
  std::shared_ptr<memory> blocked;
  uint64_t last_use = 0;
};

// The per-process oneDNN state: one CPU engine, the primitives of every configuration seen, and
// the reordered filters. A function-local static (instance()) because oneDNN's engine and JIT
// code are process-wide resources anyway; every member is guarded by mutex_.
class DnnlConv {
 public:
  static DnnlConv& instance() {
    static DnnlConv conv;
    return conv;
  }

  const Primitive& primitive(ConvPass pass, const Conv2dShape& s, bool bias,
                             ConvActivation act = ConvActivation::None,
                             Operands operands = Operands::F32) {
    std::lock_guard lock(mutex_);
    const Key key = key_of(pass, s, bias, act, operands);
    auto it = primitives_.find(key);
    if (it == primitives_.end())
      it = primitives_.emplace(key, build(pass, s, bias, act, operands)).first;
    return it->second;
  }

  // The filter w in the layout p reads: w itself when that is OHWI, else a reordered copy, from
  // the cache when (w, configuration) was reordered before at the same non-zero version. A
  // primitive with a post-op may want another layout than the plain one: its copy is its own.
  std::shared_ptr<memory> filter(const Primitive& p, ConvPass pass, const Conv2dShape& s,
                                 const float* w, WeightVersion version,
                                 ConvActivation act = ConvActivation::None,
                                 Operands operands = Operands::F32) {
    memory user(weights_md(s, tag::ohwi), engine_, const_cast<float*>(w));
    if (!p.filter_reorder) return std::make_shared<memory>(user);
    std::lock_guard lock(mutex_);
    if (version == kUncachedWeights) return reorder(p, user, nullptr);
    auto& entry = filters_[{w, key_of(pass, s, false, act, operands)}];
    entry.last_use = ++clock_;
    if (entry.version == version) {
      ++stats_.hits;
      return entry.blocked;
    }
    // Rewrite the old copy in place unless a call still holds it.
    entry.blocked = reorder(p, user, entry.blocked.use_count() == 1 ? entry.blocked : nullptr);
    entry.version = version;
    std::shared_ptr<memory> result = entry.blocked;
    evict_over_budget();
    return result;
  }

  dnnl::engine& engine() { return engine_; }

#if DNNL_VERSION_MAJOR >= 3
  // The memory of dst (o x k, float32) (+)= a^T . b for a (rows x o) and b (rows x k), both
  // bfloat16 row-major: backward-weights' dW = dY^T . im2col(x).
  struct MatmulAtB {
    memory::desc a_t, b, dst;
    MatmulAtB(int64_t rows, int64_t o, int64_t k)
        : a_t({o, rows}, kBf16, memory::dims{1, o}),  // a^T: a read by columns
          b({rows, k}, kBf16, memory::dims{k, 1}),
          dst({o, k}, kF32, memory::dims{k, 1}) {}
  };

  // That matmul's primitive; accumulate adds onto dst (a sum post-op).
  const Runnable& bf16_matmul_at_b(int64_t rows, int64_t o, int64_t k, bool accumulate) {
    std::lock_guard lock(mutex_);
    const std::array<int64_t, 4> key{rows, o, k, int64_t(accumulate)};
    auto it = matmuls_.find(key);
    if (it == matmuls_.end()) {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      const MatmulAtB md(rows, o, k);
      const dnnl::matmul::primitive_desc pd(engine_, md.a_t, md.b, md.dst, attr);
      it = matmuls_.emplace(key, Runnable{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    return it->second;
  }
#endif

  // Runs r on a stream of its own (streams are per call: a CPU stream is cheap) with leased
  // scratch; returns when the results are written.
  void run(const Runnable& r, std::unordered_map<int, memory> args) {
    ScratchPool::Lease scratch(scratch_, r.scratch.get_size());
    if (r.scratch.get_size() > 0)
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(r.scratch, engine_, scratch.data()));
    dnnl::stream stream(engine_);
    r.prim.execute(stream, args);
    stream.wait();
  }
  WeightVersion new_version() { return ++next_version_; }
  // Scratch for work outside oneDNN's primitives (the im2col buffer of gemm_backward_filter).
  ScratchPool& scratch() { return scratch_; }
  DnnlWeightCacheStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  DnnlConv() : engine_(dnnl::engine::kind::cpu, 0) {
    attr_.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  }

  Primitive build(ConvPass pass, const Conv2dShape& s, bool bias, ConvActivation act,
                  Operands operands) const {
    const auto algo = dnnl::algorithm::convolution_direct;
    // Operands in their type (x, w, dy); results, the bias and its gradient in float32.
    const memory::data_type ot = operand_type(operands);
    KESTREL_CHECK(operands != Operands::Bf16InOut || pass != ConvPass::BackwardFilter,
                  "conv2d through oneDNN: the filter gradient stays float32 (use Operands::Bf16)");
    const memory::desc x_md = src_md(s, ot), dy_md = dst_md(s, ot), dx_md = src_md(s, result_type(operands)),
                       y_md = dst_md(s, result_type(operands));
    KESTREL_CHECK(act == ConvActivation::None || pass == ConvPass::Forward,
                  "conv2d through oneDNN: an activation post-op goes with the forward pass only");
    // A new attribute object: primitive_attr is a handle, so a copy of attr_ would share it.
    dnnl::primitive_attr fwd_attr;
    fwd_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (act == ConvActivation::Silu) {  // swish(x) = x * sigmoid(alpha x), alpha 1
      dnnl::post_ops ops;
#if DNNL_VERSION_MAJOR >= 3
      ops.append_eltwise(dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
#else
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
#endif
      fwd_attr.set_post_ops(ops);
    }
    // The filter's layout for the pass: in the operand type where the pass reads it, float32 where
    // backward-weights writes it. The caller's filter is float32 OHWI in every case: for bf16
    // operands the reorder into the pass's layout also rounds it (one pass; oneDNN's bf16-to-bf16
    // reorders into these VNNI layouts ran several times slower than its float32-to-bf16 ones).
    const memory::data_type ft = pass == ConvPass::BackwardFilter ? kF32 : ot;
    const memory::desc any = weights_md(s, tag::any, ft), ohwi = weights_md(s, tag::ohwi);
    const memory::desc fwd_any = weights_md(s, tag::any, ot);
    const memory::desc no_bias;
    // The backward passes are built with the forward pass as their hint, as oneDNN requires.
    const memory::desc fwd_bias = bias && pass == ConvPass::Forward ? bias_md(s) : no_bias;
#if DNNL_VERSION_MAJOR >= 3  // oneDNN 3 builds primitive descriptors without operation descriptors
    auto make_fwd = [&] {
      return dnnl::convolution_forward::primitive_desc(engine_, dnnl::prop_kind::forward_training, algo,
                                                       x_md, fwd_any, fwd_bias, y_md, strides(s),
                                                       padding(s), padding(s), fwd_attr);
    };
    dnnl::convolution_forward::primitive_desc fwd = make_fwd();
    // oneDNN 3.2 sends 1x1 convolutions to brgconv_1x1 first; for one image (detect, val at batch 1)
    // its older jit_1x1 kernel was 10-30 % faster on AVX2 (the five 1x1 shapes of yolov5s 640,
    // alternating runs). The choice depends on the shape only, never on timings, so every run
    // computes alike.
    if (pass == ConvPass::Forward && s.n == 1 && s.kh == 1 && s.kw == 1 && s.stride_h == 1 &&
        s.stride_w == 1) {
      auto is_jit_1x1 = [&] { return std::string_view(fwd.impl_info_str()).starts_with("jit_1x1"); };
      while (!is_jit_1x1() && fwd.next_impl()) {
      }
      if (!is_jit_1x1()) fwd = make_fwd();  // not offered here: back to oneDNN's first choice
    }
#else
    const dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_md, fwd_any,
                                        fwd_bias, y_md, strides(s), padding(s), padding(s)),
        fwd_attr, engine_);
#endif
    Primitive p;
    switch (pass) {
      case ConvPass::Forward:
        p.conv = {dnnl::convolution_forward(fwd), fwd.scratchpad_desc()};
        p.filter = fwd.weights_desc();
        p.implementation = fwd.impl_info_str();
        break;
      case ConvPass::BackwardData: {
#if DNNL_VERSION_MAJOR >= 3
        const dnnl::convolution_backward_data::primitive_desc pd(
            engine_, algo, dx_md, any, dy_md, strides(s), padding(s), padding(s), fwd, attr_);
#else
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(algo, dx_md, any, dy_md, strides(s),
                                                  padding(s), padding(s)),
            attr_, engine_, fwd);
#endif
        p.conv = {dnnl::convolution_backward_data(pd), pd.scratchpad_desc()};
        p.filter = pd.weights_desc();
        p.implementation = pd.impl_info_str();
        break;
      }
      case ConvPass::BackwardFilter: {
#if DNNL_VERSION_MAJOR >= 3
        const dnnl::convolution_backward_weights::primitive_desc pd(
            engine_, algo, x_md, any, bias ? bias_md(s) : no_bias, dy_md, strides(s),
            padding(s), padding(s), fwd, attr_);
#else
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(algo, x_md, any,
                                                     bias ? bias_md(s) : no_bias, dy_md,
                                                     strides(s), padding(s), padding(s)),
            attr_, engine_, fwd);
#endif
        p.conv = {dnnl::convolution_backward_weights(pd), pd.scratchpad_desc()};
        p.filter = pd.diff_weights_desc();
        p.implementation = pd.impl_info_str();
        if (operands == Operands::F32 && gemm_backward_filter_wins(s, p.implementation)) {
          p.gemm = true;
          p.implementation = is_pointwise(s) ? kGemmBackwardFilter1x1 : kGemmBackwardFilter;
          return p;
        }
        if (operands == Operands::Bf16 && matmul_backward_filter_wins(s)) {
          p.gemm = true;
          p.implementation = is_pointwise(s) ? kMatmulBackwardFilter1x1 : kMatmulBackwardFilter;
          return p;
        }
        if (p.filter != ohwi) p.filter_reorder = reorder_between(p.filter, ohwi);
        return p;
      }
    }
    if (p.filter != ohwi) p.filter_reorder = reorder_between(ohwi, p.filter);
    return p;
  }

  Runnable reorder_between(const memory::desc& from, const memory::desc& to) const {
    const dnnl::reorder::primitive_desc pd(engine_, from, engine_, to, attr_);
    return {dnnl::reorder(pd), pd.scratchpad_desc()};
  }

  // Reorders the OHWI filter into `into` (a new buffer when null). Caller holds mutex_.
  std::shared_ptr<memory> reorder(const Primitive& p, memory& user, std::shared_ptr<memory> into) {
    if (!into) into = std::make_shared<memory>(p.filter, engine_);
    run(*p.filter_reorder, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, *into}});
    ++stats_.reorders;
    return into;
  }

  // Drops least recently used filters while the cache holds more than kMaxCachedFilterBytes
  // (always keeping the one just used). Caller holds mutex_.
  void evict_over_budget() {
    size_t bytes = 0;
    for (const auto& [key, entry] : filters_)
      if (entry.blocked) bytes += entry.blocked->get_desc().get_size();
    while (bytes > kMaxCachedFilterBytes && filters_.size() > 1) {
      auto oldest = filters_.begin();
      for (auto it = filters_.begin(); it != filters_.end(); ++it)
        if (it->second.last_use < oldest->second.last_use) oldest = it;
      if (oldest->second.blocked) bytes -= oldest->second.blocked->get_desc().get_size();
      filters_.erase(oldest);
    }
  }

  std::mutex mutex_;
  dnnl::engine engine_;
  dnnl::primitive_attr attr_;  // user scratchpad mode, for every primitive
  ScratchPool scratch_;
  std::map<Key, Primitive> primitives_;  // never erased: references to entries stay valid
  std::map<std::array<int64_t, 4>, Runnable> matmuls_;  // likewise
  std::map<std::pair<const float*, Key>, CachedFilter> filters_;
  uint64_t clock_ = 0;
  std::atomic<WeightVersion> next_version_{kUncachedWeights};
  DnnlWeightCacheStats stats_;
};

memory wrap(const memory::desc& md, const void* data) {
  return memory(md, DnnlConv::instance().engine(), const_cast<void*>(data));
}

// oneDNN reports failures as dnnl::error; turn them into kestrel::Error naming the pass and shape.
template <class F>
void checked(ConvPass pass, const Conv2dShape& s, F f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    KESTREL_FAIL("conv2d ", conv_pass_name(pass), " through oneDNN failed for input [", s.n, ", ",
                 s.h, ", ", s.w, ", ", s.c, "], filter [", s.o, ", ", s.kh, ", ", s.kw, ", ",
                 s.c, "], stride (", s.stride_h, ", ", s.stride_w, "), padding (", s.pad_h, ", ",
                 s.pad_w, "): ", e.what(), " (status ", int(e.status), ")");
  }
}

// The number of images whose im2col rows one GEMM takes: about 8 MB of im2col, but at least 2048
// rows where that fits in 32 MB (a shorter reduction ran the GEMM at 60-65 GFLOP/s against 80 with
// 1600 rows: yolov5s's 10x10 outputs, 100 rows an image), and at least one image.
int64_t gemm_images_per_piece(const Conv2dShape& s, int64_t element_bytes = sizeof(float)) {
  const int64_t per_image = s.out_h() * s.out_w(), image_bytes = per_image * s.patch() * element_bytes;
  const int64_t by_bytes = (int64_t(8) << 20) / image_bytes;
  const int64_t by_rows = std::min((int64_t(2048) + per_image - 1) / per_image, (int64_t(32) << 20) / image_bytes);
  return std::clamp<int64_t>(std::max(by_bytes, by_rows), 1, s.n);
}

// im2col of images [n0, n0 + rows / per_image): row m holds the patch output pixel m reads, in OHWI
// order (zeros where it falls in the padding).
template <class T>
void im2col_rows(const Conv2dShape& s, const T* x, int64_t n0, int64_t rows, T* col) {
  const int64_t ow = s.out_w(), per_image = s.out_h() * ow, kc = s.patch();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < rows; ++m) {
    const int64_t n = n0 + m / per_image, r = m % per_image;
    const int64_t y0 = (r / ow) * s.stride_h - s.pad_h, x0 = (r % ow) * s.stride_w - s.pad_w;
    T* dst = col + m * kc;
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j, dst += s.c) {
        const int64_t yy = y0 + i, xx = x0 + j;
        if (yy < 0 || yy >= s.h || xx < 0 || xx >= s.w)
          std::fill(dst, dst + s.c, T(0));
        else
          std::copy_n(x + ((n * s.h + yy) * s.w + xx) * s.c, s.c, dst);
      }
  }
}

// Backward-weights as GEMMs over groups of images: gemm(n0, rows, col) for each group, col its
// im2col (rows x KH*KW*C), or x itself for a pointwise convolution (one group: all images).
template <class T, class Gemm>
void backward_filter_in_pieces(const Conv2dShape& s, const T* x, Gemm&& gemm) {
  const int64_t per_image = s.out_h() * s.out_w(), kc = s.patch();
  // A pointwise convolution's x is already the (N*H*W) x C im2col matrix: one GEMM, no copy.
  const bool pointwise = is_pointwise(s);
  const int64_t chunk = pointwise ? s.n : gemm_images_per_piece(s, sizeof(T));
  std::optional<ScratchPool::Lease> lease;
  if (!pointwise) lease.emplace(DnnlConv::instance().scratch(), size_t(chunk * per_image * kc) * sizeof(T));
  for (int64_t n0 = 0; n0 < s.n; n0 += chunk) {
    const int64_t rows = std::min(chunk, s.n - n0) * per_image;
    const T* col = x;
    if (lease) {
      T* buffer = static_cast<T*>(lease->data());
      im2col_rows(s, x, n0, rows, buffer);
      col = buffer;
    }
    gemm(n0, rows, col);
  }
}

void gemm_backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) {
  const int64_t per_image = s.out_h() * s.out_w(), kc = s.patch();
  backward_filter_in_pieces(s, x, [&](int64_t n0, int64_t rows, const float* col) {
    const dnnl_status_t status = dnnl_sgemm('T', 'N', s.o, kc, rows, 1.0f, dy + n0 * per_image * s.o, s.o, col, kc,
                                            n0 == 0 ? 0.0f : 1.0f, dw, kc);
    KESTREL_CHECK(status == dnnl_success, "conv2d backward-weights: oneDNN's sgemm failed (status ",
                  int(status), ")");
  });
  if (db) conv2d_backward_bias_cpu(DType::F32, s.n * per_image, s.o, dy, db);
}

#if DNNL_VERSION_MAJOR >= 3
// gemm_backward_filter's bfloat16 twin: dW (float32) = the sum over groups of dY^T . im2col(x),
// each group's matmul adding onto the last (a sum post-op).
void matmul_backward_filter(const Conv2dShape& s, const uint16_t* x, const uint16_t* dy, float* dw) {
  DnnlConv& dnnl = DnnlConv::instance();
  const int64_t per_image = s.out_h() * s.out_w(), kc = s.patch();
  backward_filter_in_pieces(s, x, [&](int64_t n0, int64_t rows, const uint16_t* col) {
    const DnnlConv::MatmulAtB md(rows, s.o, kc);
    dnnl.run(dnnl.bf16_matmul_at_b(rows, s.o, kc, n0 > 0),
             {{DNNL_ARG_SRC, wrap(md.a_t, dy + n0 * per_image * s.o)},
              {DNNL_ARG_WEIGHTS, wrap(md.b, col)},
              {DNNL_ARG_DST, wrap(md.dst, dw)}});
  });
}
#endif

// The passes for either operand type: x and dy are float32 or bfloat16 bits as `o` says; w is
// always the float32 OHWI filter, and the results are float32 (y bfloat16 bits for Bf16InOut).
void forward(const Conv2dShape& s, Operands o, const void* x, const float* w, WeightVersion wv,
             const float* bias, void* y, ConvActivation act) {
  checked(ConvPass::Forward, s, [&] {
    DnnlConv& dnnl = DnnlConv::instance();
    const Primitive& p = dnnl.primitive(ConvPass::Forward, s, bias != nullptr, act, o);
    const std::shared_ptr<memory> filter = dnnl.filter(p, ConvPass::Forward, s, w, wv, act, o);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(src_md(s, operand_type(o)), x)},
                                         {DNNL_ARG_WEIGHTS, *filter},
                                         {DNNL_ARG_DST, wrap(dst_md(s, result_type(o)), y)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, wrap(bias_md(s), bias));
    dnnl.run(p.conv, args);
  });
}

void backward_data(const Conv2dShape& s, Operands o, const void* dy, const float* w,
                   WeightVersion wv, void* dx) {
  checked(ConvPass::BackwardData, s, [&] {
    DnnlConv& dnnl = DnnlConv::instance();
    const Primitive& p = dnnl.primitive(ConvPass::BackwardData, s, false, ConvActivation::None, o);
    const std::shared_ptr<memory> filter =
        dnnl.filter(p, ConvPass::BackwardData, s, w, wv, ConvActivation::None, o);
    dnnl.run(p.conv, {{DNNL_ARG_DIFF_DST, wrap(dst_md(s, operand_type(o)), dy)},
                     {DNNL_ARG_WEIGHTS, *filter},
                     {DNNL_ARG_DIFF_SRC, wrap(src_md(s, result_type(o)), dx)}});
  });
}

// db (float32 operands only) comes from the same pass.
void backward_filter(const Conv2dShape& s, Operands o, const void* x, const void* dy, float* dw,
                     float* db) {
  checked(ConvPass::BackwardFilter, s, [&] {
    DnnlConv& dnnl = DnnlConv::instance();
    const Primitive& p =
        dnnl.primitive(ConvPass::BackwardFilter, s, db != nullptr, ConvActivation::None, o);
    if (p.gemm && o == Operands::F32)
      return gemm_backward_filter(s, static_cast<const float*>(x), static_cast<const float*>(dy), dw, db);
#if DNNL_VERSION_MAJOR >= 3
    if (p.gemm)
      return matmul_backward_filter(s, static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(dy), dw);
#endif
    memory user = wrap(weights_md(s, tag::ohwi), dw);
    // oneDNN writes its own layout into a scratch filter, reordered into the caller's OHWI.
    memory out = p.filter_reorder ? memory(p.filter, dnnl.engine()) : user;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(src_md(s, operand_type(o)), x)},
                                         {DNNL_ARG_DIFF_DST, wrap(dst_md(s, operand_type(o)), dy)},
                                         {DNNL_ARG_DIFF_WEIGHTS, out}};
    if (db) args.emplace(DNNL_ARG_DIFF_BIAS, wrap(bias_md(s), db));
    dnnl.run(p.conv, args);
    if (p.filter_reorder) dnnl.run(*p.filter_reorder, {{DNNL_ARG_FROM, out}, {DNNL_ARG_TO, user}});
  });
}

std::string implementation(ConvPass pass, const Conv2dShape& s, Operands o) {
  std::string name;
  checked(pass, s, [&] {
    name = DnnlConv::instance().primitive(pass, s, false, ConvActivation::None, o).implementation;
  });
  return name;
}

}  // namespace

WeightVersion conv2d_dnnl_new_weight_version() { return DnnlConv::instance().new_version(); }

void conv2d_forward_dnnl(const Conv2dShape& s, const float* x, const float* w, WeightVersion wv,
                         const float* bias, float* y, ConvActivation act) {
  forward(s, Operands::F32, x, w, wv, bias, y, act);
}

void conv2d_backward_data_dnnl(const Conv2dShape& s, const float* dy, const float* w,
                               WeightVersion wv, float* dx) {
  backward_data(s, Operands::F32, dy, w, wv, dx);
}

void conv2d_backward_filter_dnnl(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                 float* db) {
  backward_filter(s, Operands::F32, x, dy, dw, db);
}

void conv2d_forward_dnnl_bf16(const Conv2dShape& s, const uint16_t* x, const float* w,
                              const float* bias, float* y) {
  forward(s, Operands::Bf16, x, w, kUncachedWeights, bias, y, ConvActivation::None);
}

void conv2d_forward_dnnl_bf16_io(const Conv2dShape& s, const uint16_t* x, const float* w, WeightVersion wv,
                                 const float* bias, uint16_t* y, ConvActivation act) {
  forward(s, Operands::Bf16InOut, x, w, wv, bias, y, act);
}

void conv2d_backward_data_dnnl_bf16(const Conv2dShape& s, const uint16_t* dy, const float* w,
                                    float* dx) {
  backward_data(s, Operands::Bf16, dy, w, kUncachedWeights, dx);
}

void conv2d_backward_data_dnnl_bf16_io(const Conv2dShape& s, const uint16_t* dy, const float* w, WeightVersion wv,
                                       uint16_t* dx) {
  backward_data(s, Operands::Bf16InOut, dy, w, wv, dx);
}

void conv2d_backward_filter_dnnl_bf16(const Conv2dShape& s, const uint16_t* x, const uint16_t* dy,
                                      float* dw) {
  backward_filter(s, Operands::Bf16, x, dy, dw, nullptr);
}

std::string conv2d_dnnl_implementation(ConvPass pass, const Conv2dShape& s) {
  return implementation(pass, s, Operands::F32);
}

std::string conv2d_dnnl_implementation_bf16(ConvPass pass, const Conv2dShape& s) {
  return implementation(pass, s, Operands::Bf16);
}

DnnlWeightCacheStats conv2d_dnnl_weight_cache_stats() { return DnnlConv::instance().stats(); }

}  // namespace kestrel::kernels
