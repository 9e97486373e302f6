// conv2d on CUDA (cuDNN) against the CPU reference: forward and all three gradients, at YOLOv5s
// layer configurations, in float32, bfloat16 and float16.
//
// Both sides see the same inputs: values are rounded to the dtype under test once, and the CPU
// computes in float64 from those rounded values, so the only differences are CUDA's arithmetic.
// Each result is checked two ways:
//   - per element, |cuda - ref| <= rel * |ref| + mag_tol * mag, where mag is the same pass run on
//     absolute values (|x| * |w| for the forward pass, plus |bias|): the size of the terms an
//     output sums, which bounds the accumulation error even where the terms cancel;
//   - overall, rms(cuda - ref) / rms(ref) <= rms_tol, which pins the precision actually delivered.
// Tolerances (u = unit roundoff of the storage type: 2^-24 float, 2^-8 bfloat16, 2^-11 float16):
//   float32  rel 0, mag_tol 1e-5, rms_tol 1e-4. Float accumulation errs by a few u * mag
//            whatever the summation order (OpenBLAS's sgemm on these layers: at most 3.3e-7 mag,
//            3e-7 rms), so 1e-5 leaves a wide margin for cuDNN's algorithms, Winograd transforms
//            included. The rms bound proves TF32 is off: TF32 rounds inputs to 11 significant
//            bits, a random error per product that survives summation (emulated on these layers:
//            2.6e-4 rms), while float32 sums stay below ~1.3e-5 rms even for the 102400-term
//            weight gradient of layer 0 summed serially.
//   bf16 / float16  rel 2u, mag_tol 2^-12, rms_tol 2u. The result is rounded once to the storage
//            type (<= u |ref|, rms ~u/sqrt(3)); products of half inputs are exact in float and are
//            accumulated in float, so mag_tol is far above the accumulation error and only
//            tolerates an algorithm that keeps some partial result in reduced precision.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/allocator.h"
#include "engine/ops/conv.h"
#include "kernels/conv_algo_cache.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::random_tensor;

