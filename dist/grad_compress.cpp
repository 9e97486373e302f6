#include "dist/grad_compress.h"

#include "engine/ops/launch.h"
#include "base/error.h"
#include "kernels/grad_compress.h"

namespace kestrel::dist {
namespace {

void check_pair(const Tensor& grad, const Tensor& wire, const char* what) {
  KESTREL_CHECK(grad.defined() && wire.defined() && grad.dtype() == DType::F32 &&
                    (wire.dtype() == DType::F16 || wire.dtype() == DType::BF16) &&
                    grad.numel() == wire.numel() && grad.device() == wire.device() &&
                    grad.is_contiguous() && wire.is_contiguous(),
                what, ": needs a contiguous f32 gradient and an f16/bf16 buffer of the same size "
                "on one device, got ", grad.defined() ? grad.describe() : std::string("undefined"),
                " and ", wire.defined() ? wire.describe() : std::string("undefined"));
}

}  // namespace

std::optional<GradCompress> parse_grad_compress(const std::string& text) {
  if (text == "none") return GradCompress::None;
  if (text == "fp16" || text == "f16" || text == "float16") return GradCompress::F16;
  if (text == "bf16" || text == "bfloat16") return GradCompress::BF16;
  return std::nullopt;
}

std::string grad_compress_name(GradCompress c) {
  return c == GradCompress::F16 ? "fp16" : c == GradCompress::BF16 ? "bf16" : "none";
}

DType grad_compress_dtype(GradCompress c) {
  return c == GradCompress::F16 ? DType::F16 : c == GradCompress::BF16 ? DType::BF16 : DType::F32;
}

void compress_gradients(const Tensor& grad, const Tensor& wire, int world) {
  check_pair(grad, wire, "compress_gradients");
  ops::launch(
      grad.device(),
      [&] {
        kernels::grad_compress_cpu(grad.data<float>(), wire.data_ptr(), wire.dtype(), grad.numel(),
                                   world);
      },
      [&](cudaStream_t s) {
        kernels::grad_compress_cuda(grad.data<float>(), wire.data_ptr(), wire.dtype(),
                                    grad.numel(), world, s);
      });
}

void decompress_gradients(const Tensor& wire, const Tensor& grad) {
  check_pair(grad, wire, "decompress_gradients");
  ops::launch(
      grad.device(),
      [&] {
        kernels::grad_decompress_cpu(wire.data_ptr(), wire.dtype(), grad.data<float>(),
                                     grad.numel());
      },
      [&](cudaStream_t s) {
        kernels::grad_decompress_cuda(wire.data_ptr(), wire.dtype(), grad.data<float>(),
                                      grad.numel(), s);
      });
}

}  // namespace kestrel::dist
