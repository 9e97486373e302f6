// Classifiers from files, as classify's commands read them: `--weights` of val and predict (a
// classifier's .pt or .safetensors), and classify/train.py's `--model` (a classifier, a detector cut
// at --cutoff with a new head, or a model yaml built the same way).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/safetensors_tensors.h"
#include "yolo/model/classification_model.h"
#include "yolo/model/weights.h"

namespace kestrel::yolo {

struct LoadedClassifier {
  std::shared_ptr<ClassificationModel> model;
  std::vector<std::string> names;  // the file's class names (empty when it has none)
  int img_size = 0;                // the size the file says it was trained at (0: unknown)
  bool from_detector = false;      // cut from a detection model at `cutoff`
  int cutoff = 0;
  TransferResult transfer;         // weights taken from a detector (training only)
};

// Whether `path` names a classifier's weights (a .pt or .safetensors whose model ends with
// Classify); false for detectors, ONNX graphs and files that are not weights (their readers say why).
bool is_classifier_weights(const std::string& path);

// A classifier's weights (the reference's classifier .pt, or Kestrel's .safetensors), in eval mode
// on `device`. A release name (yolov5s-cls.pt) is downloaded first. A detector's weights are
// refused, saying how to make a classifier of them.
LoadedClassifier load_classifier_weights(const std::string& path, Device device);

// classify/train.py's --model: a classifier's weights (its head remade for `nc` classes when it
// predicts another count), a detector's weights (cut at cutoff, default 10, with a new Classify head:
// the weights of the kept layers transferred; the reference warns to pass a -cls model), or a
// model yaml (a detector's, cut the same way, or a classifier's). Not `pretrained`: every weight
// is initialised afresh, as the reference's reset_parameters(). seed drives new weights.
LoadedClassifier load_classifier_for_training(const std::string& model, int nc, std::optional<int> cutoff,
                                              bool pretrained, uint64_t seed);

}  // namespace kestrel::yolo
