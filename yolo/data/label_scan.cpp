#include "yolo/data/label_scan.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/error.h"
#include "yolo/data/image_codec.h"

namespace kestrel::yolo::data {
namespace {

// Python's float(): optional sign, decimal or exponent form, "inf"/"nan"; nothing else.
bool parse_number(std::string_view token, double& value) {
  if (!token.empty() && token.front() == '+') {
    token.remove_prefix(1);
    if (!token.empty() && (token.front() == '+' || token.front() == '-')) return false;
  }
  if (token.empty()) return false;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  return ec == std::errc() && end == token.data() + token.size();
}

std::vector<std::string_view> split_whitespace(std::string_view line) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > start) tokens.push_back(line.substr(start, i - start));
  }
  return tokens;
}

// A token as it can be printed: bytes outside printable ASCII as \xNN, so a NUL cannot cut the
// warning short and control bytes cannot move the terminal's cursor.
std::string printable(std::string_view token) {
  std::string out;
  for (const char c : token) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F) {
      out += c;
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
    }
  }
  return out;
}

// Rows of numbers, or the 1-based row and token that is not a finite number. Values go through
// float32 as in the reference (which reads labels with dtype=np.float32).
std::string parse_rows(std::string_view text, std::vector<std::vector<float>>& rows) {
  size_t row = 0, pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const auto tokens = split_whitespace(text.substr(pos, eol - pos));
    pos = eol + 1;
    if (tokens.empty()) continue;  // blank lines are not rows, as in the reference
    ++row;
    std::vector<float> values;
    for (std::string_view t : tokens) {
      double v = 0;
      if (!parse_number(t, v)) return str("row ", row, ": '", printable(t), "' is not a number");
      const float f = static_cast<float>(v);
      if (!std::isfinite(f)) return str("row ", row, ": value '", printable(t), "' is not finite");
      values.push_back(f);
    }
    rows.push_back(std::move(values));
  }
  return {};
}

// Polygon "x1 y1 x2 y2 ..." to its bounding box in centre/size form.
std::string polygon_box(const std::vector<float>& row, size_t row_number, LabelBox& box) {
  const size_t coords = row.size() - 1;
  if (coords < 2 || coords % 2 != 0)
    return str("row ", row_number, ": a polygon needs x y pairs, got ", coords, " coordinates");
  float x0 = row[1], x1 = row[1], y0 = row[2], y1 = row[2];
  for (size_t i = 1; i + 1 < row.size(); i += 2) {
    x0 = std::min(x0, row[i]), x1 = std::max(x1, row[i]);
    y0 = std::min(y0, row[i + 1]), y1 = std::max(y1, row[i + 1]);
  }
  box.x = (x0 + x1) / 2, box.y = (y0 + y1) / 2, box.w = x1 - x0, box.h = y1 - y0;
  return {};
}

std::string check_box(const LabelBox& b, float cls, size_t row, int class_limit) {
  if (cls < 0 || cls != std::floor(cls) || cls >= 2147483648.0f)
    return str("row ", row, ": class ", cls, " is not an integer in [0, 2^31)");
  if (class_limit > 0 && cls >= static_cast<float>(class_limit))
    return str("row ", row, ": class ", cls, " outside [0, ", class_limit,
               ") (the dataset yaml's nc is ", class_limit, ")");
  for (float v : {b.x, b.y, b.w, b.h})
    if (v < 0 || v > 1)
      return str("row ", row, ": coordinates must be normalised to [0, 1], got ", b.x, " ", b.y,
                 " ", b.w, " ", b.h);
  if (b.w <= 0 || b.h <= 0)
    return str("row ", row, ": box width and height must be > 0, got ", b.w, " ", b.h);
  return {};
}

bool read_file(const std::string& path, std::string& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// Empty when the image is usable; otherwise why not. Sets the size after EXIF orientation, and
// `restored` to the decoder's message for a damaged JPEG it recovered (the reference restores
// such files too). A JPEG whose header parses and whose marker chain is whole to its end marker
// is judged from those, as the reference judges from the header and the last two bytes (decoding
// every image made the scan of 20,000 images take 15 s on 2 cores, the reference's 3.5 s); any
// other file is decoded in full with the loader's own decoder, so a cut JPEG gets the decoder's
// own verdict and message.
std::string check_image(const std::string& path, int& width, int& height, std::string& restored) {
  try {
    const std::vector<uint8_t> bytes = read_file_bytes(path);
    if (bytes.empty()) return "empty file (0 bytes)";
    const ImageInfo info = probe_image(bytes, path);
    if (info.format == ImageFormat::Jpeg && jpeg_structure_intact(bytes)) {
      width = info.width, height = info.height;
    } else {
      const cv::Mat image = decode_image(bytes, path, &restored);
      width = image.cols, height = image.rows;
    }
  } catch (const std::exception& e) {  // one bad file must never stop the scan
    return e.what();
  }
  if (width < 10 || height < 10)
    return str("image size ", width, "x", height, " is below 10 pixels on a side");
  return {};
}

}  // namespace

