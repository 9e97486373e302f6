// `kestrel step` end to end (the built kestrel binary beside this test): yolov5n on two 64x64
// images writes every key with the reference's shapes; the loss and gradients equal ComputeLoss
// and autograd run here on the same model and batch (bitwise: the same CPU code runs), and the
// updated parameters equal clipping plus one Nesterov SGD step worked out here from the dumped
// gradients.
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/ops/layout.h"
#include "engine/safetensors_tensors.h"
#include "tests/support/testing.h"
#include "yolo/model/model.h"
#include "yolo/model/weights.h"
#include "yolo/train/loss.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

fs::path temp(const std::string& name) { return fs::temp_directory_path() / ("kestrel_step_" + name); }

int run_kestrel(const std::string& args) {
  const fs::path exe = fs::read_symlink("/proc/self/exe").parent_path() / "kestrel";
  if (!fs::exists(exe)) return -1;
  const std::string cmd = exe.string() + " " + args + " > " + temp("log.txt").string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

class StepCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    DetectionModel model(load_model_config("models/yolov5n.yaml"));
    save_weights(model, weights_.string());
    images_ = kestrel::testing::random_tensor({2, 3, 64, 64}, 11, DType::F32, 0.0, 1.0);
    targets_ = Tensor::from_vector<float>({0, 3, 0.5f, 0.5f, 0.3f, 0.4f,      //
                                           1, 10, 0.25f, 0.7f, 0.1f, 0.2f,    //
                                           1, 0, 0.8f, 0.2f, 0.5f, 0.3f},
                                          {3, 6});
    save_safetensors(batch_.string(), {{"images", images_}, {"targets", targets_}});
  }
  void TearDown() override {
    for (const fs::path& p : {weights_, batch_, out_, temp("log.txt")}) fs::remove(p);
  }

  fs::path weights_ = temp("w.safetensors"), batch_ = temp("b.safetensors"),
           out_ = temp("o.safetensors");
  Tensor images_, targets_;
};

}  // namespace

TEST_F(StepCommand, DumpsEverythingConsistently) {
  const std::string args = "step --cfg models/yolov5n.yaml --weights " + weights_.string() +
                           " --batch " + batch_.string() + " --out " + out_.string();
  ASSERT_EQ(run_kestrel(args), 0) << "kestrel step failed or the kestrel binary is not built "
                                     "beside this test; log: " << temp("log.txt");
  SafetensorsFile out = load_safetensors(out_.string());

  // The same step here: model, train-mode forward, loss, backward.
  DetectionModel model(load_model_config("models/yolov5n.yaml"));
  load_weights(model, weights_.string());
  model.train(true);
  const std::vector<Tensor> preds = model.forward(ops::nchw_to_nhwc(images_));
  const Hyp hyp;
  const LossResult loss =
      ComputeLoss(model.detect(), scale_loss_hyp(hyp, 3, 80, 64))(preds, targets_);
  loss.total.backward();

  const Shape want_pred[] = {{2, 3, 8, 8, 85}, {2, 3, 4, 4, 85}, {2, 3, 2, 2, 85}};
  for (int i = 0; i < 3; ++i) {
    const std::string key = "pred." + std::to_string(i);
    ASSERT_TRUE(out.contains(key)) << key;
    EXPECT_EQ(out.entry(key).shape, want_pred[i]);
    EXPECT_TRUE(same_bits(safetensors_tensor(out, key), preds[i])) << key;
  }
  EXPECT_FALSE(out.contains("pred.3"));
  EXPECT_TRUE(same_bits(safetensors_tensor(out, "loss"), loss.total)) << safetensors_tensor(out, "loss").item() << " vs "
                                                       << loss.total.item();
  EXPECT_EQ(safetensors_tensor(out, "loss.box").item(), static_cast<float>(loss.box));
  EXPECT_EQ(safetensors_tensor(out, "loss.obj").item(), static_cast<float>(loss.obj));
  EXPECT_EQ(safetensors_tensor(out, "loss.cls").item(), static_cast<float>(loss.cls));
  EXPECT_GT(loss.total.item(), 0.0);

  // Gradients under the reference names, OIHW; their global norm gives the clipping factor.
  double sq = 0;
  int params = 0, bn_buffers = 0;
  for (const layers::StateEntry& e : model.state_entries()) {
    if (!e.is_parameter) {
      if (e.name.find("running_") != std::string::npos || e.name.find("num_batches") != std::string::npos) {
        ++bn_buffers;
        ASSERT_TRUE(out.contains("bn_after." + e.name)) << e.name;
        EXPECT_TRUE(same_bits(safetensors_tensor(out, "bn_after." + e.name), *e.slot)) << e.name;
      }
      continue;
    }
    ++params;
    Tensor g = e.slot->grad();
    if (e.ohwi_conv_weight) g = g.permute({0, 3, 1, 2});
    ASSERT_TRUE(out.contains("grad." + e.name)) << e.name;
    ASSERT_TRUE(out.contains("param_after." + e.name)) << e.name;
    EXPECT_TRUE(same_bits(safetensors_tensor(out, "grad." + e.name), g)) << e.name;
    for (double v : g.to_double_vector()) sq += v * v;
  }
  EXPECT_EQ(params, 177);      // 57 BN weights + 60 weights + 60 biases
  EXPECT_EQ(bn_buffers, 171);  // 57 BN layers x (running_mean, running_var, num_batches_tracked)
  EXPECT_EQ(out.names().size(), 3u + 4u + 2u * 177u + 171u);

  // param_after: clip to norm 10, then SGD Nesterov at lr0 (first step: buf = d).
  const float coef = std::min(10.0f / (static_cast<float>(std::sqrt(sq)) + 1e-6f), 1.0f);
  const float lr = static_cast<float>(hyp.lr0), mom = static_cast<float>(hyp.momentum);
  const float wd = static_cast<float>(hyp.weight_decay);
  for (const char* name : {"model.24.m.0.bias", "model.0.conv.weight", "model.2.cv1.bn.weight"}) {
    const bool decay = std::string(name) == "model.0.conv.weight";
    Tensor before;
    for (const layers::StateEntry& e : model.state_entries())
      if (e.name == name) before = e.ohwi_conv_weight ? e.slot->permute({0, 3, 1, 2}) : *e.slot;
    const std::vector<double> p0 = before.contiguous().to_double_vector();
    const std::vector<float> g = safetensors_tensor(out, std::string("grad.") + name).to_vector<float>();
    const std::vector<float> p1 = safetensors_tensor(out, std::string("param_after.") + name).to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) {
      const float d = g[i] * coef + (decay ? wd * static_cast<float>(p0[i]) : 0.0f);
      const float want = static_cast<float>(p0[i]) - lr * (d + mom * d);
      EXPECT_NEAR(p1[i], want, 1e-6 * (1 + std::abs(want))) << name << "[" << i << "]";
    }
  }
}

