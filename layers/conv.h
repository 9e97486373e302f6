// Convolution layers: Conv2d (weights OHWI in memory, NHWC activations), BatchNorm2d, and the
// reference's Conv block (conv without bias -> BN -> SiLU).
#pragma once
#include <functional>
#include <optional>

#include "engine/ops/conv.h"
#include "engine/random.h"
#include "layers/module.h"

namespace kestrel::layers {

class Conv2d : public UnaryModule {
 public:
  // The reference's nn.Conv2d default initialisation: weight and bias uniform in
  // ±1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5)), drawn from `gen`.
  Conv2d(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, bool bias, Generator& gen);
  Tensor forward(const Tensor& x) override;
  // The same convolution with other weights of this layer's shape (BN-folded ones, in eval).
  Tensor forward_with(const Tensor& x, Tensor w, Tensor b);
  // Inference with other weights of this layer's shape and an activation in the same pass
  // (ops::conv2d_inference; no autograd).
  Tensor forward_inference(const Tensor& x, Tensor w, Tensor b, ops::ConvActivation act,
                           kernels::WeightVersion version);
  std::string type_name() const override { return "torch.nn.modules.conv.Conv2d"; }

  // Multiply-accumulates of the last forward (for the model's GFLOPs figure).
  int64_t last_macs() const { return last_macs_; }

  Tensor weight;  // [c2, k, k, c1]
  Tensor bias;    // [c2] or undefined
  int64_t in_channels, out_channels, kernel, stride, padding;
  // What the CPU's float32 forward and backward multiply (ops::ConvOperands; --amp bf16 on the
  // CPU). Inference (forward_inference) always runs float32.
  ops::ConvOperands operands = ops::ConvOperands::Float32;
  bool allow_tf32 = false;     // ops::Conv2dParams's, on CUDA
  bool deterministic = false;  // ops::Conv2dParams's, on CUDA

 private:
  int64_t last_macs_ = 0;
};

class BatchNorm2d : public UnaryModule {
 public:
  // The normalisation itself, chosen when a model is built (set_batch_norm), so that data-parallel
  // training can use SyncBN (dist/sync_batchnorm.h) without layers/ knowing about process groups.
  using NormFn = std::function<Tensor(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      bool training, double momentum, double eps,
                                      const Tensor& batches_tracked)>;

  BatchNorm2d(int64_t channels, double eps, double momentum);
  Tensor forward(const Tensor& x) override;
  // silu(forward(x)), fused into one op where the normalisation is the plain one.
  Tensor forward_silu(const Tensor& x);
  std::string type_name() const override { return "torch.nn.modules.batchnorm.BatchNorm2d"; }

  Tensor weight, bias;                   // parameters, fp32
  Tensor running_mean, running_var;      // buffers, fp32
  // buffer, int64 scalar on the module's device: the training forward's running-statistics update
  // advances it on the device (as PyTorch's add_(1)), so CUDA graph replays count too
  Tensor num_batches_tracked;
  double eps, momentum;

 private:
  friend void set_batch_norm(Module& m, const NormFn& norm);
  NormFn norm_;  // empty: ops::batch_norm
};

// Conv(c1, c2, k, s, p=None -> k/2): Conv2d without bias, BN (eps 1e-3, momentum 0.03), SiLU.
class Conv : public UnaryModule {
 public:
  Conv(int64_t c1, int64_t c2, int64_t k, int64_t s, std::optional<int64_t> p, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "models.common.Conv"; }

  // Inference (eval without gradients) always runs the fused form act(conv(x, w') + b'), BN folded
  // into w' and b'. Unfused, it folds on every forward (its weights may change between calls:
  // an EMA model validated during training). fuse() folds once and keeps the folded copies, as
  // the reference's model.fuse() for val.py and detect.py: the caller promises that conv's and
  // bn's tensors no longer change in place (weight loading unfuses). A training-mode forward
  // unfuses, and a fused layer refolds by itself when its tensors moved to another device.
  void fuse();
  void unfuse() { fused_.reset(); }
  bool fused() const { return fused_.has_value(); }

  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;

 private:
  struct Folded {
    Tensor weight, bias;
    kernels::WeightVersion version = kernels::kUncachedWeights;
  };
  Folded fold() const;
  std::optional<Folded> fused_;
};

// fuse() / unfuse() on every Conv block in m and below.
void fuse_convs(Module& m);
void unfuse_convs(Module& m);
// Sets every Conv2d's operands in m (the CPU's mixed precision for a training model).
void set_conv_operands(Module& m, ops::ConvOperands operands);
// Every Conv2d under m: TF32 for CUDA float32 (--tf32) and deterministic cuDNN algorithms
// (--deterministic); see ops::Conv2dParams.
void set_conv_math(Module& m, bool allow_tf32, bool deterministic);
// Sets every BatchNorm2d's normalisation in m: SyncBN for data-parallel training, chosen when the
// model is built (DetectionModel's `norm`); empty: the plain one.
void set_batch_norm(Module& m, const BatchNorm2d::NormFn& norm);

}  // namespace kestrel::layers
