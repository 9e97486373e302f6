// Segmentation's step objective (yolo/train/train_step.h's StepObjective): SegmentationModel's
// forward, raw outputs and prototypes into ComputeSegLoss with the batch's label masks. The
// items are the reference's (box, seg, obj, cls); the non-finite flag sees (box + seg, obj, cls),
// whose sum is the loss's. Used by segment training (train_task_segment.cpp) and by
// train_step --task segment (bench/yolo/train/segment_step_bench.cpp).
#pragma once
#include "yolo/model/segmentation_model.h"
#include "yolo/train/seg_loss.h"
#include "yolo/train/train_step.h"

namespace kestrel::yolo {

class SegmentationObjective : public StepObjective {
 public:
  SegmentationObjective(SegmentationModel& model, const ComputeSegLoss& loss) : model_(model), loss_(loss) {}
  layers::Module& model() const override { return model_; }
  // masks: the batch's label masks on the step's device (ComputeSegLoss's form); required.
  StepLoss forward(const Tensor& x, const Tensor& targets, const Tensor& masks) const override;

 private:
  SegmentationModel& model_;
  const ComputeSegLoss& loss_;
};

}  // namespace kestrel::yolo
