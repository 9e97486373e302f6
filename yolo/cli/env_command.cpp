// `kestrel env`: the CUDA stack this binary finds at run time (cuBLAS, which it does not link,
// loaded to say its version), beside the versions it was built
// against, and the devices it sees. The first thing to read on a new GPU machine: a cuDNN or NCCL
// older than the build's, or a driver older than the runtime, explains failures that would
// otherwise look like kernel bugs. Every query answers without a GPU (versions of 0 or "none").
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdio>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"

namespace kestrel::cli {

namespace {
const FlagTable kFlags = {};  // env takes no flags
}  // namespace

const Command kEnvCommand = {
    "env", "print the CUDA runtime, driver, cuBLAS, cuDNN and NCCL found, and the GPUs",
    "usage: kestrel env\n"
    "  prints one line per library (found at run time, and the version built against) and one per GPU\n",
    run_env, &kFlags};

namespace {

// CUDA encodes 13.0 as 13000; cuDNN 9.10.2 as 91002; NCCL 2.27.3 as 22703.
void print_cuda(const char* what, int v) { std::printf("%-13s %d.%d\n", what, v / 1000, (v % 1000) / 10); }
void print_cudnn(const char* what, size_t v) {
  std::printf("%-13s %zu.%zu.%zu\n", what, v / 10000, (v % 10000) / 100, v % 100);
}
void print_nccl(const char* what, int v) { std::printf("%-13s %d.%d.%d\n", what, v / 10000, (v % 10000) / 100, v % 100); }

// cuBLAS, which Kestrel does not link (its GEMMs are cuDNN convolutions): loaded here only to say
// which one the loader would find, for a first look at a GPU machine; "not found" otherwise.
void print_cublas() {
  void* lib = dlopen("libcublas.so.13", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) lib = dlopen("libcublas.so", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
  // cublasGetProperty(libraryPropertyType, int*): 0 major, 1 minor, 2 patch (library_types.h).
  using GetProperty = int (*)(int, int*);
  auto get = lib ? reinterpret_cast<GetProperty>(dlsym(lib, "cublasGetProperty")) : nullptr;
  int v[3] = {0, 0, 0};
  if (!get || get(0, &v[0]) != 0 || get(1, &v[1]) != 0 || get(2, &v[2]) != 0) {
    std::printf("%-13s not found (Kestrel does not use it)\n", "cuBLAS");
  } else {
    std::printf("%-13s %d.%d.%d (not linked: Kestrel does not use it)\n", "cuBLAS", v[0], v[1], v[2]);
  }
  // The library stays loaded to the end of the process: cuBLAS allocates at load time and frees
  // nothing at dlclose, so closing it would leave blocks nothing points to (LeakSanitizer reports
  // them; CI's ASan run failed on exactly that).
}

}  // namespace

int run_env(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags));
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  print_cuda("CUDA runtime", runtime);
  print_cuda("  built with", CUDART_VERSION);
  print_cuda("CUDA driver", driver);
  print_cublas();
  print_cudnn("cuDNN", cudnnGetVersion());
  print_cudnn("  built with", CUDNN_VERSION);
  int nccl = 0;
  ncclGetVersion(&nccl);
  print_nccl("NCCL", nccl);
  print_nccl("  built with", NCCL_VERSION_CODE);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::printf("%-13s none (%s)\n", "GPUs", cudaGetErrorString(e));
    cudaGetLastError();
    return 0;
  }
  std::printf("%-13s %d\n", "GPUs", count);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    std::printf("  %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", i, p.name, p.major, p.minor, p.multiProcessorCount,
                static_cast<double>(p.totalGlobalMem) / (1u << 30));
  }
  return 0;
}

}  // namespace kestrel::cli
