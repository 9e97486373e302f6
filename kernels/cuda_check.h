// Checking macros for CUDA runtime, cuBLAS and cuDNN calls: they name the call, file and line.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "base/error.h"

#define KESTREL_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    cudaError_t kestrel_err_ = (call);                                                    \
    if (kestrel_err_ != cudaSuccess)                                                      \
      KESTREL_FAIL("CUDA call ", #call, " failed: ", cudaGetErrorString(kestrel_err_));   \
  } while (0)

#define KESTREL_CUBLAS_CHECK(call)                                                        \
  do {                                                                                    \
    cublasStatus_t kestrel_st_ = (call);                                                  \
    if (kestrel_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      KESTREL_FAIL("cuBLAS call ", #call, " failed: ", cublasGetStatusString(kestrel_st_)); \
  } while (0)

#define KESTREL_CUDNN_CHECK(call)                                                         \
  do {                                                                                    \
    cudnnStatus_t kestrel_st_ = (call);                                                   \
    if (kestrel_st_ != CUDNN_STATUS_SUCCESS)                                              \
      KESTREL_FAIL("cuDNN call ", #call, " failed: ", cudnnGetErrorString(kestrel_st_));  \
  } while (0)

// After a kernel launch: reports bad launch configurations without synchronising.
#define KESTREL_CUDA_CHECK_LAUNCH() KESTREL_CUDA_CHECK(cudaGetLastError())
