// Text and colour for the run directory's plots, on OpenCV images (imgproc's Hershey font): text
// placed by an anchor, text turned 90 degrees, a legend box, and the sequential "Blues" colour
// map the reference's heat maps use.
#pragma once
#include <opencv2/core.hpp>

#include <string>
#include <vector>

namespace kestrel::yolo {

const cv::Scalar kPlotInk(40, 40, 40);

// Where `at` sits on the text's box: horizontally left/centre/right, vertically top/middle/bottom.
enum class Align { kStart, kCentre, kEnd };

cv::Size text_size(const std::string& text, double scale);
// Text whose box is anchored at `at` (h: along x, v: along y).
void put_text(cv::Mat& canvas, const std::string& text, cv::Point at, double scale,
              Align h = Align::kStart, Align v = Align::kEnd, cv::Scalar colour = kPlotInk);
// Text reading bottom to top (a y-axis label, a column name), its box anchored at `at` as
// put_text's after the turn (h along x, v along y).
void put_text_vertical(cv::Mat& canvas, const std::string& text, cv::Point at, double scale,
                       Align h = Align::kCentre, Align v = Align::kCentre, cv::Scalar colour = kPlotInk);

struct LegendEntry {
  std::string text;
  cv::Scalar colour;
  int thickness = 2;
  bool dotted = false;
};
// A framed legend with its top-left corner at `origin`; returns the box it took. Entries that
// would fall off the canvas are left out.
cv::Rect draw_legend(cv::Mat& canvas, const std::vector<LegendEntry>& entries, cv::Point origin,
                     double scale);

// matplotlib's default colour cycle ("tab10", BGR), as the reference's per-class curves take it:
// blue, orange, green, red, purple, brown, pink, grey, olive, cyan, then again.
cv::Scalar tab10(int index);

// matplotlib's "Blues" colour map (BGR) at t in [0, 1]: near-white to dark blue.
cv::Scalar blues(double t);

// matplotlib's "viridis" colour map (BGR) at t in [0, 1]: dark purple to yellow.
cv::Scalar viridis(double t);

}  // namespace kestrel::yolo
