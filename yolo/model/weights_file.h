// The one door for every file given to --weights (train, val, detect, export): Kestrel's
// safetensors, or an ultralytics YOLOv5 v7.0 .pt read directly (yolo/model/pt_checkpoint.h), told
// apart by their first bytes, not their names. Both come back as a SafetensorsFile with the same
// tensor names and metadata, so the loaders in yolo/model/weights.h need not know which it was. ONNX
// graphs are recognised here too (val and detect run them, yolo/export/onnx_model.h). Any other
// file (a TorchScript, TensorFlow, TFLite, OpenVINO, CoreML, TensorRT or PaddlePaddle export, a
// legacy-format .pt, an image, a yaml, an empty or cut-short file, a folder) is refused with a
// message saying what it is and what to give instead. A release name that is no file yet
// (yolov5s.pt) or a URL is downloaded first, as the reference does (yolo/model/release_weights.h).
#pragma once
#include <string>
#include <string_view>

#include "engine/safetensors_tensors.h"

namespace kestrel::yolo {

enum class WeightsFormat { kSafetensors, kPt, kOnnx };

// Which format `path` holds, from its first bytes (and, for the exports of other runtimes, which
// carry no magic, its name). Throws for anything Kestrel cannot run, saying what it is.
WeightsFormat weights_format(const std::string& path);

// A safetensors or .pt file's weights; an ONNX graph is refused (it has no trainable weights).
SafetensorsFile read_weights_file(const std::string& path);

// The same from bytes already in memory; `path` only names it in messages.
SafetensorsFile parse_weights_file(std::string bytes, const std::string& path);

// A whole file's bytes; throws naming `path` when it cannot be read.
std::string read_file_bytes(const std::string& path);

// True for weights read from a YOLOv5 .pt (their metadata says so).
bool is_pt_weights(const SafetensorsFile& file);

// True when `bytes` start as a serialised ONNX ModelProto does: field 1 (ir_version, a small
// varint), then another of the ModelProto's fields.
bool looks_like_onnx(std::string_view bytes);

}  // namespace kestrel::yolo
