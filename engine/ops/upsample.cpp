#include "engine/ops/upsample.h"

#include "engine/profiler.h"
#include "engine/ops/common.h"
#include "kernels/upsample.h"

namespace kestrel::ops {
namespace {

kernels::Upsample2xShape geometry(const Shape& nhwc) {
  return {nhwc[0], nhwc[1], nhwc[2], nhwc[3]};
}

struct Upsample2xBackward : autograd::Node {
  Shape input_shape;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    Tensor dy = g[0].contiguous();
    Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device());
    launch(
        dy.device(),
        [&] {
          kernels::upsample2x_backward_cpu(dy.dtype(), dy.data_ptr(), dx.data_ptr(),
                                           geometry(input_shape));
        },
        [&](cudaStream_t s) {
          kernels::upsample2x_backward_cuda(dy.dtype(), dy.data_ptr(), dx.data_ptr(),
                                            geometry(input_shape), s);
        });
    return {dx};
  }
  std::string name() const override { return "Upsample2xBackward"; }
};

}  // namespace

Tensor upsample_nearest2x(const Tensor& x_) {
  const profiler::Scope timed("Upsample2x", profiler::Phase::Forward);
  KESTREL_CHECK(x_.defined(), "upsample_nearest2x: undefined input");
  KESTREL_CHECK(x_.dim() == 4, "upsample_nearest2x: expects an NHWC tensor [N, H, W, C], got ",
                x_.describe(), "; convert NCHW data with ops::nchw_to_nhwc");
  Tensor x = x_.contiguous();
  const Shape& s = x.shape();
  Tensor y = Tensor::empty({s[0], 2 * s[1], 2 * s[2], s[3]}, x.dtype(), x.device());
  launch(
      x.device(),
      [&] { kernels::upsample2x_forward_cpu(x.element_size(), x.data_ptr(), y.data_ptr(), geometry(s)); },
      [&](cudaStream_t stream) {
        kernels::upsample2x_forward_cuda(x.element_size(), x.data_ptr(), y.data_ptr(), geometry(s),
                                         stream);
      });
  if (auto node = autograd::make_node<Upsample2xBackward>({&x_})) {
    node->input_shape = s;
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace kestrel::ops
