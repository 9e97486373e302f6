// Minimal chart drawing on an OpenCV image (imgproc's drawing primitives): axes with tick labels
// at round values, line series, bars, scatter points and filled cells. The run directory's plots
// are made of these.
#pragma once
#include <opencv2/core.hpp>

#include <string>
#include <vector>

namespace kestrel::yolo {

// Round tick positions covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten, at most
// max_ticks of them inside the range (integer steps only when `integer`, for epochs).
std::vector<double> nice_ticks(double lo, double hi, int max_ticks = 6, bool integer = false);
// A tick's text with as many decimals as the step between ticks needs ("0.25", "1e-05", "40").
std::string tick_label(double value, double step);

// Sizes of a chart's text and margins (pixels) around its plot area.
struct ChartStyle {
  double font = 0.4;        // tick labels; title and axis labels are 1.25x
  int left = 52, right = 12, top = 26, bottom = 34;
  int max_ticks = 5;
  bool integer_x = false;   // integer x ticks (epochs)
  bool x_ticks = true;      // false: the caller labels the x axis itself (class names)
  bool y_ticks = true;      // false: the caller labels the y axis itself (timeline rows)
};

// A rectangular plot area inside a larger canvas, mapping data coordinates to pixels.
class Chart {
 public:
  // `frame`: the chart's cell in the canvas (title, tick labels and plot area all inside it).
  Chart(cv::Mat& canvas, cv::Rect frame, const std::string& title, double x0, double x1, double y0,
        double y1, const ChartStyle& style = {});
  cv::Point to_pixel(double x, double y) const;
  cv::Rect area() const { return area_; }
  void line(const std::vector<double>& xs, const std::vector<double>& ys, cv::Scalar colour,
            int thickness = 2, bool markers = false);
  void dotted(const std::vector<double>& xs, const std::vector<double>& ys, cv::Scalar colour,
              int thickness = 2);
  void bar(double x, double width, double height, cv::Scalar colour);
  void point(double x, double y, cv::Scalar colour, int radius = 1);
  // A filled rectangle between data corners (a 2-D histogram cell).
  void cell(double x0, double y0, double x1, double y1, cv::Scalar colour);
  void x_label(const std::string& text);
  void y_label(const std::string& text);  // turned, left of the tick labels
  // The frame drawn again over what the series painted.
  void close();

 private:
  cv::Mat& canvas_;
  cv::Rect frame_, area_;
  ChartStyle style_;
  double x0_, x1_, y0_, y1_;
};

// A distinct colour per class index (BGR), as the reference's palette cycles 20 colours.
cv::Scalar class_colour(int index);
// Text with a filled background box, top-left at `origin`.
void draw_label(cv::Mat& image, const std::string& text, cv::Point origin, cv::Scalar background,
                double scale = 0.4);
// Shortest readable number: 0.123, 12.3, 1.2e+04.
std::string short_number(double v);
// Writes a plot as PNG (".png") or JPEG (anything else).
void save_plot(const std::string& path, const cv::Mat& image);

}  // namespace kestrel::yolo
