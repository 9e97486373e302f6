// The classifier's loss at ImageNet's shape (1000 classes) and a small dataset's (10 classes):
// forward and backward of ops::cross_entropy with label smoothing. Memory-bound and a small share
// of a step: the logits are read once by the forward, once by the backward and dlogits written.
#include "bench/kernels/bench_common.h"
#include "engine/ops/cross_entropy.h"

using namespace kestrel;

namespace {

void BM_CrossEntropyForwardBackward(benchmark::State& state) {
  const bench::CommonArgs s = bench::common_args(state);
  const int64_t classes = state.range(3);
  bench::Case c(state, s.device, s.dtype, str(s.batch, "x", classes));
  if (c.skipped()) return;
  Tensor logits = Tensor::zeros({s.batch, classes}, s.dtype, s.device).set_requires_grad();
  std::vector<int64_t> y(static_cast<size_t>(s.batch));
  for (int64_t i = 0; i < s.batch; ++i) y[i] = i % classes;
  const Tensor labels = Tensor::from_vector<int64_t>(y, {s.batch}, s.device);
  c.run([&] { ops::cross_entropy(logits, labels, 0.1).backward(); });
  c.report_bytes(3.0 * static_cast<double>(logits.numel()) * logits.element_size());
}

// {device, batch, dtype, classes}: the CPU at batch 64 in float32; CUDA at batch 64 and 256 in
// float32 and bfloat16.
void Args(benchmark::internal::Benchmark* b) {
  for (int64_t classes : {10, 1000}) {
    b->Args({0, 64, 0, classes});
    for (int64_t batch : {64, 256})
      for (int64_t dtype : {0, 1}) b->Args({1, batch, dtype, classes});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_CrossEntropyForwardBackward)->Apply(Args);
