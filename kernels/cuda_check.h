// Checking macros for CUDA runtime and cuDNN calls: they name the call, file and line. (Kestrel
// calls no cuBLAS: its GEMMs are cuDNN convolutions; `kestrel env` loads cuBLAS only to say its
// version.)
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include "base/error.h"

#define KESTREL_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    cudaError_t kestrel_err_ = (call);                                                    \
    if (kestrel_err_ != cudaSuccess)                                                      \
      KESTREL_FAIL("CUDA call ", #call, " failed: ", cudaGetErrorString(kestrel_err_));   \
  } while (0)

#define KESTREL_CUDNN_CHECK(call)                                                         \
  do {                                                                                    \
    cudnnStatus_t kestrel_st_ = (call);                                                   \
    if (kestrel_st_ != CUDNN_STATUS_SUCCESS)                                              \
      KESTREL_FAIL("cuDNN call ", #call, " failed: ", cudnnGetErrorString(kestrel_st_));  \
  } while (0)

// After a kernel launch: reports bad launch configurations without synchronising.
#define KESTREL_CUDA_CHECK_LAUNCH() KESTREL_CUDA_CHECK(cudaGetLastError())
