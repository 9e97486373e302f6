// Building a model for val/detect from a weights file: a training checkpoint (full or stripped)
// carries its model yaml, class count and names in its "options" metadata; weights converted by
// scripts/convert_ultralytics.py carry them as the metadata entries "model_yaml" (the yaml text),
// "nc" and "names" (a JSON list); other plain weights files need --cfg (and the class count from
// --nc or the dataset). An .onnx (val and detect only; a -seg model's: segment val and predict,
// through load_onnx_model and the settings below) runs in OpenCV DNN on the CPU, with its stride
// and names from its metadata (yolo/export/onnx_model.h).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "yolo/export/onnx_model.h"
#include "yolo/model/model.h"

namespace kestrel::yolo {
struct ValOptions;
}  // namespace kestrel::yolo

namespace kestrel::cli {

struct DetectSettings;

struct InferenceModel {
  std::shared_ptr<yolo::DetectionModel> model;  // .safetensors and .pt weights
  std::shared_ptr<yolo::OnnxModel> onnx;        // .onnx weights
  std::vector<std::string> names;               // empty when the file has none
  bool augment = false;                         // --augment (test-time augmentation; not for ONNX)

  int64_t nc() const;  // the classes predicted (0: unknown, an ONNX graph of dynamic output)
  int stride() const;  // the largest stride, at least 32
  // NHWC images on the model's device -> decoded boxes (batch, N, 5 + nc).
  Tensor predict(const Tensor& images);
};

// nc applies to plain weights files; a checkpoint's own class count always wins. allow_onnx:
// val and detect run .onnx files; elsewhere they are refused, saying why.
InferenceModel load_inference_model(const std::string& weights, const std::string& cfg,
                                    std::optional<int> nc, Device device, bool allow_onnx = false);

// cpu, a GPU index, or the first GPU when `spec` is empty and one is present; says which, in the
// start-up line (yolo/common/version.h), as the reference's select_device does.
Device inference_device(const std::string& spec);

// val's and detect's shared precision and augmentation flags. --half: float16 inference on CUDA;
// on the CPU bfloat16 activations where it has AVX-512 BF16 or AMX and --augment is off (set it
// first), else float32 with a note; ignored with a note for ONNX weights (run by OpenCV DNN on the
// CPU), as the reference ignores it there. --augment: ignored with a note for ONNX weights, as the
// reference's non-PyTorch backends ignore it. Returns the input dtype. The second form (`kestrel
// segment`'s models) ignores --half on the CPU, as the reference does.
DType inference_dtype(bool half, const InferenceModel& im, Device device);
DType inference_dtype(bool half, bool onnx, Device device);
void set_augment(bool augment, InferenceModel& im);
// --tf32 on|off (default on, as PyTorch's cudnn.allow_tf32): CUDA float32 convolutions may use TF32
// tensor cores; off keeps them on FMA math. Nothing changes on the CPU or for ONNX weights.
void set_tf32(const std::string& tf32, InferenceModel& im);

// An .onnx at `weights` (a local file), refused unless it is a `segmentation` model's export (true)
// or a detector's (false), naming the commands that run the other kind.
std::shared_ptr<yolo::OnnxModel> load_onnx_model(const std::string& weights, bool segmentation);

// As the reference validates weights other than PyTorch's (val, segment val): square letterboxed
// images one at a time (a fixed-size export at its own size), on the CPU where OpenCV DNN runs
// them, each change said. Returns the device the batches go to.
Device onnx_val_settings(const yolo::OnnxModel& onnx, Device device, yolo::ValOptions& vo);

// As the reference predicts with weights other than PyTorch's (detect, segment predict): on the
// CPU (OpenCV DNN), each frame padded to the full size (no minimal padding), a fixed-size export
// at its own size (`size`: --img-size's height and width). Returns the device the frames go to.
Device onnx_predict_settings(const yolo::OnnxModel& onnx, Device device, std::vector<int>& size, DetectSettings& s);

}  // namespace kestrel::cli
