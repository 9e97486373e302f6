#include "yolo/common/version.h"

#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <nccl.h>
#include <omp.h>

#include <opencv2/core/version.hpp>

#include "base/error.h"
#include "kestrel_version.h"

namespace kestrel::yolo {

std::string version_text() {
  return str("kestrel ", KESTREL_VERSION, " (commit ", KESTREL_GIT_COMMIT, ")\nbuilt with CUDA ", CUDART_VERSION / 1000, ".",
             (CUDART_VERSION % 1000) / 10, ", cuDNN ", CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL, ", NCCL ",
             NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, ", oneDNN ", KESTREL_ONEDNN_VERSION, ", OpenCV ", CV_VERSION,
             "\n");
}

std::string startup_line(Device device) {
  std::string where;
  if (device.is_cuda()) {
    cudaDeviceProp p{};
    const bool known = cudaGetDeviceProperties(&p, device.index) == cudaSuccess;
    where = str("CUDA:", device.index, " (", known ? p.name : "unknown GPU", ", ",
                known ? static_cast<long long>(p.totalGlobalMem >> 20) : 0LL, "MiB)");
  } else {
    where = str("CPU (", omp_get_max_threads(), " threads)");
  }
  return str("Kestrel 🚀 ", KESTREL_VERSION, "-g", KESTREL_GIT_COMMIT, " C++20 ", where);
}

}  // namespace kestrel::yolo
