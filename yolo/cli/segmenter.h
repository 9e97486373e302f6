// One `kestrel segment predict` run's per-frame work, as the loop body of the reference v7.0's
// segment/predict.py: letterbox, model, NMS with the 32 mask coefficients, the masks of the kept
// detections (process_mask on the prototypes, upsampled to the input), boxes back to the frame
// (rounded), then what the flags ask for: the masks drawn (Annotator.masks: blended into the
// letterboxed input and the result resized to the frame, or with --retina-masks the masks resized
// to the frame and blended into it), boxes and labels drawn over them, --save-txt polygons and
// --save-crop crops. Saving and showing the frame stay with the source loop (predict_run.h).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "yolo/cli/frame_predictor.h"
#include "yolo/model/segmentation_model.h"

namespace kestrel::cli {

class Segmenter : public FramePredictor {
 public:
  // A segmentation model's forward: NHWC input -> decoded boxes (1, N, 5 + nc + nm) and prototypes
  // NHWC (1, h / 4, w / 4, nm), as SegmentationModel::predict gives them (an .onnx export's in
  // OpenCV DNN: yolo/export/onnx_model.h).
  using Predictor = std::function<yolo::SegmentationModel::Prediction(const Tensor& x)>;
  // `model` in eval mode on `device`; settings.nms.nm is set to the model's mask count here.
  Segmenter(std::shared_ptr<yolo::SegmentationModel> model, std::vector<std::string> names, DetectSettings settings,
            bool retina_masks, Device device, std::string save_dir);
  // Any predictor of `nm` mask coefficients, its input on `device`.
  Segmenter(Predictor predict, int64_t nm, std::vector<std::string> names, DetectSettings settings, bool retina_masks,
            Device device, std::string save_dir);

  std::string process(cv::Mat& frame, const std::string& txt_stem, const std::string& crop_stem) override;
  const DetectTimes& times() const override { return times_; }
  const std::string& save_dir() const override { return save_dir_; }

 private:
  void draw_masks(cv::Mat& frame, const cv::Mat& letterboxed, const Tensor& masks, const std::vector<int>& classes) const;

  Predictor predict_;
  std::vector<std::string> names_;
  DetectSettings s_;
  bool retina_masks_;
  Device device_;
  std::string save_dir_;
  DetectTimes times_;
};

// One --save-txt line of segment/predict.py, without newline: the class, the polygon's points
// x y in the original image's pixels normalised by its size, and the confidence with save_conf,
// each printed with %g. The polygon comes from the letterboxed input's mask (points in its
// pixels), mapped as the reference's scale_segments(normalize=True) maps it, in float32: padding
// subtracted, divided by the gain, clipped to the image, divided by its width and height.
std::string polygon_txt_line(int cls, const std::vector<std::array<float, 2>>& polygon, float conf, int in_h, int in_w,
                             int height, int width, bool save_conf);

}  // namespace kestrel::cli
