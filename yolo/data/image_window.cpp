#include "yolo/data/image_window.h"

#include "base/error.h"

#if KESTREL_HAVE_HIGHGUI
#include <opencv2/highgui.hpp>
#endif

namespace kestrel::yolo::data {
namespace {

bool set(const char* v) { return v != nullptr && v[0] != '\0'; }

constexpr const char* kNoHighgui =
    "this kestrel was built without OpenCV highgui, which shows windows; rebuild with "
    "-DKESTREL_HIGHGUI=ON (needs libopencv-highgui-dev), or drop --view-img: the annotated "
    "images are saved in the run directory";

}  // namespace

std::string view_unavailable_reason(const char* display, const char* wayland_display) {
  if (!set(display) && !set(wayland_display))
    return "there is no display here (neither DISPLAY nor WAYLAND_DISPLAY is set); drop "
           "--view-img: the annotated images are saved in the run directory";
#if KESTREL_HAVE_HIGHGUI
  return "";
#else
  return kNoHighgui;
#endif
}

#if KESTREL_HAVE_HIGHGUI

ImageWindows::~ImageWindows() {
  if (!opened_.empty()) cv::destroyAllWindows();
}

void ImageWindows::show(const std::string& name, const cv::Mat& bgr) {
  if (opened_.insert(name).second) {
    cv::namedWindow(name, cv::WINDOW_NORMAL | cv::WINDOW_KEEPRATIO);
    cv::resizeWindow(name, bgr.cols, bgr.rows);
  }
  cv::imshow(name, bgr);
  cv::waitKey(1);
}

#else

ImageWindows::~ImageWindows() = default;

void ImageWindows::show(const std::string& name, const cv::Mat&) {
  KESTREL_FAIL("cannot show '", name, "': ", kNoHighgui);
}

#endif

}  // namespace kestrel::yolo::data
