#include "yolo/data/seg_labels.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/error.h"

namespace kestrel::yolo::data {
namespace {

// The rows of numbers of a label file that parse_labels has accepted, so every token is a finite
// number in Python's float() syntax. Rows and blank lines are split as parse_labels splits them.
std::vector<std::vector<float>> accepted_rows(std::string_view text) {
  std::vector<std::vector<float>> rows;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    std::vector<float> values;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      const size_t start = i;
      while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      if (i == start) continue;
      std::string_view token = line.substr(start, i - start);
      if (token.front() == '+') token.remove_prefix(1);
      double v = 0;
      std::from_chars(token.data(), token.data() + token.size(), v);
      values.push_back(static_cast<float>(v));
    }
    if (!values.empty()) rows.push_back(std::move(values));
  }
  return rows;
}

// segments2boxes for one row (class then x y pairs), in float32 as the reference computes it.
LabelBox row_box(const std::vector<float>& row) {
  float x0 = row[1], x1 = row[1], y0 = row[2], y1 = row[2];
  for (size_t i = 1; i + 1 < row.size(); i += 2) {
    x0 = std::min(x0, row[i]), x1 = std::max(x1, row[i]);
    y0 = std::min(y0, row[i + 1]), y1 = std::max(y1, row[i + 1]);
  }
  LabelBox b;
  b.cls = static_cast<int>(row[0]);
  b.x = (x0 + x1) / 2, b.y = (y0 + y1) / 2, b.w = x1 - x0, b.h = y1 - y0;
  return b;
}

}  // namespace

ParsedSegLabels parse_segment_labels(std::string_view text, int class_limit) {
  ParsedSegLabels out;
  ParsedLabels checked = parse_labels(text, class_limit);
  out.error = std::move(checked.error);
  out.duplicates = checked.duplicates;
  if (!out.error.empty()) return out;
  const auto rows = accepted_rows(text);
  const bool polygons =
      std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.size() > 6; });
  if (polygons) {
    // The same float32 boxes and first-of-each-repeat rule as parse_labels, so the polygons kept
    // line up with its boxes.
    std::vector<LabelBox> kept;
    for (const auto& r : rows) {
      const LabelBox b = row_box(r);
      if (std::find(kept.begin(), kept.end(), b) != kept.end()) continue;
      kept.push_back(b);
      out.segments.emplace_back(r.begin() + 1, r.end());
    }
  }
  out.boxes = std::move(checked.boxes);
  return out;
}

SegPairCheck verify_image_segments(const std::string& image_path, const std::string& label_path,
                                   int class_limit) {
  SegPairCheck out;
  out.check = verify_image_label(image_path, label_path, class_limit);
  if (!out.check.usable || out.check.record.boxes.empty()) return out;
  std::ifstream in(label_path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  ParsedSegLabels labels = parse_segment_labels(text, class_limit);
  // The file changed between the two reads: refuse it rather than pair boxes with other polygons.
  if (!labels.error.empty() || labels.boxes != out.check.record.boxes) {
    out.check.usable = false;
    out.check.counts.corrupt = 1;
    out.check.counts.empty = 0;
    out.check.warning = str("WARNING: ", image_path, ": ignoring image, its labels ", label_path,
                            " changed while being read");
    return out;
  }
  out.segments = std::move(labels.segments);
  return out;
}

PixelSegment resample_segment(const PixelSegment& points, int n) {
  if (points.empty() || n <= 0) return {};
  PixelSegment closed = points;
  closed.push_back(points.front());
  const int64_t last = static_cast<int64_t>(closed.size()) - 1;
  // np.linspace(0, last, n): i * step, the end point exactly `last`.
  const double step = n > 1 ? static_cast<double>(last) / (n - 1) : 0.0;
  PixelSegment out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double x = (n > 1 && i == n - 1) ? static_cast<double>(last) : i * step;
    // np.interp over xp = 0, 1, ..., last: the point itself at an integer, else the segment's
    // slope times the distance from its start.
    int64_t j = std::min<int64_t>(static_cast<int64_t>(x), last);
    if (x == static_cast<double>(j)) {
      out[i] = closed[j];
      continue;
    }
    const cv::Point2d a = closed[j], b = closed[j + 1];
    const double t = x - static_cast<double>(j);
    out[i] = {(b.x - a.x) * t + a.x, (b.y - a.y) * t + a.y};
  }
  return out;
}

std::array<double, 4> segment_to_box(const PixelSegment& points, double width, double height) {
  bool any_nonzero_x = false, any = false;
  std::array<double, 4> box{0, 0, 0, 0};
  for (const cv::Point2d& p : points) {
    if (!(p.x >= 0 && p.y >= 0 && p.x <= width && p.y <= height)) continue;
    if (!any) {
      box = {p.x, p.y, p.x, p.y};
      any = true;
    }
    box[0] = std::min(box[0], p.x), box[1] = std::min(box[1], p.y);
    box[2] = std::max(box[2], p.x), box[3] = std::max(box[3], p.y);
    any_nonzero_x = any_nonzero_x || p.x != 0;
  }
  if (!any_nonzero_x) return {0, 0, 0, 0};
  return box;
}

PixelSegment segment_to_pixels(const std::vector<float>& normalised, double w, double h,
                               double padw, double padh) {
  const float fw = static_cast<float>(w), fh = static_cast<float>(h);
  const float fpw = static_cast<float>(padw), fph = static_cast<float>(padh);
  PixelSegment out;
  out.reserve(normalised.size() / 2);
  for (size_t i = 0; i + 1 < normalised.size(); i += 2)
    out.emplace_back(fw * normalised[i] + fpw, fh * normalised[i + 1] + fph);
  return out;
}

}  // namespace kestrel::yolo::data
