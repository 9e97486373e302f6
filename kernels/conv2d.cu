// cuDNN convolutions: NHWC activations and OHWI filters (cuDNN's NHWC filter format). The
// algorithm of each pass, per (device, dtype, shape, stride, padding, TF32 flag, determinism),
// comes from cuDNN's heuristic ranking at a configuration's first sight and from a timed search
// on real buffers when it repeats (kernels/conv_algo_cache.h says when, and what is kept).
//
// Determinism: among the candidates the best deterministic one wins. The ones cuDNN marks
// non-deterministic (backward-filter algorithms 0 and 3, backward-data algorithm 0: they
// accumulate with atomics, so results change from run to run) are used only when cuDNN offers
// nothing else for a configuration, and Conv2dAlgo::deterministic then says so; with
// ConvMath::deterministic never, and such a configuration is an error naming its shape.
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/conv2d.h"
#include "kernels/conv2d_cudnn.h"
#include "kernels/conv_algo_cache.h"

namespace kestrel::kernels {
namespace {

// Float32 without TF32 must ask for FMA math explicitly: CUDNN_DEFAULT_MATH lets cuDNN run float
// data on TF32 tensor cores on sm_80 and newer.
bool fma_only(DType t, bool allow_tf32) { return t == DType::F32 && !allow_tf32; }
cudnnMathType_t search_math(DType t, bool allow_tf32) {
  return fma_only(t, allow_tf32) ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

const char* algo_name(ConvPass pass, int algo) {
  static const char* const fwd[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                    "fft", "fft_tiling", "winograd", "winograd_nonfused"};
  static const char* const data[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd",
                                     "winograd_nonfused"};
  static const char* const filter[] = {"algo_0",    "algo_1",           "fft",       "algo_3",
                                       "winograd", "winograd_nonfused", "fft_tiling"};
  switch (pass) {
    case ConvPass::Forward: return algo >= 0 && algo < 8 ? fwd[algo] : "unknown";
    case ConvPass::BackwardData: return algo >= 0 && algo < 6 ? data[algo] : "unknown";
    case ConvPass::BackwardFilter: return algo >= 0 && algo < 7 ? filter[algo] : "unknown";
  }
  return "unknown";
}

const char* math_name(int math) {
  switch (math) {
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_FMA_MATH: return "fma";
    default: return "default";
  }
}

// Checked as well as cuDNN's own determinism flag: these accumulate with atomics.
bool uses_atomics(ConvPass pass, int algo) {
  if (pass == ConvPass::BackwardData) return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  if (pass == ConvPass::BackwardFilter)
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  return false;
}

std::string shape_text(DType t, const Conv2dShape& s) {
  return str(dtype_name(t), " input [", s.n, ", ", s.h, ", ", s.w, ", ", s.c, "] (NHWC), ", s.o,
             " filters of ", s.kh, "x", s.kw, ", stride ", s.stride_h, "x", s.stride_w,
             ", padding ", s.pad_h, "x", s.pad_w);
}

// cuDNN returns the candidates best first (timed: fastest; ranked: its heuristic's order); take
// the first that works within `max_workspace`, deterministic if any (only deterministic ones when
// `require_deterministic`).
template <class Perf>
Conv2dAlgo choose(ConvPass pass, DType t, const Conv2dShape& s, const Perf* perf, int count,
                  bool keep_fma, bool require_deterministic, size_t max_workspace) {
  const Perf* best = nullptr;
  const int least = require_deterministic ? 1 : 0;
  for (int deterministic_only = 1; deterministic_only >= least && !best; --deterministic_only)
    for (int i = 0; i < count && !best; ++i) {
      const bool deterministic =
          perf[i].determinism == CUDNN_DETERMINISTIC && !uses_atomics(pass, int(perf[i].algo));
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= max_workspace &&
          (deterministic || !deterministic_only))
        best = &perf[i];
    }
  KESTREL_CHECK(best || !require_deterministic, "conv2d on CUDA (--deterministic): cuDNN has no ",
                "deterministic algorithm for the ", conv_pass_name(pass), " pass of the convolution ",
                "of ", shape_text(t, s), " within ", max_workspace >> 20, " MiB of workspace; ",
                "train without --deterministic, or change that layer's shape");
  KESTREL_CHECK(best, "conv2d on CUDA: cuDNN has no working algorithm for the ",
                conv_pass_name(pass), " pass of the convolution of ", shape_text(t, s),
                " (all candidates failed or needed more workspace than was offered); free "
                "device memory or change the layer's shape");
  Conv2dAlgo a;
  a.algo = int(best->algo);
  // The timed math type, except that FMA-only float32 never runs with a looser math type.
  a.math_type = keep_fma ? int(CUDNN_FMA_MATH) : int(best->mathType);
  a.workspace_bytes = best->memory;
  a.deterministic = best->determinism == CUDNN_DETERMINISTIC && !uses_atomics(pass, a.algo);
  return a;
}

size_t workspace_size(ConvPass pass, cudnnHandle_t h, const cudnn::ConvDescriptors& d,
                      int algo) {
  size_t bytes = 0;
  switch (pass) {
    case ConvPass::Forward:
      KESTREL_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
          h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), cudnnConvolutionFwdAlgo_t(algo),
          &bytes));
      break;
    case ConvPass::BackwardData:
      KESTREL_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), cudnnConvolutionBwdDataAlgo_t(algo),
          &bytes));
      break;
    case ConvPass::BackwardFilter:
      KESTREL_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
          cudnnConvolutionBwdFilterAlgo_t(algo), &bytes));
      break;
  }
  return bytes;
}