TEST_F(StepCommand, UsageErrors) {
  EXPECT_EQ(run_kestrel("step --cfg models/yolov5n.yaml --weights " + weights_.string()), 2);
  EXPECT_EQ(run_kestrel("step --cfg models/yolov5n.yaml --weights " + weights_.string() +
                        " --batch " + weights_.string() + " --out " + out_.string()),
            1);  // the weights file is no batch: a clear error, exit 1
}

// The same step on CUDA (cuDNN convolutions, the fused optimizer kernels) against the CPU run.
// Float32 everywhere, but convolutions sum in other orders: the loss agrees to 1e-4 relative,
// gradients to 1e-3 of each tensor's largest magnitude, and the updated parameters to what that
// gradient difference can move them (lr0 (1 + momentum) times it) plus float32 rounding.
TEST_F(StepCommand, CudaMatchesCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const std::string base = "step --cfg models/yolov5n.yaml --weights " + weights_.string() +
                           " --batch " + batch_.string() + " --out ";
  const fs::path gpu_out = temp("o_gpu.safetensors");
  ASSERT_EQ(run_kestrel(base + out_.string()), 0);
  ASSERT_EQ(run_kestrel(base + gpu_out.string() + " --device 0"), 0);
  SafetensorsFile cpu = load_safetensors(out_.string()), gpu = load_safetensors(gpu_out.string());
  fs::remove(gpu_out);
  ASSERT_EQ(cpu.names(), gpu.names());
  const double loss = safetensors_tensor(cpu, "loss").item();
  EXPECT_NEAR(safetensors_tensor(gpu, "loss").item(), loss, 1e-4 * loss);
  auto peak_of = [&](const std::string& name) {
    double peak = 0;
    for (double v : safetensors_tensor(cpu, name).to_double_vector()) peak = std::max(peak, std::abs(v));
    return peak;
  };
  for (const std::string& name : cpu.names()) {
    Tensor a = safetensors_tensor(gpu, name).to(DType::F64), b = safetensors_tensor(cpu, name).to(DType::F64);
    if (name.rfind("grad.", 0) == 0) {
      EXPECT_TRUE(kestrel::testing::all_close(a, b, 1e-3 * peak_of(name) + 1e-7, 0)) << name;
    } else if (name.rfind("param_after.", 0) == 0) {
      // The update is lr0 (1 + momentum) times a gradient with clipping factor <= 1.
      const double grad_tol = 1e-3 * peak_of("grad." + name.substr(12)) + 1e-7;
      EXPECT_TRUE(kestrel::testing::all_close(a, b, 0.01 * 1.937 * grad_tol + 1e-6, 0)) << name;
    } else if (name.rfind("bn_after.", 0) == 0) {  // 0.97 running + 0.03 batch statistics
      EXPECT_TRUE(kestrel::testing::all_close(a, b, 1e-4, 1e-3)) << name;
    }
  }
}
