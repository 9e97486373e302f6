// Shared test helpers: random tensors, closeness checks, finite-difference gradient checks, the
// GPU skip, the message of an expected kestrel::Error, and a writer's leftover temporaries.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

#define KESTREL_SKIP_WITHOUT_CUDA() \
  if (!::kestrel::cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped"

namespace kestrel::testing {

// Uniform values in [lo, hi) from a fixed seed (std::mt19937_64), on the CPU, converted to dtype.
Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::F64, double lo = -1.0,
                     double hi = 1.0);

// |a - b| <= atol + rtol * |b| elementwise (any devices and dtypes); names the worst element.
::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double atol, double rtol);

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step (inputs are float64)
  double atol = 1e-6;
  double rtol = 1e-5;
};

// Compares autograd gradients of sum(f(inputs) * w), w a fixed random weight, with central
// finite differences, for every input that requires grad. Inputs must be CPU float64 tensors.
::testing::AssertionResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                     const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options = {});

// The message of the kestrel::Error that f throws; empty when it returns normally.
std::string error_of(const std::function<void()>& f);

// The temporaries of `path` beside it (`<name>.tmp...`, any writer's: io/atomic_file names
// them per writer), as file names; empty when every write-then-rename cleaned up.
std::vector<std::string> temporaries_of(const std::string& path);

}  // namespace kestrel::testing