ConvAlgoKey key_of(ConvPass pass, DType t, const Conv2dShape& s, const ConvMath& m) {
  return {cudnn::current_device(), int64_t(pass), int64_t(t), fma_only(t, m.allow_tf32) ? 0 : 1,
          m.deterministic ? 1 : 0, s.n, s.h, s.w, s.c, s.o, s.kh, s.kw, s.stride_h, s.stride_w,
          s.pad_h, s.pad_w};
}

// Process-wide, like the algorithms it remembers (the key names the device); never destroyed, so
// that it outlives every thread that may still run a convolution during exit.
ConvAlgoCache& algo_cache() {
  static ConvAlgoCache* cache = new ConvAlgoCache();
  return *cache;
}

// The workspace the algorithm runs with, for the math type it will run with (the figure of the
// timed or ranked math type may differ); its name for logs.
Conv2dAlgo finish(ConvPass pass, cudnnHandle_t h, cudnn::ConvDescriptors& d, Conv2dAlgo algo) {
  KESTREL_CUDNN_CHECK(
      cudnnSetConvolutionMathType(d.conv.get(), cudnnMathType_t(algo.math_type)));
  algo.workspace_bytes = std::max(algo.workspace_bytes, workspace_size(pass, h, d, algo.algo));
  algo.name = std::string(algo_name(pass, algo.algo)) + "/" + math_name(algo.math_type);
  return algo;
}

}  // namespace

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward: return "forward";
    case ConvPass::BackwardData: return "backward-data";
    case ConvPass::BackwardFilter: return "backward-filter";
  }
  return "unknown";
}

std::optional<Conv2dAlgo> conv2d_cached_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s,
                                                  const ConvMath& m) {
  return algo_cache().find(key_of(pass, t, s, m));
}

Conv2dAlgo conv2d_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s, const ConvMath& m,
                            size_t max_workspace, const std::function<TimedChoice()>& timed_search,
                            cudaStream_t stream) {
  return algo_cache().get(
      key_of(pass, t, s, m), m.deterministic,
      [&] { return conv2d_ranked_algo_cuda(pass, t, s, m, max_workspace, stream); }, timed_search);
}

ConvAlgoStats conv2d_algo_stats() { return algo_cache().stats(); }

