// Model weights in safetensors under the reference's state-dict names ("model.0.conv.weight",
// "model.0.bn.num_batches_tracked", "model.24.anchors", ...), conv weights OIHW in the file
// whatever the layout in memory.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/safetensors_tensors.h"
#include "layers/module.h"

namespace kestrel::yolo {

// Throws, naming `path` and the first tensor (in file order) under `prefix` whose floating-point
// values include NaN or Inf. A run that diverged saves such weights; loading them would only move
// the failure to the first forward pass, far from its cause. Integer tensors are not checked.
// Every loader below calls it before copying anything into the model.
void check_finite(const SafetensorsFile& file, const std::string& path, const std::string& prefix = "");

// Floating-point tensors are written as `dtype` (F32 or F16); integer buffers keep their type.
// `prefix` names the whole model: "model" writes "model.<name>", as a stripped checkpoint holds it.
void save_weights(layers::Module& model, const std::string& path, DType dtype = DType::F32,
                  const std::map<std::string, std::string>& metadata = {}, const std::string& prefix = "");

// Every model tensor must be in the file with the same shape and a compatible dtype (any float
// type for float tensors), and the file must hold nothing else; otherwise one error lists every
// mismatch. Values are converted to the model's dtype and device.
// `prefix` selects one module's tensors in a file holding several (a checkpoint's "ema." or
// "model."); names without it are then ignored.
// The file is read by yolo/model/weights_file.h: safetensors or a YOLOv5 v7.0 .pt.
void load_weights(layers::Module& model, const std::string& path, const std::string& prefix = "");
void load_weights(layers::Module& model, const SafetensorsFile& file, const std::string& prefix = "");

// Which weights of a file serve inference and fine-tuning: "ema." in a training checkpoint (as the
// reference's best.pt holds the EMA), "model." in a stripped one (float16, converted on load) or
// one saved without EMA, "" in a plain weights file.
std::string inference_prefix(const SafetensorsFile& file);

// The model yaml a weights file carries: a training checkpoint's options' cfg_yaml, or the
// model_yaml of converted or .pt weights. Throws, naming the file, when it has none: plain
// weights need --cfg.
std::string weights_model_yaml(const SafetensorsFile& file);

// For inference (val, detect): the weights inference_prefix picks. Returns the prefix used.
std::string load_inference_weights(layers::Module& model, const std::string& path);

// As the reference does when fine-tuning from another model: copies the tensors whose names
// and shapes match (names containing any of `exclude` are skipped), leaves the rest as they are.
struct TransferResult {
  int transferred = 0;
  int total = 0;  // tensors in the model's state
};
TransferResult transfer_weights(layers::Module& model, const std::string& path,
                                const std::vector<std::string>& exclude = {},
                                const std::string& prefix = "");
TransferResult transfer_weights(layers::Module& model, const SafetensorsFile& file,
                                const std::vector<std::string>& exclude = {},
                                const std::string& prefix = "");

// The reference's model.half().float() (train.py and segment/train.py, a fresh run's last step
// before training, "pre-reduce anchor precision"): every floating-point parameter and buffer,
// anchors and BN statistics included, rounded to the nearest float16 (ties to even, overflow to
// inf, as torch's .half()) and back; integer buffers unchanged.
void round_to_half_precision(layers::Module& model);

}  // namespace kestrel::yolo
