#include "kernels/conv2d_cudnn.h"

#include <climits>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kestrel::kernels::cudnn {
namespace {

// A handle is bound to the device current at its creation and is not thread-safe, hence one per
// (device, thread); the stream is set on it before every call. Handles of exited threads go back
// to this pool for the next thread instead of being destroyed: the pool lives until the process
// ends and is never torn down, because destroying handles at exit races CUDA's own teardown.
class HandlePool {
 public:
  static HandlePool& get() {
    static HandlePool* pool = new HandlePool();
    return *pool;
  }
  cudnnHandle_t acquire(int device) {
    {
      std::lock_guard lock(mutex_);
      std::vector<cudnnHandle_t>& idle = idle_[device];
      if (!idle.empty()) {
        cudnnHandle_t h = idle.back();
        idle.pop_back();
        return h;
      }
    }
    cudnnHandle_t h = nullptr;
    KESTREL_CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }
  void release(int device, cudnnHandle_t h) {
    std::lock_guard lock(mutex_);
    idle_[device].push_back(h);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int, std::vector<cudnnHandle_t>> idle_;
};

struct ThreadHandles {
  std::unordered_map<int, cudnnHandle_t> by_device;
  ~ThreadHandles() {
    for (auto& [device, h] : by_device) HandlePool::get().release(device, h);
  }
};

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default:
      KESTREL_FAIL("conv2d on CUDA supports float32, float16 and bfloat16, got ", dtype_name(t),
                   "; cast with .to(dtype) first");
  }
}

Owned<cudnnTensorDescriptor_t> nhwc_tensor(cudnnDataType_t dt, int64_t n, int64_t h, int64_t w,
                                           int64_t c) {
  cudnnTensorDescriptor_t d = nullptr;
  KESTREL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  Owned<cudnnTensorDescriptor_t> owned(d, &cudnnDestroyTensorDescriptor);
  KESTREL_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NHWC, dt, int(n), int(c), int(h), int(w)));
  return owned;
}

Owned<cudnnFilterDescriptor_t> ohwi_filter(cudnnDataType_t dt, const Conv2dShape& s) {
  cudnnFilterDescriptor_t d = nullptr;
  KESTREL_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
  Owned<cudnnFilterDescriptor_t> owned(d, &cudnnDestroyFilterDescriptor);
  KESTREL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, dt, CUDNN_TENSOR_NHWC, int(s.o), int(s.c),
                                                 int(s.kh), int(s.kw)));
  return owned;
}

Owned<cudnnConvolutionDescriptor_t> convolution(const Conv2dShape& s, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t d = nullptr;
  KESTREL_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
  Owned<cudnnConvolutionDescriptor_t> owned(d, &cudnnDestroyConvolutionDescriptor);
  KESTREL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, int(s.pad_h), int(s.pad_w),
                                                      int(s.stride_h), int(s.stride_w), 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  KESTREL_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  return owned;
}

const Conv2dShape& within_limits(const Conv2dShape& s) {
  const int64_t elements[] = {s.n * s.h * s.w * s.c, s.n * s.out_h() * s.out_w() * s.o,
                              s.o * s.patch()};
  for (int64_t e : elements)
    KESTREL_CHECK(e <= INT_MAX, "conv2d on CUDA: a tensor of ", e,
                  " elements exceeds cuDNN's limit of 2^31 - 1; split the batch");
  return s;
}

}  // namespace

int current_device() {
  int device = 0;
  KESTREL_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

cudnnHandle_t handle(cudaStream_t stream) {
  thread_local ThreadHandles mine;
  const int device = current_device();
  auto it = mine.by_device.find(device);
  if (it == mine.by_device.end())
    it = mine.by_device.emplace(device, HandlePool::get().acquire(device)).first;
  KESTREL_CUDNN_CHECK(cudnnSetStream(it->second, stream));
  return it->second;
}

void refuse_search_during_capture(cudaStream_t stream, const char* pass) {
  if (!stream) return;  // the legacy default stream is never captured
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KESTREL_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status == cudaStreamCaptureStatusNone) return;
  // Querying a capturing stream is illegal: CUDA invalidates the capture, so capture_end cannot
  // instantiate a graph without this convolution.
  (void)cudaStreamQuery(stream);
  (void)cudaGetLastError();
  KESTREL_FAIL("conv2d on CUDA: cuDNN's algorithm search for a ", pass, " pass cannot run during "
               "a CUDA graph capture (it times candidates and synchronises); the capture is "
               "invalidated and capture_end will throw. Capture after a warm-up step so cuDNN "
               "has chosen its algorithms for every convolution shape the step runs");
}

ConvDescriptors::ConvDescriptors(DType t, const Conv2dShape& s, cudnnMathType_t math)
    // The limits are checked before any size is narrowed to int.
    : x(nhwc_tensor(data_type(t), within_limits(s).n, s.h, s.w, s.c)),
      y(nhwc_tensor(data_type(t), s.n, s.out_h(), s.out_w(), s.o)),
      w(ohwi_filter(data_type(t), s)),
      conv(convolution(s, math)) {}

}  // namespace kestrel::kernels::cudnn