Conv2dAlgo conv2d_ranked_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s, const ConvMath& m,
                                   size_t max_workspace, cudaStream_t stream) {
  const bool keep_fma = fma_only(t, m.allow_tf32);
  cudnn::ConvDescriptors d(t, s, search_math(t, m.allow_tf32));
  cudnnHandle_t h = cudnn::handle(stream);
  int count = 0;
  Conv2dAlgo algo;
  switch (pass) {
    case ConvPass::Forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      KESTREL_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
          h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
          &count, perf));
      algo = choose(pass, t, s, perf, count, keep_fma, m.deterministic, max_workspace);
      break;
    }
    case ConvPass::BackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      KESTREL_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
          &count, perf));
      algo = choose(pass, t, s, perf, count, keep_fma, m.deterministic, max_workspace);
      break;
    }
    case ConvPass::BackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      KESTREL_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
          &count, perf));
      algo = choose(pass, t, s, perf, count, keep_fma, m.deterministic, max_workspace);
      break;
    }
  }
  return finish(pass, h, d, std::move(algo));
}

Conv2dAlgo conv2d_time_algo_cuda(ConvPass pass, DType t, const Conv2dShape& s, const ConvMath& m,
                                 const void* in0, const void* in1, void* out, void* scratch,
                                 size_t scratch_bytes, cudaStream_t stream) {
  cudnn::refuse_search_during_capture(stream, conv_pass_name(pass));
  const bool keep_fma = fma_only(t, m.allow_tf32);
  cudnn::ConvDescriptors d(t, s, search_math(t, m.allow_tf32));
  cudnnHandle_t h = cudnn::handle(stream);
  int count = 0;
  Conv2dAlgo algo;
  switch (pass) {
    case ConvPass::Forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      KESTREL_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
          h, d.x.get(), in0, d.w.get(), in1, d.conv.get(), d.y.get(), out,
          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf, scratch, scratch_bytes));
      algo = choose(pass, t, s, perf, count, keep_fma, m.deterministic, scratch_bytes);
      break;
    }
    case ConvPass::BackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      KESTREL_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          h, d.w.get(), in1, d.y.get(), in0, d.conv.get(), d.x.get(), out,
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf, scratch, scratch_bytes));
      algo = choose(pass, t, s, perf, count, keep_fma, m.deterministic, scratch_bytes);
      break;
    }
    case ConvPass::BackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      KESTREL_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          h, d.x.get(), in0, d.y.get(), in1, d.conv.get(), d.w.get(), out,
          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf, scratch, scratch_bytes));
      algo = choose(pass, t, s, perf, count, keep_fma, m.deterministic, scratch_bytes);
      break;
    }
  }
  return finish(pass, h, d, std::move(algo));
}

void conv2d_run_cuda(ConvPass pass, DType t, const Conv2dShape& s, const Conv2dAlgo& algo,
                     const void* in0, const void* in1, void* out, bool accumulate,
                     void* workspace, cudaStream_t stream) {
  cudnn::ConvDescriptors d(t, s, cudnnMathType_t(algo.math_type));
  cudnnHandle_t h = cudnn::handle(stream);
  // out = one * result + beta * out, in float (the type of the factors for float, half and
  // bfloat16 data).
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  switch (pass) {
    case ConvPass::Forward:
      KESTREL_CUDNN_CHECK(cudnnConvolutionForward(
          h, &one, d.x.get(), in0, d.w.get(), in1, d.conv.get(),
          cudnnConvolutionFwdAlgo_t(algo.algo), workspace, algo.workspace_bytes, &beta, d.y.get(),
          out));
      break;
    case ConvPass::BackwardData:
      KESTREL_CUDNN_CHECK(cudnnConvolutionBackwardData(
          h, &one, d.w.get(), in1, d.y.get(), in0, d.conv.get(),
          cudnnConvolutionBwdDataAlgo_t(algo.algo), workspace, algo.workspace_bytes, &beta,
          d.x.get(), out));
      break;
    case ConvPass::BackwardFilter:
      KESTREL_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
          h, &one, d.x.get(), in0, d.y.get(), in1, d.conv.get(),
          cudnnConvolutionBwdFilterAlgo_t(algo.algo), workspace, algo.workspace_bytes, &beta,
          d.w.get(), out));
      break;
  }
}

}  // namespace kestrel::kernels
