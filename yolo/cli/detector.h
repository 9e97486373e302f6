// One `kestrel detect` run's per-frame work, as the reference's detect.py loop body: letterbox,
// model, NMS, boxes back to the frame (rounded), then the outputs the flags ask for: --save-txt
// lines, the annotated frame, --save-crop crops. Saving the frame itself (image or video) and
// showing it stay with the caller, which knows where frames come from.
#pragma once
#include <opencv2/core.hpp>

#include <string>
#include <vector>

#include "engine/device.h"
#include "yolo/cli/inference_model.h"
#include "yolo/eval/nms.h"

namespace kestrel::cli {

struct DetectSettings {
  yolo::NmsOptions nms;
  int img_h = 640, img_w = 640;  // multiples of the stride
  int stride = 32;
  bool draw = true;  // annotate the frame (saving or showing it)
  bool save_txt = false, save_conf = false, save_crop = false;
  bool hide_labels = false, hide_conf = false;
  int line_thickness = 3;  // <= 0: from the frame size, as the reference's Annotator
  DType dtype = DType::F32;      // the model's input: float16 for --half on CUDA
  bool letterbox_auto = true;    // the smallest stride-multiple padding (false: the full size, ONNX)
  bool visualize = false;        // --visualize: each stage's feature maps, per frame
};

// Milliseconds spent per stage over all frames, for the Speed line.
struct DetectTimes {
  double pre = 0, inference = 0, nms = 0;
  int64_t frames = 0;
};

class Detector {
 public:
  Detector(InferenceModel model, DetectSettings settings, Device device, std::string save_dir);

  // Detects on `frame` and annotates it in place (with settings.draw). `txt_stem` names the
  // labels file (labels/<txt_stem>.txt, appended to), `crop_stem` the crops
  // (crops/<class>/<crop_stem>.jpg, then <crop_stem>2.jpg, ...). Returns the console line's
  // "HxW 2 persons, 1 bus, 12.3ms" part. With settings.visualize the feature maps go to
  // <save_dir>/<crop_stem> (then <crop_stem>2, ... for later frames), as the reference's.
  std::string process(cv::Mat& frame, const std::string& txt_stem, const std::string& crop_stem);

  const DetectTimes& times() const { return times_; }
  const std::string& save_dir() const { return save_dir_; }

 private:
  std::string class_name(int c) const;
  Tensor predict(const Tensor& x, const std::string& stem);
  void save_crop(const cv::Mat& image, const float box[4], int cls, const std::string& stem) const;

  InferenceModel model_;
  DetectSettings s_;
  Device device_;
  std::string save_dir_;
  DetectTimes times_;
};

}  // namespace kestrel::cli
