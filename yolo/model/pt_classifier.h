// A reference ClassificationModel read from a .pt: v7.0's classifiers carry no yaml (the reference
// builds them by cutting a DetectionModel), so their rows are read back from the pickled module
// records (each layer's class, its `f`, and the shapes and settings of its convolutions), as the
// yaml that would build the same modules with depth and width gains of 1. Nothing is run.
#pragma once
#include <string>

#include "io/pickle.h"

namespace kestrel::yolo {

// The model yaml of a pickled models.yolo.ClassificationModel record (its `model` Sequential of
// Conv, C3, SPPF, Bottleneck, Concat and nn.Upsample layers ending with Classify). Throws, naming
// `path`, for a layer Kestrel cannot build or a record that does not hold what such a layer has.
std::string classifier_yaml_from_pt(const pickle::Value& model, const std::string& path);

}  // namespace kestrel::yolo
