#include "engine/ops/cross_entropy.h"

#include "engine/ops/common.h"
#include "engine/ops/reduce.h"
#include "engine/profiler.h"
#include "kernels/cross_entropy.h"

namespace kestrel::ops {
namespace {

// The loss's dtype: float64 for float64 logits, else float32 (the CUDA kernels write float).
DType loss_dtype(DType logits) { return logits == DType::F64 ? DType::F64 : DType::F32; }

kernels::CrossEntropyShape shape_of(const Tensor& logits) {
  return {logits.size(0), logits.size(1)};
}

// dlogits from the rows' incoming gradient g [B] and the forward's log-sum-exp.
Tensor backward_rows(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                     const Tensor& g_, double eps) {
  const profiler::Scope timed("CrossEntropy", profiler::Phase::Backward);
  const Tensor g = g_.dtype() == lse.dtype() ? g_.contiguous() : g_.to(lse.dtype()).contiguous();
  Tensor dx = Tensor::empty_like(logits);
  const kernels::CrossEntropyShape s = shape_of(logits);
  launch(
      logits.device(),
      [&] {
        kernels::cross_entropy_backward_cpu(logits.dtype(), logits.data_ptr(),
                                            labels.data<int64_t>(), lse.data_ptr(), g.data_ptr(),
                                            dx.data_ptr(), s, eps);
      },
      [&](cudaStream_t st) {
        kernels::cross_entropy_backward_cuda(logits.dtype(), logits.data_ptr(),
                                             labels.data<int64_t>(), lse.data<float>(),
                                             g.data<float>(), dx.data_ptr(), s, eps, st);
      });
  return dx;
}

struct CrossEntropyBackward : autograd::Node {
  autograd::SavedTensor logits, labels, lse;
  double eps = 0;
  std::vector<Tensor> apply(std::vector<Tensor>& g) override {
    return {backward_rows(logits.unpack(), labels.unpack(), lse.unpack(), g[0], eps)};
  }
  void release_saved() override {
    logits.release();
    labels.release();
    lse.release();
  }
  std::string name() const override { return "CrossEntropyBackward"; }
};

}  // namespace

void check_class_labels(const Tensor& labels, int64_t classes) {
  KESTREL_CHECK(labels.defined() && labels.dtype() == DType::I64 && labels.dim() == 1,
                "class labels must be an int64 [B] tensor, got ",
                labels.defined() ? labels.describe() : std::string("none"));
  const Tensor host = labels.to(Device::cpu()).contiguous();
  const int64_t* y = host.data<int64_t>();
  const int64_t bad = kernels::first_bad_label(y, host.numel(), classes);
  KESTREL_CHECK(bad < 0, "class label ", bad < 0 ? 0 : y[bad], " at row ", bad,
                " is outside [0, ", classes, "); the dataset has ", classes,
                " classes, numbered from 0");
}

Tensor cross_entropy_rows(const Tensor& logits_, const Tensor& labels_, double eps) {
  const profiler::Scope timed("CrossEntropy", profiler::Phase::Forward);
  check_kernel_dtype("cross_entropy", logits_);
  KESTREL_CHECK(logits_.dim() == 2 && logits_.size(1) >= 1,
                "cross_entropy: logits must be [B, classes] with classes >= 1, got ",
                logits_.describe());
  KESTREL_CHECK(labels_.defined() && labels_.dtype() == DType::I64 && labels_.dim() == 1 &&
                    labels_.size(0) == logits_.size(0),
                "cross_entropy: labels must be int64 [", logits_.size(0), "] for ",
                logits_.describe(), ", got ",
                labels_.defined() ? labels_.describe() : std::string("none"));
  KESTREL_CHECK(labels_.device() == logits_.device(), "cross_entropy: labels on ",
                labels_.device().str(), ", logits on ", logits_.device().str(),
                "; move them to one device");
  KESTREL_CHECK(eps >= 0.0 && eps <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ",
                eps);
  if (labels_.device().is_cpu()) check_class_labels(labels_, logits_.size(1));
  const Tensor logits = logits_.detach().contiguous();
  const Tensor labels = labels_.detach().contiguous();
  const kernels::CrossEntropyShape s = shape_of(logits);
  const DType out_dtype = loss_dtype(logits.dtype());
  Tensor loss = Tensor::empty({s.rows}, out_dtype, logits.device());
  Tensor lse = Tensor::empty({s.rows}, out_dtype, logits.device());
  launch(
      logits.device(),
      [&] {
        kernels::cross_entropy_forward_cpu(logits.dtype(), logits.data_ptr(),
                                           labels.data<int64_t>(), loss.data_ptr(), lse.data_ptr(),
                                           s, eps);
      },
      [&](cudaStream_t st) {
        kernels::cross_entropy_forward_cuda(logits.dtype(), logits.data_ptr(),
                                            labels.data<int64_t>(), loss.data<float>(),
                                            lse.data<float>(), s, eps, st);
      });
  if (auto node = autograd::make_node<CrossEntropyBackward>({&logits_})) {
    node->logits = autograd::SavedTensor(logits);
    node->labels = autograd::SavedTensor(labels);
    node->lse = autograd::SavedTensor(lse);
    node->eps = eps;
    autograd::set_history(loss, node);
  }
  return loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing) {
  return mean_all(cross_entropy_rows(logits, labels, label_smoothing));
}

}  // namespace kestrel::ops