namespace {

struct Layer {
  const char* name;
  Shape x;  // NHWC
  int64_t o, k, stride, pad;
  bool bias;
};

// YOLOv5s configurations (batch and image reduced where the float64 CPU reference would be slow).
const Layer kLayers[] = {
    {"stem_6x6s2_640", {1, 640, 640, 3}, 32, 6, 2, 2, true},  // layer 0 at full size
    {"conv_3x3s2_32to64", {2, 96, 96, 32}, 64, 3, 2, 1, true},        // layer 1
    {"c3_1x1_128to128", {2, 40, 40, 128}, 128, 1, 1, 0, true},        // C3 cv3 at P3
    {"conv_3x3s2_256to512_40", {1, 40, 40, 256}, 512, 3, 2, 1, true},  // layer 7, full size
    {"bottleneck_3x3_256_20", {2, 20, 20, 256}, 256, 3, 1, 1, false},  // C3 at P5, full size
    {"detect_1x1_128to255", {2, 20, 20, 128}, 255, 1, 1, 0, true},     // Detect: O = 3 * 85
    {"odd_3x3s2", {3, 13, 11, 5}, 7, 3, 2, 1, true},
};

void PrintTo(const Layer& l, std::ostream* os) { *os << l.name; }

struct Tolerance {
  double rel, mag, rms;
};

Tolerance tolerance(DType t) {
  switch (t) {
    case DType::BF16: return {std::ldexp(1.0, -7), std::ldexp(1.0, -12), std::ldexp(1.0, -7)};
    case DType::F16: return {std::ldexp(1.0, -10), std::ldexp(1.0, -12), std::ldexp(1.0, -10)};
    default: return {0.0, 1e-5, 1e-4};
  }
}

ops::Conv2dParams params_of(const Layer& l) {
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = l.stride;
  p.pad_h = p.pad_w = l.pad;
  return p;
}

Tensor abs_of(const Tensor& t) {
  std::vector<double> v = t.to_double_vector();
  for (double& e : v) e = std::abs(e);
  return Tensor::from_vector(v, t.shape());
}

::testing::AssertionResult matches(const char* what, const Tensor& got, const Tensor& ref,
                                   const Tensor& mag, const Tolerance& tol) {
  if (!got.defined() || got.shape() != ref.shape())
    return ::testing::AssertionFailure()
           << what << ": got " << (got.defined() ? got.describe() : "nothing") << ", expected "
           << ref.describe();
  const std::vector<double> g = got.to_double_vector(), r = ref.to_double_vector(),
                            m = mag.to_double_vector();
  double err2 = 0, ref2 = 0, worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = std::abs(g[i] - r[i]);
    err2 += e * e;
    ref2 += r[i] * r[i];
    const double excess = std::isfinite(g[i]) ? e / (tol.rel * std::abs(r[i]) + tol.mag * m[i])
                                              : INFINITY;
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  const double rms = std::sqrt(err2 / std::max(ref2, 1e-300));
  if (worst > 1 || rms > tol.rms)
    return ::testing::AssertionFailure()
           << what << ": element " << worst_i << " of " << g.size() << " is " << g[worst_i]
           << " vs " << r[worst_i] << " (magnitude " << m[worst_i] << ", " << worst
           << " x its bound); relative rms error " << rms << " (bound " << tol.rms << ")";
  return ::testing::AssertionSuccess();
}

class Conv2dCuda : public ::testing::TestWithParam<std::tuple<Layer, DType>> {};

TEST_P(Conv2dCuda, ForwardAndGradientsMatchCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const auto& [layer, dtype] = GetParam();
  const Device gpu = Device::cuda(0);
  const ops::Conv2dParams p = params_of(layer);
  const Shape w_shape{layer.o, layer.k, layer.k, layer.x[3]};
  const int64_t oh = (layer.x[1] + 2 * layer.pad - layer.k) / layer.stride + 1;
  const int64_t ow = (layer.x[2] + 2 * layer.pad - layer.k) / layer.stride + 1;
  const Shape y_shape{layer.x[0], oh, ow, layer.o};

  // Inputs rounded to the dtype under test; the reference reads the same rounded values.
  Tensor x = random_tensor(layer.x, 1, DType::F32).to(dtype);
  Tensor w = random_tensor(w_shape, 2, DType::F32).to(dtype);
  Tensor b = layer.bias ? random_tensor({layer.o}, 3, DType::F32).to(dtype) : Tensor();
  Tensor dy = random_tensor(y_shape, 4, DType::F32).to(dtype);
  const Tensor x64 = x.to(DType::F64), w64 = w.to(DType::F64), dy64 = dy.to(DType::F64);
  const Tensor b64 = layer.bias ? b.to(DType::F64) : Tensor();

  const Tensor y_ref = ops::conv2d(x64, w64, b64, p);
  const Tensor dx_ref = ops::conv2d_backward_data(dy64, w64, layer.x, p);
  const Tensor dw_ref = ops::conv2d_backward_filter(x64, dy64, w_shape, p);
  const Tensor ax = abs_of(x64), aw = abs_of(w64), ady = abs_of(dy64);
  const Tensor y_mag = ops::conv2d(ax, aw, layer.bias ? abs_of(b64) : Tensor(), p);
  const Tensor dx_mag = ops::conv2d_backward_data(ady, aw, layer.x, p);
  const Tensor dw_mag = ops::conv2d_backward_filter(ax, ady, w_shape, p);

  Tensor xg = x.to(gpu).set_requires_grad(), wg = w.to(gpu).set_requires_grad();
  Tensor bg = layer.bias ? b.to(gpu).set_requires_grad() : Tensor();
  Tensor y = ops::conv2d(xg, wg, bg, p);
  y.backward(dy.to(gpu));

  const Tolerance tol = tolerance(dtype);
  EXPECT_TRUE(matches("forward", y, y_ref, y_mag, tol));
  EXPECT_TRUE(matches("input gradient", xg.grad(), dx_ref, dx_mag, tol));
  EXPECT_TRUE(matches("weight gradient", wg.grad(), dw_ref, dw_mag, tol));
  if (layer.bias) {
    EXPECT_TRUE(matches("bias gradient", bg.grad(), ops::conv2d_backward_bias(dy64),
                        ops::conv2d_backward_bias(ady), tol));
  }
  for (auto pass : {kernels::ConvPass::Forward, kernels::ConvPass::BackwardData,
                    kernels::ConvPass::BackwardFilter}) {
    const std::string algo = ops::conv2d_algorithm(pass, xg, wg, p);
    EXPECT_FALSE(algo.empty()) << kernels::conv_pass_name(pass);
    if (dtype == DType::F32) {
      EXPECT_TRUE(algo.ends_with("/fma")) << algo;
    }
    std::printf("[ algo     ] %s %s %s: %s\n", layer.name, dtype_name(dtype),
                kernels::conv_pass_name(pass), algo.c_str());
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Layer, DType>>& info) {
  return str(std::get<0>(info.param).name, "_", dtype_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(YoloV5s, Conv2dCuda,
                         ::testing::Combine(::testing::ValuesIn(kLayers),
                                            ::testing::Values(DType::F32, DType::BF16,
                                                              DType::F16)),
                         case_name);

// One training step's convolution work, twice: the second finds its algorithms cached and every
// buffer (outputs, workspaces, bias partials) recycled by the caching allocator. Also, with only
// deterministic algorithms chosen, both steps give the same bits.
TEST(Conv2dCudaSteadyState, SecondIdenticalStepAllocatesNothingAndRepeatsBitwise) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  Tensor x = random_tensor({4, 64, 64, 32}, 5, DType::F32).to(DType::BF16).to(gpu);
  Tensor w = random_tensor({64, 3, 3, 32}, 6, DType::F32).to(DType::BF16).to(gpu);
  Tensor b = random_tensor({64}, 7, DType::F32).to(DType::BF16).to(gpu);
  Tensor dy = random_tensor({4, 32, 32, 64}, 8, DType::F32).to(DType::BF16).to(gpu);
  x.set_requires_grad();
  w.set_requires_grad();
  b.set_requires_grad();
  auto step = [&] {
    for (const Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    Tensor y = ops::conv2d(x, w, b, p);
    y.backward(dy);
    current_stream(gpu).synchronize();
    return std::vector<std::vector<double>>{y.to_double_vector(), x.grad().to_double_vector(),
                                            w.grad().to_double_vector(),
                                            b.grad().to_double_vector()};
  };
  step();  // a first sight runs cuDNN's ranked choice; the second, timed search keeps its result
  const auto first = step();
  const size_t raw_allocs = allocator_stats(gpu).raw_allocs;
  const auto second = step();
  EXPECT_EQ(allocator_stats(gpu).raw_allocs, raw_allocs);
  const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], second[i]) << names[i];
  for (auto pass : {kernels::ConvPass::Forward, kernels::ConvPass::BackwardData,
                    kernels::ConvPass::BackwardFilter}) {
    kernels::Conv2dShape s{.n = 4, .h = 64, .w = 64, .c = 32, .o = 64, .kh = 3, .kw = 3,
                           .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
    std::optional<kernels::Conv2dAlgo> algo =
        kernels::conv2d_cached_algo_cuda(pass, DType::BF16, s, kernels::ConvMath{});
    ASSERT_TRUE(algo.has_value()) << kernels::conv_pass_name(pass);
    EXPECT_TRUE(algo->deterministic) << kernels::conv_pass_name(pass) << ": " << algo->name;
  }
}

// Views that start one element into their storage (not 16-byte aligned) give the same bits as
// aligned copies: conv2d realigns them rather than handing cuDNN an address its cached algorithm
// may not support.
TEST(Conv2dCudaLayout, MisalignedViewsMatchAlignedTensors) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  const Shape x_shape{2, 16, 16, 64}, w_shape{64, 3, 3, 64};
  auto shifted = [&](const Shape& shape, uint64_t seed) {
    Tensor flat = random_tensor({shape_numel(shape) + 1}, seed, DType::F32).to(DType::BF16);
    return flat.to(gpu).slice(0, 1, shape_numel(shape) + 1).reshape(shape);
  };
  Tensor x = shifted(x_shape, 11), w = shifted(w_shape, 12);
  ASSERT_NE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16, 0u);
  EXPECT_EQ(ops::conv2d(x, w, Tensor(), p).to_double_vector(),
            ops::conv2d(x.clone(), w.clone(), Tensor(), p).to_double_vector());
}

// allow_tf32 reaches cuDNN: float32 then carries TF32's input rounding (11 significant bits,
// ~3e-4 rms relative error), well inside 2^-9, and never worse than bfloat16's tolerance.
TEST(Conv2dCudaTf32, AllowTf32StaysWithinTf32Precision) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  p.allow_tf32 = true;
  Tensor x = random_tensor({2, 20, 20, 64}, 9, DType::F32);
  Tensor w = random_tensor({64, 3, 3, 64}, 10, DType::F32);
  const Tensor x64 = x.to(DType::F64), w64 = w.to(DType::F64);
  const Tensor ref = ops::conv2d(x64, w64, Tensor(), p);
  const Tensor mag = ops::conv2d(abs_of(x64), abs_of(w64), Tensor(), p);
  const Tensor y = ops::conv2d(x.to(gpu), w.to(gpu), Tensor(), p);
  EXPECT_TRUE(matches("tf32 forward", y, ref, mag,
                      {0.0, std::ldexp(1.0, -9), std::ldexp(1.0, -9)}));
}

