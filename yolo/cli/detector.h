// One `kestrel detect` run's per-frame work, as the reference's detect.py loop body: letterbox,
// model, NMS, boxes back to the frame (rounded), then the outputs the flags ask for: --save-txt
// lines, the annotated frame, --save-crop crops. Saving the frame itself (image or video) and
// showing it stay with the caller, which knows where frames come from.
#pragma once
#include <opencv2/core.hpp>

#include <string>
#include <vector>

#include "engine/device.h"
#include "yolo/cli/frame_predictor.h"
#include "yolo/cli/inference_model.h"

namespace kestrel::cli {

class Detector : public FramePredictor {
 public:
  Detector(InferenceModel model, DetectSettings settings, Device device, std::string save_dir);

  // Detects on `frame` (FramePredictor::process). With settings.visualize the feature maps go to
  // <save_dir>/<crop_stem> (then <crop_stem>2, ... for later frames), as the reference's.
  std::string process(cv::Mat& frame, const std::string& txt_stem, const std::string& crop_stem) override;

  const DetectTimes& times() const override { return times_; }
  const std::string& save_dir() const override { return save_dir_; }

 private:
  Tensor predict(const Tensor& x, const std::string& stem);

  InferenceModel model_;
  DetectSettings s_;
  Device device_;
  std::string save_dir_;
  DetectTimes times_;
};

}  // namespace kestrel::cli
