#include "engine/ops/fold_bn.h"

#include "engine/ops/batchnorm.h"
#include "engine/ops/common.h"
#include "engine/profiler.h"
#include "kernels/fold_bn.h"

namespace kestrel::ops {

FoldedConv fold_batch_norm(const Tensor& w_, const Tensor& gamma_, const Tensor& beta_, const Tensor& mean_,
                           const Tensor& var_, double eps) {
  const profiler::Scope timed("FoldBatchNorm", profiler::Phase::Forward);
  KESTREL_CHECK(w_.defined() && w_.dim() == 4, "fold_batch_norm: expects OHWI weights [O, KH, KW, C], got ",
                w_.defined() ? w_.describe() : std::string("an undefined tensor"));
  const int64_t o = w_.size(0);
  for (const Tensor* p : {&gamma_, &beta_, &mean_, &var_}) {
    KESTREL_CHECK(p->defined() && p->dim() == 1 && p->size(0) == o && p->device() == w_.device(),
                  "fold_batch_norm: BatchNorm parameters and statistics must be [", o, "] on ",
                  w_.device().str(), ", got ", p->defined() ? p->describe() : std::string("an undefined tensor"));
    KESTREL_CHECK(p->dtype() == bn_steps::param_dtype(w_.dtype()),
                  "fold_batch_norm: parameter dtype ", dtype_name(p->dtype()), " does not fit weights ",
                  w_.describe());
  }
  const Tensor w = w_.contiguous(), gamma = gamma_.contiguous(), beta = beta_.contiguous();
  const Tensor mean = mean_.contiguous(), var = var_.contiguous();
  const kernels::FoldBnShape s{o, w.numel() / std::max<int64_t>(o, 1), eps};
  FoldedConv out{Tensor::empty(w.shape(), w.dtype(), w.device()), Tensor::empty({o}, gamma.dtype(), w.device())};
  launch(
      w.device(),
      [&] {
        kernels::fold_bn_cpu(w.dtype(), s, w.data_ptr(), gamma.data_ptr(), beta.data_ptr(), mean.data_ptr(),
                             var.data_ptr(), out.weight.data_ptr(), out.bias.data_ptr());
      },
      [&](cudaStream_t stream) {
        kernels::fold_bn_cuda(w.dtype(), s, w.data_ptr(), gamma.data<float>(), beta.data<float>(),
                              mean.data<float>(), var.data<float>(), out.weight.data_ptr(),
                              out.bias.data<float>(), stream);
      });
  return out;
}

}  // namespace kestrel::ops