std::string image_to_label_path(const std::string& image_path) {
  std::string p = image_path;
  const size_t at = p.rfind("/images/");
  if (at != std::string::npos) p.replace(at, 8, "/labels/");
  const size_t slash = p.rfind('/');
  const size_t dot = p.rfind('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) p.erase(dot);
  return p + ".txt";
}

ParsedLabels parse_labels(std::string_view text, int class_limit) {
  ParsedLabels out;
  std::vector<std::vector<float>> rows;
  out.error = parse_rows(text, rows);
  if (!out.error.empty()) return out;
  const bool polygons = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.size() > 6; });
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    LabelBox b;
    if (polygons) {
      out.error = polygon_box(r, i + 1, b);
    } else if (r.size() != 5) {
      out.error = str("row ", i + 1, ": expected 5 values (class x y w h), got ", r.size());
    } else {
      b.x = r[1], b.y = r[2], b.w = r[3], b.h = r[4];
    }
    if (out.error.empty()) out.error = check_box(b, r[0], i + 1, class_limit);
    if (!out.error.empty()) {
      out.boxes.clear();
      return out;
    }
    b.cls = static_cast<int>(r[0]);
    // Rows are few per image: a linear search keeps the first of each repeat in file order.
    if (std::find(out.boxes.begin(), out.boxes.end(), b) != out.boxes.end()) {
      ++out.duplicates;
    } else {
      out.boxes.push_back(b);
    }
  }
  return out;
}

PairCheck verify_image_label(const std::string& image_path, const std::string& label_path,
                             int class_limit) {
  PairCheck check;
  check.counts.total = 1;
  check.record.image_path = image_path;
  std::string restored;
  const std::string image_problem =
      check_image(image_path, check.record.width, check.record.height, restored);
  if (!image_problem.empty()) {
    check.counts.corrupt = 1;
    check.warning = str("WARNING: ", image_path, ": ignoring corrupt image: ", image_problem);
    return check;
  }
  // The reference rewrites such a file; we leave the user's file alone and decode it as it is.
  if (!restored.empty())
    check.warning = str("WARNING: ", image_path, ": corrupt JPEG restored (", restored,
                        "; what is missing decodes grey, the file is left unchanged)");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(label_path, ec)) {
    check.counts.missing = 1;  // no label file: a background image
    check.usable = true;
    return check;
  }
  check.counts.found = 1;
  std::string text;
  if (!read_file(label_path, text)) {
    check.counts.corrupt = 1;
    check.warning = str("WARNING: ", image_path, ": ignoring image, cannot read its labels ", label_path);
    return check;
  }
  ParsedLabels labels = parse_labels(text, class_limit);
  if (!labels.error.empty()) {
    check.counts.corrupt = 1;
    check.warning = str("WARNING: ", image_path, ": ignoring image with bad labels: ", label_path,
                        " ", labels.error);
    return check;
  }
  if (labels.boxes.empty()) check.counts.empty = 1;
  if (labels.duplicates > 0) {
    const std::string note = str(labels.duplicates, " duplicate labels removed (", label_path, ")");
    check.warning = check.warning.empty() ? str("WARNING: ", image_path, ": ", note)
                                          : str(check.warning, "; ", note);
  }
  check.record.boxes = std::move(labels.boxes);
  check.usable = true;
  return check;
}

ScanResult scan_images(const std::vector<std::string>& image_paths, int class_limit,
                       ThreadPool& pool) {
  std::vector<PairCheck> checks(image_paths.size());
  pool.parallel_for(0, static_cast<int64_t>(image_paths.size()), [&](int64_t i) {
    checks[i] = verify_image_label(image_paths[i], image_to_label_path(image_paths[i]), class_limit);
  });
  return collect_checks(std::move(checks));
}

ScanResult collect_checks(std::vector<PairCheck> checks) {
  ScanResult result;
  for (PairCheck& c : checks) {
    result.counts.found += c.counts.found;
    result.counts.missing += c.counts.missing;
    result.counts.empty += c.counts.empty;
    result.counts.corrupt += c.counts.corrupt;
    result.counts.total += c.counts.total;
    if (!c.warning.empty()) result.warnings.push_back(std::move(c.warning));
    if (c.usable) result.records.push_back(std::move(c.record));
  }
  return result;
}

std::string scan_summary(const std::string& what, const ScanCounts& counts) {
  return str("Scanning '", what, "'... ", counts.found, " images, ", counts.backgrounds(),
             " backgrounds, ", counts.corrupt, " corrupt");
}

}  // namespace kestrel::yolo::data
