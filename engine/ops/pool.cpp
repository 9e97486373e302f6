#include "engine/ops/pool.h"

#include "engine/profiler.h"
#include "engine/ops/common.h"
#include "kernels/maxpool.h"

namespace kestrel::ops {
namespace {

struct MaxPool2dBackward : autograd::Node {
  kernels::PoolShape geometry;
  autograd::SavedTensor window;  // u8 [N, OH, OW, C]: each output's argmax within its window
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor dy = g[0].contiguous();
    Tensor w = window.unpack();
    const auto& s = geometry;
    Tensor dx = Tensor::empty({s.n, s.h, s.w, s.c}, dy.dtype(), dy.device());
    launch(
        dy.device(),
        [&] {
          kernels::maxpool2d_backward_cpu(dy.dtype(), dy.data_ptr(), w.data<uint8_t>(),
                                          dx.data_ptr(), s);
        },
        [&](cudaStream_t stream) {
          kernels::maxpool2d_backward_cuda(dy.dtype(), dy.data_ptr(), w.data<uint8_t>(),
                                           dx.data_ptr(), s, stream);
        });
    return {dx};
  }
  void release_saved() override { window.release(); }
  std::string name() const override { return "MaxPool2dBackward"; }
};

kernels::PoolShape checked_geometry(const Tensor& x, int64_t kernel, int64_t stride,
                                    int64_t padding) {
  KESTREL_CHECK(x.defined(), "max_pool2d: undefined input");
  KESTREL_CHECK(x.dim() == 4, "max_pool2d: expects an NHWC tensor [N, H, W, C], got ", x.describe(),
                "; convert NCHW data with ops::nchw_to_nhwc");
  KESTREL_CHECK(kernel >= 1 && kernel <= kernels::kMaxPoolKernelLimit, "max_pool2d: kernel ",
                kernel, " unsupported; use a window of 1 to ", kernels::kMaxPoolKernelLimit);
  KESTREL_CHECK(stride >= 1, "max_pool2d: stride must be at least 1, got ", stride);
  KESTREL_CHECK(padding >= 0 && padding <= kernel / 2, "max_pool2d: padding ", padding,
                " with kernel ", kernel, " unsupported; padding must lie in [0, kernel / 2] = [0, ",
                kernel / 2, "] so that every window overlaps the input");
  const Shape& s = x.shape();
  KESTREL_CHECK(s[1] + 2 * padding >= kernel && s[2] + 2 * padding >= kernel,
                "max_pool2d: ", x.describe(), " is smaller than the ", kernel, "x", kernel,
                " window even with padding ", padding, "; use a smaller kernel or more padding");
  kernels::PoolShape g;
  g.n = s[0];
  g.h = s[1];
  g.w = s[2];
  g.c = s[3];
  g.kernel = kernel;
  g.stride = stride;
  g.pad = padding;
  g.out_h = kernels::pool_out_size(g.h, kernel, stride, padding);
  g.out_w = kernels::pool_out_size(g.w, kernel, stride, padding);
  return g;
}

}  // namespace

Tensor max_pool2d(const Tensor& x_, int64_t kernel, int64_t stride, int64_t padding) {
  const profiler::Scope timed("MaxPool2d", profiler::Phase::Forward);
  const kernels::PoolShape g = checked_geometry(x_, kernel, stride, padding);
  Tensor x = x_.contiguous();
  Tensor y = Tensor::empty({g.n, g.out_h, g.out_w, g.c}, x.dtype(), x.device());
  // The window indices are only worth writing when a backward will read them.
  Tensor window;
  if (autograd::needs_grad({&x_})) window = Tensor::empty(y.shape(), DType::U8, x.device());
  uint8_t* window_ptr = window.defined() ? window.data<uint8_t>() : nullptr;
  launch(
      x.device(), [&] { kernels::maxpool2d_forward_cpu(x.dtype(), x.data_ptr(), y.data_ptr(), window_ptr, g); },
      [&](cudaStream_t s) {
        kernels::maxpool2d_forward_cuda(x.dtype(), x.data_ptr(), y.data_ptr(), window_ptr, g, s);
      });
  if (auto node = autograd::make_node<MaxPool2dBackward>({&x_})) {
    node->geometry = g;
    node->window = autograd::SavedTensor(window);
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace kestrel::ops
