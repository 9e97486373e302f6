// `--grad-compress fp16|bf16`: the Reducer all-reduces each fp32 gradient bucket in a 16-bit type
// and widens the result back, halving the bytes on the wire (PyTorch DDP's fp16_compress_hook and
// bf16_compress_hook; the arithmetic and its overflow behaviour are in kernels/grad_compress.h).
#pragma once
#include <optional>
#include <string>

#include "engine/tensor.h"

namespace kestrel::dist {

enum class GradCompress { None, F16, BF16 };

// "none", "fp16" or "bf16" (also "f16", "float16", "bfloat16"); nothing for other text.
std::optional<GradCompress> parse_grad_compress(const std::string& text);
std::string grad_compress_name(GradCompress c);  // "none", "fp16", "bf16"
DType grad_compress_dtype(GradCompress c);       // F16 or BF16 (F32 for None)

// wire = compress(grad) with the division by world folded in; both contiguous, same device and
// numel, grad F32, wire F16 or BF16. CUDA: enqueued on the current stream.
void compress_gradients(const Tensor& grad, const Tensor& wire, int world);
// grad = float(wire), the all-reduced sum.
void decompress_gradients(const Tensor& wire, const Tensor& grad);

}  // namespace kestrel::dist
