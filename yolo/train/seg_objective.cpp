#include "yolo/train/seg_objective.h"

#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "kernels/yolo_loss.h"

namespace kestrel::yolo {

StepLoss SegmentationObjective::forward(const Tensor& x, const Tensor& targets, const Tensor& masks) const {
  KESTREL_CHECK(masks.defined(), "segmentation's training step needs the batch's label masks");
  const SegmentationModel::Output out = model_.forward(x);
  const SegDeviceLoss loss = loss_.forward(loss_inputs(out.raw), loss_input(out.protos), targets, masks);
  autograd::NoGradGuard no_grad;
  const Device device = loss.summary.device();
  const Tensor box = loss.summary.slice(0, kernels::kSummaryBox, kernels::kSummaryBox + 1);
  const Tensor obj_cls = loss.summary.slice(0, kernels::kSummaryObj, kernels::kSummaryCls + 1);
  const Tensor seg = loss.seg.to(DType::F64).reshape({1});
  Tensor items = Tensor::empty({4}, DType::F64, device);
  items.slice(0, 0, 1).copy_(box);
  items.slice(0, 1, 2).copy_(seg);
  items.slice(0, 2, 4).copy_(obj_cls);
  Tensor components = Tensor::empty({3}, DType::F64, device);
  components.slice(0, 0, 1).copy_(box);
  components.slice(0, 1, 3).copy_(obj_cls);
  ops::add_(components.slice(0, 0, 1), seg);
  return {loss.total, components, items};
}

}  // namespace kestrel::yolo
