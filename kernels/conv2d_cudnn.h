// cuDNN plumbing for the convolution: a handle per (device, thread), and the descriptors of one
// configuration (NHWC tensors; the OHWI filter is cuDNN's NHWC filter format).
#pragma once
#include <memory>
#include <type_traits>

#include "kernels/conv2d.h"
#include "kernels/cuda_check.h"

namespace kestrel::kernels::cudnn {

int current_device();

// This thread's handle for the current device, bound to `stream` (set on every call, so work
// lands on the caller's current stream, a capturing one included).
cudnnHandle_t handle(cudaStream_t stream);

// cuDNN's algorithm search times its candidates, synchronising the stream, which a CUDA graph
// capture forbids. When `stream` is being captured this invalidates the capture (so capture_end
// fails) and throws, naming the pass; returns otherwise. The convolutions themselves capture
// fine: their workspace comes from the caller (the caching allocator, a graph's pool in a capture).
void refuse_search_during_capture(cudaStream_t stream, const char* pass);

template <class H>
using Owned = std::unique_ptr<std::remove_pointer_t<H>, cudnnStatus_t (*)(H)>;

// Every data type accumulates in float (cuDNN's "pseudo half / bfloat16" configurations).
// Refuses shapes beyond the legacy API's int sizes and 32-bit tensor offsets.
struct ConvDescriptors {
  ConvDescriptors(DType t, const Conv2dShape& s, cudnnMathType_t math);
  Owned<cudnnTensorDescriptor_t> x, y;
  Owned<cudnnFilterDescriptor_t> w;
  Owned<cudnnConvolutionDescriptor_t> conv;
};

}  // namespace kestrel::kernels::cudnn
