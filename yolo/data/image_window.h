// `kestrel detect --view-img`: annotated frames in windows, through OpenCV's highgui where this
// build has it (-DKESTREL_HIGHGUI=ON with libopencv-highgui-dev; off by default, as it loads a GUI
// toolkit into every run of the binary).
#pragma once
#include <opencv2/core.hpp>

#include <set>
#include <string>

namespace kestrel::yolo::data {

// "" when windows can be shown here; otherwise why not, for the user: no display (neither DISPLAY
// nor WAYLAND_DISPLAY is set: pass their values), or a build without highgui.
std::string view_unavailable_reason(const char* display, const char* wayland_display);

// One window per name, sized to its first image; each show() waits 1 ms for the GUI to draw.
class ImageWindows {
 public:
  ImageWindows() = default;
  ImageWindows(const ImageWindows&) = delete;
  ImageWindows& operator=(const ImageWindows&) = delete;
  ~ImageWindows();
  void show(const std::string& name, const cv::Mat& bgr);

 private:
  std::set<std::string> opened_;
};

}  // namespace kestrel::yolo::data
