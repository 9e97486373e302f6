// The step flags on CUDA equal the CPU's for finite and non-finite loss summaries, with and
// without the stop and replay requests.
#include <limits>
#include <vector>

#include "engine/stream.h"
#include "kernels/step_flags.h"
#include "tests/support/testing.h"

using namespace kestrel;

TEST(StepFlagsCuda, MatchTheCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double box : {0.25, nan}) {
    for (float stop : {0.0f, 1.0f}) {
      for (float replayed : {0.0f, 1.0f}) {
        const std::vector<double> c = {box, 0.5, 0.125};
        const Tensor components = Tensor::from_vector(c, {3}).to(gpu);
        const Tensor flags = Tensor::empty({kernels::kStepFlags}, DType::F32, gpu);
        const std::vector<float> request = {stop, replayed};
        const Tensor requests = Tensor::from_vector(request, {kernels::kStepRequests}).to(gpu);
        kernels::step_flags_cuda(components.data<double>(), requests.data<float>(),
                                 flags.data<float>(), current_stream(gpu).handle());
        float want[kernels::kStepFlags];
        kernels::step_flags_cpu(c.data(), request.data(), want);
        EXPECT_EQ(flags.to_vector<float>(), std::vector<float>(want, want + kernels::kStepFlags));
      }
    }
  }
}
