// A YOLOv5 v7.0 training checkpoint (train.py's last.pt, or segment/train.py's, whose model is a
// SegmentationModel) as Kestrel's own checkpoint format (yolo/train/checkpoint.h), so that
// `kestrel train --resume last.pt` (`kestrel segment train --resume last.pt`) continues the
// reference's run the way its own --resume would:
//   epoch, best_fitness (a numpy array in the file), the EMA and its `updates`;
//   `model` and `ema` widened from float16 to float32, as train.py's .float() does;
//   the SGD optimizer's state_dict: its param_groups' lr, initial_lr, momentum, weight_decay, and
//     each parameter's momentum_buffer, its index mapped to a name by rebuilding the reference's
//     smart_optimizer order (biases, then decayed weights, then normalisation weights, each in
//     model.modules() order) from the pickled module tree;
//   hyp (opt['hyp']) and the options (vars(opt) under Kestrel's option names, the model yaml and
//     class names from the model; a segmentation run's task, mask_ratio and no_overlap), taken as the reference's --resume takes them: from the run
//     folder's opt.yaml (two folders above last.pt) where there is one, else from the checkpoint;
//   the numbers train.py leaves as numpy float64 (the warm-up's lr and momentum, best_fitness);
//   what the reference does not save starts as the reference starts it on resume: a fresh fp16
//     loss scaler, last_opt_step -1, accumulate max(round(64 / batch_size), 1), no partial epoch.
// A stripped .pt (no optimizer) reads as a stripped checkpoint, which --resume refuses by name.
// Adam and AdamW states are refused with a message: only SGD's momentum is mapped.
#pragma once
#include "engine/safetensors_tensors.h"
#include "yolo/model/pt_checkpoint.h"

namespace kestrel::yolo {

SafetensorsFile pt_training_checkpoint(const PtCheckpoint& ckpt);

}  // namespace kestrel::yolo
