// The run around the per-frame work that `kestrel detect` (detect.py) and `kestrel segment
// predict` (segment/predict.py) share: their common flags read into settings, the input size, the
// class names, the source loop (images, videos, streams, as yolo/data/detect_sources.h expands
// them) with saving and showing, and the closing report.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "yolo/cli/args.h"
#include "yolo/cli/frame_predictor.h"
#include "yolo/common/stop_signal.h"
#include "yolo/data/detect_sources.h"
#include "yolo/data/image_window.h"

namespace kestrel::cli {

// --img-size H [W] (one size is square), checked.
std::vector<int> requested_size(const Args& args);

// The size rounded up to multiples of the stride, as the reference's check_img_size (warning when
// it changes).
std::pair<int, int> image_size(const std::vector<int>& size, int stride);

// The drawing, saving and NMS settings of the shared flags (--conf-thres, --iou-thres, --max-det,
// --classes, --agnostic-nms, --save-txt, --save-conf, --save-crop, --hide-labels, --hide-conf,
// --line-thickness, --visualize).
DetectSettings predict_settings(const Args& args, bool save_img, bool view_img);

// The class names a run labels with: the model's own; else --data's (`data_names`, which must
// name `nc` classes when nc is known); else, for 80 classes, COCO's (as the reference's default
// --data coco128.yaml); else none (numbers are drawn).
std::vector<std::string> label_names(std::vector<std::string> own, const std::vector<std::string>& data_names,
                                     int64_t nc, const std::string& data_flag);

// The --view-img check: throws a UsageError saying why no window can be shown here.
void check_view_img();

// Videos and streams need OpenCV videoio: says so before anything runs.
void check_sources(const std::vector<yolo::data::SourceItem>& items);

struct PredictOutputs {
  bool save_img = true;
  yolo::data::ImageWindows* windows = nullptr;  // --view-img
};

struct ImageCounts {
  size_t images = 0, skipped = 0;
};

// Every source in turn, until a signal: each image predicted, printed ("image 1/2 PATH: ...") and
// saved under its own name; each video's or stream's frames, saved as <stem>.mp4. An unreadable
// image is skipped (and counted), as one bad file in a folder must not cost the results of all
// the others.
ImageCounts run_sources(FramePredictor& predictor, const std::vector<yolo::data::SourceItem>& items, int vid_stride,
                        const PredictOutputs& out, const yolo::StopSignal& stop);

// The reference's closing lines: skipped files, the speed line, where the results went. Throws
// when no image of the source could be read.
void report(const ImageCounts& c, const std::string& source, const DetectTimes& t, const DetectSettings& s,
            bool save_img, const std::string& save_dir);

}  // namespace kestrel::cli
