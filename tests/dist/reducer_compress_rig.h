// One synchronised step of a Reducer with --grad-compress on in-process ranks (tests/dist/
// fake_group.h), for the CPU and CUDA compression tests. The model is loss = sum_j sum(x_j * w_j),
// so each rank's gradient of w_j is exactly its x_j.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "dist/reducer.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "tests/dist/fake_group.h"

namespace kestrel::dist::testing {

inline constexpr int kParams = 3;
inline constexpr int64_t kN = 40;

// Rank r's gradient of w_j, element i.
using GradFn = std::function<double(int rank, int j, int64_t i)>;

// Every rank's gradients after one synchronised step, as doubles: [rank][param][element].
inline std::vector<std::vector<std::vector<double>>> reduce_once(
    int ranks, GradCompress compress, const GradFn& grad, DType dtype = DType::F32,
    Device device = Device::cpu()) {
  std::vector<std::vector<std::vector<double>>> out(ranks);
  run_ranks(ranks, [&](std::shared_ptr<FakeGroup> group) {
    NamedTensors named;
    std::vector<Tensor> xs;
    for (int j = 0; j < kParams; ++j) {
      Tensor w = Tensor::zeros({kN}, dtype, device);
      w.set_requires_grad(true);
      named.push_back({"w" + std::to_string(j), w});
      Tensor x = Tensor::empty({kN}, dtype);
      for (int64_t i = 0; i < kN; ++i) store_from_double(x.data_ptr(), dtype, i, grad(group->rank(), j, i));
      xs.push_back(x.to(device));
    }
    ReducerOptions options;
    options.compress = compress;
    options.bucket_cap_mb = 100.0 / (1024 * 1024);  // about one parameter per bucket
    Reducer reducer(named, group, options);
    reducer.prepare_for_backward();
    Tensor loss = ops::sum_all(ops::mul(xs[0], named[0].second));
    for (int j = 1; j < kParams; ++j) loss = ops::add(loss, ops::sum_all(ops::mul(xs[j], named[j].second)));
    loss.backward();
    reducer.finalize();
    for (const auto& [name, w] : named) out[group->rank()].push_back(w.grad().to(Device::cpu()).to_double_vector());
  });
  return out;
}

}  // namespace kestrel::dist::testing
