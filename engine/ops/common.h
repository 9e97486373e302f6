// Small helpers every op uses: argument checks and the stream to launch on.
#pragma once
#include <cuda_runtime.h>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "engine/tensor.h"

namespace kestrel::ops {

// Same device and dtype (and shape unless same_shape=false); the message names the op.
void check_compatible(const char* op, const Tensor& a, const Tensor& b, bool same_shape = true);

// The current stream of a device, or of t's device (nullptr on the CPU): where ops launch.
inline cudaStream_t stream_of(Device d) { return current_stream(d).handle(); }
inline cudaStream_t stream_of(const Tensor& t) { return stream_of(t.device()); }

}  // namespace kestrel::ops
