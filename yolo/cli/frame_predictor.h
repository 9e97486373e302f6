// What `kestrel detect` (detect.py) and `kestrel segment predict` (segment/predict.py) do alike
// for one frame: their settings, the FramePredictor that the source loop (predict_run.h) drives,
// and the steps both take: letterboxing the frame into the model's input, saving a box's crop and
// the console line's "HxW 2 persons, 1 bus, 12.3ms" part.
#pragma once
#include <opencv2/core.hpp>

#include <map>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/tensor.h"
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

// One run's per-frame work. process() predicts on `frame` and annotates it in place (when the
// settings draw). `txt_stem` names the labels file (labels/<txt_stem>.txt, appended to),
// `crop_stem` the crops (crops/<class>/<crop_stem>.jpg, then <crop_stem>2.jpg, ...). Returns the
// console line's "HxW 2 persons, 1 bus, 12.3ms" part.
class FramePredictor {
 public:
  virtual ~FramePredictor() = default;
  virtual std::string process(cv::Mat& frame, const std::string& txt_stem, const std::string& crop_stem) = 0;
  virtual const DetectTimes& times() const = 0;
  virtual const std::string& save_dir() const = 0;
};

// A frame as the model takes it: letterboxed (BGR uint8, as the reference's LoadImages leaves
// it before the channel flip) and as the model's input, RGB in [0, 1], NHWC (1, h, w, 3), on
// `device` in the settings' dtype.
struct FrameInput {
  cv::Mat letterboxed;
  Tensor x;
};
FrameInput frame_input(const cv::Mat& frame, const DetectSettings& s, Device device);

// names[c], or the number when the model has no name for it.
std::string class_name(const std::vector<std::string>& names, int c);

// save_one_box: the box's region of `image` (grown as the reference grows it) to
// <save_dir>/crops/<name>/<stem>.jpg (then <stem>2.jpg, ...), at JPEG quality 95.
void save_box_crop(const std::string& save_dir, const cv::Mat& image, const float box[4], const std::string& name,
                   const std::string& stem);

// "HxW 2 persons, 1 bus, 12.3ms" ("HxW (no detections), 12.3ms"): the input's size, the count
// per class (in class order) and the inference time.
std::string frame_line(int h, int w, const std::map<int, int>& counts, const std::vector<std::string>& names,
                       double inference_ms);

}  // namespace kestrel::cli