// cuDNN counts elements in int: a tensor of 2^31 of them (one channel, a large batch: 4 GiB in
// float16) is refused by name, with the way out, before cuDNN sees it.
TEST(Conv2dCudaLimits, TensorsPastCudnnsIntLimitAreRefusedClearly) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Tensor x = Tensor::empty({32768, 256, 256, 1}, DType::F16, gpu);
  const Tensor w = Tensor::zeros({1, 1, 1, 1}, DType::F16, gpu);
  const std::string e = kestrel::testing::error_of([&] { ops::conv2d(x, w, Tensor(), ops::Conv2dParams{}); });
  EXPECT_NE(e.find("2147483648 elements"), std::string::npos) << e;
  EXPECT_NE(e.find("split the batch"), std::string::npos) << e;
}

// --deterministic on every YOLOv5s configuration above, in float32, float16 and bfloat16: each
// pass runs a deterministic algorithm, chosen by cuDNN's ranking without a single timed search,
// also when the device's memory is nearly all taken (then too the choice is deterministic or the
// run fails naming the layer; it never falls back to atomics).
TEST(Conv2dCudaDeterministic, EveryYolov5sShapeRunsDeterministicAlgorithmsWithoutTiming) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  auto run_all = [&](const char* when) {
    const int64_t timed_before = kernels::conv2d_algo_stats().timed;
    for (const Layer& l : kLayers)
      for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        SCOPED_TRACE(std::string(when) + " " + l.name + " " + dtype_name(t));
        ops::Conv2dParams p = params_of(l);
        p.deterministic = true;
        Tensor x = random_tensor(l.x, 1, DType::F32).to(t).to(gpu);
        Tensor w = random_tensor({l.o, l.k, l.k, l.x[3]}, 2, DType::F32).to(t).to(gpu);
        x.set_requires_grad();
        w.set_requires_grad();
        for (int step = 0; step < 2; ++step) {  // a repeat would be timed without --deterministic
          Tensor y = ops::conv2d(x, w, Tensor(), p);
          y.backward(Tensor::ones(y.shape(), t, gpu));
        }
        const kernels::Conv2dShape s{.n = l.x[0], .h = l.x[1], .w = l.x[2], .c = l.x[3], .o = l.o,
                                     .kh = l.k, .kw = l.k, .stride_h = l.stride,
                                     .stride_w = l.stride, .pad_h = l.pad, .pad_w = l.pad};
        for (auto pass : {kernels::ConvPass::Forward, kernels::ConvPass::BackwardData,
                          kernels::ConvPass::BackwardFilter}) {
          const auto algo = kernels::conv2d_cached_algo_cuda(pass, t, s, kernels::ConvMath{false, true});
          ASSERT_TRUE(algo.has_value()) << kernels::conv_pass_name(pass);
          EXPECT_TRUE(algo->deterministic) << kernels::conv_pass_name(pass) << ": " << algo->name;
        }
      }
    EXPECT_EQ(kernels::conv2d_algo_stats().timed, timed_before) << when;
  };
  run_all("with memory free");
  // Nearly full: all but 1 GiB of the device's free memory taken, caches emptied first.
  allocator_empty_cache(gpu);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  const size_t keep = size_t(1) << 30;
  Tensor ballast;
  if (free_bytes > keep) ballast = Tensor::empty({int64_t(free_bytes - keep)}, DType::U8, gpu);
  run_all("with the allocator nearly full");
}

// A rectangular validation brings a new batch shape almost every batch: each new shape takes
// cuDNN's ranking, and no timed search runs for shapes seen once; a training shape that repeats
// is timed once.
TEST(Conv2dCudaAlgoChoice, ShapesSeenOnceAreNeverTimedRepeatsOnce) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Tensor w = random_tensor({32, 3, 3, 16}, 3, DType::F32).to(DType::BF16).to(gpu);
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  const int64_t timed_before = kernels::conv2d_algo_stats().timed;
  for (int64_t h = 32; h < 32 + 20 * 8; h += 8) {  // 20 letterboxed heights, each seen once
    Tensor x = random_tensor({4, h, 64, 16}, h, DType::F32).to(DType::BF16).to(gpu);
    ops::conv2d(x, w, Tensor(), p);
  }
  EXPECT_EQ(kernels::conv2d_algo_stats().timed, timed_before);
  const Tensor x = random_tensor({4, 48, 48, 16}, 5, DType::F32).to(DType::BF16).to(gpu);
  for (int step = 0; step < 5; ++step) ops::conv2d(x, w, Tensor(), p);
  EXPECT_EQ(kernels::conv2d_algo_stats().timed, timed_before + 1);
}

}  // namespace
