// Writing a DetectionModel or a SegmentationModel as an ultralytics YOLOv5 v7.0 checkpoint (.pt), so that the
// reference's own tools (val.py, detect.py, export.py, torch.load(weights_only=False)) read
// Kestrel's weights directly. The file is what the reference's strip_optimizer leaves of a
// best.pt: {'epoch': -1, 'best_fitness', 'model': the model in float16, 'ema': None,
// 'updates': None, 'optimizer': None, 'opt', 'git': None, 'date'}. The model is pickled as the
// reference's module tree (models.yolo.DetectionModel > torch.nn Sequential > models.common
// Conv/C3/Bottleneck/SPPF/Concat, torch.nn Upsample, models.yolo.Detect; a -seg model's
// models.yolo.SegmentationModel, whose last row is models.yolo.Segment with its models.common.Proto
// (cv1, upsample, cv2, cv3) and `detect`, the function Detect.forward, pickled by reference as
// getattr(Detect, 'forward')), each module carrying the
// attributes torch and the reference read (Conv2d's geometry, BatchNorm's eps and momentum,
// Detect's nc/no/nl/na/stride/grid, Segment's nm/npr, each layer's i/f/type/np, the model's yaml, names, stride,
// save), the hook dicts of torch 1.13's nn.Module (torch 2.x's __setstate__ adds its newer ones),
// one SiLU shared by every Conv as the reference's Conv.default_act, and parameters as
// torch.nn.Parameter. Tensors carry the reference's state-dict names and layouts (conv weights
// OIHW). The container is io/torch_zip_writer.h (written atomically); the reader is
// yolo/model/pt_checkpoint.h.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "io/json.h"
#include "layers/module.h"
#include "yolo/model/model.h"

namespace kestrel::yolo {

struct PtWriteOptions {
  // Class names, written as the reference's {index: name} dict; empty: class0, class1, ...
  std::vector<std::string> names;
  // The model yaml's text, pickled as the dict the reference's yaml.safe_load makes of it (with
  // nc set to the model's and ch added, as DetectionModel does). Empty: the file the model's
  // config was loaded from (config().path when it names a .yaml), else the config rendered
  // (model_config_yaml).
  std::string model_yaml;
  // What train.py attaches to the model (and its EMA copies at each epoch's end): the
  // hyperparameters, written as model.hyp when given, and the class weights, written as the
  // float32 tensor model.class_weights when given.
  json::Object hyp;
  std::vector<double> class_weights;
  std::optional<double> best_fitness;  // None when absent
  // A classifier's checkpoint (classify/train.py's, which keeps no optimizer): its epoch and the
  // EMA's update count; -1 and None when absent.
  std::optional<int64_t> epoch, updates;
  json::Object opt;                    // the training options, pickled as a dict
  std::string date;                    // 'date': an ISO 8601 time, as the reference writes
  std::string archive_name = "archive";  // the folder inside the zip
};

// One of smart_optimizer's param groups (0 biases, 1 weights with decay, 2 BatchNorm weights), in
// the model's parameter order: its settings (momentum is Adam's beta1) and, per parameter, the
// state slots torch keeps ("momentum_buffer"; "step", "exp_avg", "exp_avg_sq"), conv-shaped
// slots OIHW; a parameter with no slots has no 'state' entry.
struct PtOptimizerGroup {
  double lr = 0, initial_lr = 0, momentum = 0, weight_decay = 0;
  std::vector<std::vector<std::pair<std::string, Tensor>>> state;  // one per parameter
};
struct PtOptimizerState {
  std::string kind;  // "SGD", "Adam" or "AdamW"
  std::vector<PtOptimizerGroup> groups;
};
// What train.py's last.pt holds besides the model: the EMA (written as ModelEMA keeps it: eval
// mode, no gradients), its update count, the optimizer's state_dict and the last epoch.
struct PtTrainingState {
  int64_t epoch = 0;
  const layers::Module* ema = nullptr;  // the model's kind (DetectionModel or SegmentationModel)
  int64_t updates = 0;
  PtOptimizerState optimizer;
};

// Writes `model` to `path` (atomically). Without `training`: the stripped form above. With it: the
// checkpoint train.py saves at an epoch's end ({'epoch', 'best_fitness' (0.0 when absent),
// 'model' (training mode, parameters requiring gradients), 'ema', 'updates', 'optimizer', 'opt',
// 'git': None, 'date'}, models in float16, optimizer state in float32), which the reference's
// `train.py --resume` (segment/train.py's for a SegmentationModel) continues. `model` is a
// DetectionModel or a SegmentationModel (yolo/model/segmentation_model.h), or a
// ClassificationModel: classify/train.py's checkpoint {'epoch', 'best_fitness', 'model': the EMA in
// float16 (eval mode), 'ema': None, 'updates', 'optimizer': None, 'opt', 'git': None, 'date'}, the
// model pickled as models.yolo.ClassificationModel (the backbone's rows, then models.common.Classify
// with its conv, pool, drop and linear, and a SiLU of its own as Conv.default_act gives the head;
// stride [8, 16, 32] as the detector it was cut from, save [], nc, names as a list); `training`
// must then be null. The reference's `transforms` attribute is not written (its tools build their
// own). Throws kestrel::Error for any other model, a module the reference's models do not hold, or
// I/O failures.
void write_reference_pt(const layers::Module& model, const std::string& path, const PtWriteOptions& o,
                        const PtTrainingState* training = nullptr);

}  // namespace kestrel::yolo
