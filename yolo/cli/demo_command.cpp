// `kestrel demo`: the engine's smallest real end-to-end job. A small network built from the
// YOLOv5 blocks (Conv, C3, SPPF, Upsample, Concat) learns, with autograd and SGD, to mark where a
// bright square lies in noisy synthetic images: a per-cell objectness map at stride 4.
#include <chrono>
#include <cstdio>

#include "engine/autograd.h"
#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "engine/random.h"
#include "layers/blocks.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"

namespace kestrel::cli {
namespace {

class SquareFinder : public layers::Module {
 public:
  explicit SquareFinder(Generator& gen) {
    c1 = register_module("c1", std::make_shared<layers::Conv>(3, 16, 3, 2, std::nullopt, gen));
    c2 = register_module("c2", std::make_shared<layers::Conv>(16, 32, 3, 2, std::nullopt, gen));
    c3 = register_module("c3", std::make_shared<layers::Conv>(32, 64, 3, 2, std::nullopt, gen));
    sppf = register_module("sppf", std::make_shared<layers::SPPF>(64, 64, 5, gen));
    up = register_module("up", std::make_shared<layers::Upsample>());
    fuse = register_module("fuse", std::make_shared<layers::C3>(96, 32, 1, true, gen));
    head = register_module("head", std::make_shared<layers::Conv2d>(32, 1, 1, 1, 0, true, gen));
  }
  std::string type_name() const override { return "SquareFinder"; }

  // x: (batch, S, S, 3) -> objectness logits (batch, S/4, S/4, 1)
  Tensor forward(const Tensor& x) {
    Tensor p2 = c2->forward(c1->forward(x));
    Tensor p3 = sppf->forward(c3->forward(p2));
    return head->forward(fuse->forward(ops::concat({up->forward(p3), p2}, -1)));
  }

  std::shared_ptr<layers::Conv> c1, c2, c3;
  std::shared_ptr<layers::SPPF> sppf;
  std::shared_ptr<layers::Upsample> up;
  std::shared_ptr<layers::C3> fuse;
  std::shared_ptr<layers::Conv2d> head;
};

struct Batch {
  Tensor images, targets;
};

// Noise in [0, 0.4) with one square of value 1 per image; the target marks the stride-4 cells
// whose centre the square covers.
Batch make_batch(Generator& gen, int64_t batch, int64_t size, Device device) {
  const int64_t cells = size / 4;
  Tensor images = Tensor::empty({batch, size, size, 3});
  gen.fill_uniform(images, 0.0, 0.4);
  Tensor targets = Tensor::zeros({batch, cells, cells, 1});
  float* img = images.data<float>();
  float* tgt = targets.data<float>();
  for (int64_t b = 0; b < batch; ++b) {
    const auto side = static_cast<int64_t>(gen.uniform(size / 6.0, size / 3.0));
    const auto x0 = static_cast<int64_t>(gen.uniform(0, static_cast<double>(size - side)));
    const auto y0 = static_cast<int64_t>(gen.uniform(0, static_cast<double>(size - side)));
    for (int64_t y = y0; y < y0 + side; ++y)
      for (int64_t x = x0; x < x0 + side; ++x)
        for (int64_t c = 0; c < 3; ++c) img[((b * size + y) * size + x) * 3 + c] = 1.0f;
    for (int64_t cy = 0; cy < cells; ++cy)
      for (int64_t cx = 0; cx < cells; ++cx) {
        const double py = cy * 4 + 2, px = cx * 4 + 2;
        if (py >= y0 && py < y0 + side && px >= x0 && px < x0 + side)
          tgt[(b * cells + cy) * cells + cx] = 1.0f;
      }
  }
  return {images.to(device), targets.to(device)};
}

Tensor mse(const Tensor& pred, const Tensor& target) {
  Tensor d = ops::sub(pred, target);
  return ops::mean_all(ops::mul(d, d));
}

// Intersection over union of the predicted (p > 0.5) and true masks.
double mask_iou(const Tensor& prob, const Tensor& target) {
  std::vector<double> p = prob.to_double_vector(), t = target.to_double_vector();
  double inter = 0, uni = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const bool a = p[i] > 0.5, b = t[i] > 0.5;
    inter += a && b;
    uni += a || b;
  }
  return uni > 0 ? inter / uni : 1.0;
}

const FlagTable kFlags = {
    {"device", "cpu|0", nullptr, "cpu, or a CUDA device index (default: 0 when a GPU is present)"},
    {"steps", "N", "150", "SGD steps"},
    {"batch-size", "N", "16", "images per step"},
    {"img-size", "PIXELS", "64", "image side, a multiple of 8"},
    {"lr", "LR", "0.1", "learning rate, momentum 0.9"},
    {"seed", "N", "0", "seed of the weights and the synthetic data"}};

}  // namespace

