// The whole model on CUDA against the CPU reference: raw outputs, decoded boxes and parameter
// gradients. fp32 (cuDNN without TF32): the network is ~60 layers deep, so errors of ~1e-6 per
// layer compound; 1e-3 relative / 1e-3 absolute is tight enough to catch any wrong kernel
// (those give O(1) differences) but tolerant of reassociation across cuDNN algorithms.
#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "tests/support/testing.h"
#include "yolo/model/model.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

TEST(ModelCuda, ForwardBackwardMatchCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  DetectionModel cpu(load_model_config("models/yolov5n.yaml"), 5, 0);
  DetectionModel gpu(load_model_config("models/yolov5n.yaml"), 5, 0);
  gpu.to(Device::cuda(0));
  Tensor x = random_tensor({2, 160, 224, 3}, 3, DType::F32, 0, 1);

  std::vector<Tensor> out_cpu = cpu.forward(x);
  std::vector<Tensor> out_gpu = gpu.forward(x.to(Device::cuda(0)));
  ASSERT_EQ(out_cpu.size(), out_gpu.size());
  Tensor loss_cpu, loss_gpu;
  for (size_t l = 0; l < out_cpu.size(); ++l) {
    EXPECT_TRUE(all_close(out_gpu[l], out_cpu[l], 1e-3, 1e-3)) << "level " << l;
    Tensor lc = ops::mean_all(out_cpu[l]), lg = ops::mean_all(out_gpu[l]);
    loss_cpu = loss_cpu.defined() ? ops::add(loss_cpu, lc) : lc;
    loss_gpu = loss_gpu.defined() ? ops::add(loss_gpu, lg) : lg;
  }
  loss_cpu.backward();
  loss_gpu.backward();
  auto pc = cpu.named_parameters(), pg = gpu.named_parameters();
  for (size_t i = 0; i < pc.size(); ++i)
    EXPECT_TRUE(all_close(pg[i].second.grad(), pc[i].second.grad(), 1e-5, 2e-3)) << pc[i].first;

  cpu.train(false);
  gpu.train(false);
  autograd::NoGradGuard no_grad;
  EXPECT_TRUE(all_close(gpu.predict(x.to(Device::cuda(0))).boxes, cpu.predict(x).boxes, 1e-2, 1e-3));
}
