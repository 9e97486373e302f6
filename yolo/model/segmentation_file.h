// Segmentation models from files, as `kestrel segment predict` and `kestrel export` read them: the
// reference's -seg .pt (a SegmentationModel whose last module is Segment) or Kestrel's
// .safetensors of one, told apart from detectors and classifiers by the model yaml they carry.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "yolo/model/segmentation_model.h"

namespace kestrel::yolo {

struct LoadedSegmenter {
  std::shared_ptr<SegmentationModel> model;  // eval mode, on the device asked for
  std::vector<std::string> names;            // the file's class names (empty when it has none)
};

// The model of `path` when it is a segmentation model's weights; nullopt for anything else (a
// detector, a classifier, an ONNX graph, plain weights without their yaml, a missing or unreadable
// file: the detector's or classifier's reader then says what is wrong with it).
std::optional<LoadedSegmenter> try_load_segmentation_weights(const std::string& path, Device device);

// The same, refusing anything but a segmentation model's weights with a message saying what the
// file is and what runs it (kestrel detect for a detector, kestrel classify for a classifier).
LoadedSegmenter load_segmentation_weights(const std::string& path, Device device);

}  // namespace kestrel::yolo
