// The one door for every file given to --weights (train, val, detect, export): Kestrel's
// safetensors, or an ultralytics YOLOv5 v7.0 .pt read directly (yolo/pt_checkpoint.h), told
// apart by their first bytes, not their names. Both come back as a SafetensorsFile with the same
// tensor names and metadata, so the loaders in yolo/weights.h need not know which it was. Any
// other file (a legacy-format or TorchScript .pt, ONNX, an image, a yaml) is refused with a
// message saying what it is and what to give instead. A release name that is no file yet
// (yolov5s.pt) or a URL is downloaded first, as the reference does (yolo/release_weights.h).
#pragma once
#include <string>

#include "engine/safetensors.h"

namespace kestrel::yolo {

SafetensorsFile read_weights_file(const std::string& path);

// The same from bytes already in memory; `path` only names it in messages.
SafetensorsFile parse_weights_file(std::string bytes, const std::string& path);

// A whole file's bytes; throws naming `path` when it cannot be read.
std::string read_file_bytes(const std::string& path);

// True for weights read from a YOLOv5 .pt (their metadata says so).
bool is_pt_weights(const SafetensorsFile& file);

}  // namespace kestrel::yolo