const Command kDemoCommand = {
    "demo", "train a small YOLOv5-block network on synthetic images (engine demo)",
    "usage: kestrel demo [--device cpu|0] [--steps 150] [--batch-size 16] [--img-size 64]\n"
    "                    [--lr 0.1] [--seed 0]\n",
    run_demo, &kFlags};

int run_demo(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags));
  const Device device = Device::parse(args.get("device", cuda_available() ? "0" : "cpu"));
  const int64_t steps = args.get_int("steps", 150);
  const int64_t batch = args.get_int("batch-size", 16);
  const int64_t size = args.get_int("img-size", 64);
  const double lr = args.get_double("lr", 0.1);
  if (steps < 1 || batch < 2) throw UsageError("--steps must be >= 1 and --batch-size >= 2");
  if (size < 32 || size % 8 != 0) throw UsageError("--img-size must be a multiple of 8, >= 32");
  if (device.is_cuda())
    KESTREL_CHECK(device.index < cuda_device_count(), "--device ", device.index,
                  ": this machine has ", cuda_device_count(), " CUDA devices; use --device cpu");

  const auto seed = static_cast<uint64_t>(args.get_int("seed", 0));
  Generator weights_gen(seed, 0), data_gen(seed, 1);
  SquareFinder net(weights_gen);
  net.to(device);
  std::vector<Tensor> params = net.parameters();
  std::vector<Tensor> velocity;
  for (const Tensor& p : params) velocity.push_back(Tensor::zeros_like(p));
  std::printf("demo: %lld parameters on %s, %lldx%lld images, batch %lld, %lld steps\n",
              static_cast<long long>(net.parameter_count()), device.str().c_str(),
              static_cast<long long>(size), static_cast<long long>(size),
              static_cast<long long>(batch), static_cast<long long>(steps));

  const auto start = std::chrono::steady_clock::now();
  double first_loss = 0, loss_value = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    Batch b = make_batch(data_gen, batch, size, device);
    Tensor loss = mse(ops::sigmoid(net.forward(b.images)), b.targets);
    loss.backward();
    {
      autograd::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        velocity[i].copy_(ops::add(ops::mul(velocity[i], 0.9), params[i].grad()));
        params[i].copy_(ops::sub(params[i], ops::mul(velocity[i], lr)));
        params[i].set_grad(Tensor());
      }
    }
    loss_value = loss.item();
    if (step == 1) first_loss = loss_value;
    if (step == 1 || step % 25 == 0 || step == steps)
      std::printf("step %4lld  loss %.5f\n", static_cast<long long>(step), loss_value);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  net.train(false);
  autograd::NoGradGuard no_grad;
  Batch held_out = make_batch(data_gen, 64, size, device);
  const double iou = mask_iou(ops::sigmoid(net.forward(held_out.images)), held_out.targets);
  std::printf("trained in %.1f s (%.1f images/s); loss %.5f -> %.5f; mask IoU on 64 new images %.3f\n",
              seconds, static_cast<double>(steps * batch) / seconds, first_loss, loss_value, iou);
  return loss_value < first_loss ? 0 : 1;
}

}  // namespace kestrel::cli
