#include "engine/ops/layout.h"

#include "engine/profiler.h"
#include "engine/ops/common.h"
#include "kernels/layout.h"

namespace kestrel::ops {
namespace {

// Per image a [rows, cols] matrix becomes [cols, rows]: NCHW -> NHWC has rows = C, cols = H * W.
Tensor transpose_images(const Tensor& x_, const Shape& out_shape, int64_t rows, int64_t cols) {
  Tensor x = x_.contiguous();
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  const kernels::TransposeShape s{x.size(0), rows, cols};
  launch(
      x.device(), [&] { kernels::transpose_batched_cpu(x.element_size(), x.data_ptr(), y.data_ptr(), s); },
      [&](cudaStream_t stream) {
        kernels::transpose_batched_cuda(x.element_size(), x.data_ptr(), y.data_ptr(), s, stream);
      });
  return y;
}

Tensor to_nhwc_raw(const Tensor& x) {
  const Shape& s = x.shape();
  return transpose_images(x, {s[0], s[2], s[3], s[1]}, s[1], s[2] * s[3]);
}

Tensor to_nchw_raw(const Tensor& x) {
  const Shape& s = x.shape();
  return transpose_images(x, {s[0], s[3], s[1], s[2]}, s[1] * s[2], s[3]);
}

struct LayoutBackward : autograd::Node {
  bool to_nhwc = true;  // direction of the forward
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    return {to_nhwc ? to_nchw_raw(g[0]) : to_nhwc_raw(g[0])};
  }
  std::string name() const override {
    return to_nhwc ? "NchwToNhwcBackward" : "NhwcToNchwBackward";
  }
};

void check_4d(const char* op, const char* layout, const Tensor& x) {
  KESTREL_CHECK(x.defined(), op, ": undefined input");
  KESTREL_CHECK(x.dim() == 4, op, ": expects a 4-d ", layout, " tensor, got ", x.describe());
}

Tensor convert(const Tensor& x, bool to_nhwc) {
  Tensor y = to_nhwc ? to_nhwc_raw(x) : to_nchw_raw(x);
  if (auto node = autograd::make_node<LayoutBackward>({&x})) {
    node->to_nhwc = to_nhwc;
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor nchw_to_nhwc(const Tensor& x) {
  check_4d("nchw_to_nhwc", "[N, C, H, W]", x);
  return convert(x, true);
}

Tensor nhwc_to_nchw(const Tensor& x) {
  check_4d("nhwc_to_nchw", "[N, H, W, C]", x);
  return convert(x, false);
}

Tensor images_to_input(const Tensor& images_, DType dtype, double scale) {
  const profiler::Scope timed("ImagesToInput", profiler::Phase::Forward);
  check_4d("images_to_input", "u8 NHWC [N, H, W, C]", images_);
  KESTREL_CHECK(images_.dtype() == DType::U8, "images_to_input: expects uint8 images, got ",
                images_.describe(), "; float images only need a multiply (ops::mul)");
  KESTREL_CHECK(is_floating(dtype), "images_to_input: output dtype must be floating point, got ",
                dtype_name(dtype));
  Tensor images = images_.contiguous();
  Tensor out = Tensor::empty(images.shape(), dtype, images.device());
  launch(
      images.device(),
      [&] {
        kernels::images_to_input_cpu(images.data<uint8_t>(), dtype, out.data_ptr(), images.numel(),
                                     scale);
      },
      [&](cudaStream_t s) {
        kernels::images_to_input_cuda(images.data<uint8_t>(), dtype, out.data_ptr(),
                                      images.numel(), scale, s);
      });
  return out;
}

}  // namespace kestrel::ops
