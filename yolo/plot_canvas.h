// Minimal chart drawing on an OpenCV image (imgproc's drawing primitives): axes with tick labels,
// line series, bars, scatter points and heat maps. The run directory's plots are made of these.
#pragma once
#include <opencv2/core.hpp>

#include <string>
#include <vector>

namespace kestrel::yolo {

// A rectangular plot area inside a larger canvas, mapping data coordinates to pixels.
class Chart {
 public:
  // `frame`: the chart's cell in the canvas (title, tick labels and plot area all inside it).
  Chart(cv::Mat& canvas, cv::Rect frame, const std::string& title, double x0, double x1, double y0,
        double y1);
  cv::Point to_pixel(double x, double y) const;
  void line(const std::vector<double>& xs, const std::vector<double>& ys, cv::Scalar colour,
            int thickness = 2, bool markers = false);
  void dashed(const std::vector<double>& xs, const std::vector<double>& ys, cv::Scalar colour);
  void bar(double x, double width, double height, cv::Scalar colour);
  void point(double x, double y, cv::Scalar colour, int radius = 1);
  void x_label(const std::string& text);
  void y_label(const std::string& text);

 private:
  cv::Mat& canvas_;
  cv::Rect area_;
  double x0_, x1_, y0_, y1_;
};

// A distinct colour per class index (BGR), as the reference's palette cycles 20 colours.
cv::Scalar class_colour(int index);
// Text with a filled background box, top-left at `origin`.
void draw_label(cv::Mat& image, const std::string& text, cv::Point origin, cv::Scalar background,
                double scale = 0.4);
// Shortest readable number: 0.123, 12.3, 1.2e+04.
std::string short_number(double v);

}  // namespace kestrel::yolo
