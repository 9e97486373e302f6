#include "yolo/data/synthetic.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/imgproc.hpp>
#include <thread>

#include "base/error.h"
#include "engine/random.h"
#include "engine/thread_pool.h"
#include "io/atomic_file.h"
#include "yolo/data/image_codec.h"

namespace kestrel::yolo::data {
namespace {

namespace fs = std::filesystem;

// Bump when anything below changes what is generated: old caches are then regenerated.
constexpr const char* kGeneratorVersion = "kestrel-synthetic v1";
constexpr int kWidth = 320;
constexpr int kMargin = 80;  // shapes are drawn on a canvas this much larger on each side
constexpr int kJpegQuality = 90;
constexpr double kPi = 3.14159265358979323846;

struct Shape {
  cv::Mat canvas_mask;  // CV_8U over the padded canvas, 255 inside the shape
  int cls = 0;
};

cv::Point2f rotated(float dx, float dy, float angle) {
  const float c = std::cos(angle), s = std::sin(angle);
  return {dx * c - dy * s, dx * s + dy * c};
}

std::vector<cv::Point> to_points(const cv::Point2f& centre, const std::vector<cv::Point2f>& offsets,
                                 float angle) {
  std::vector<cv::Point> pts;
  for (const cv::Point2f& o : offsets) {
    const cv::Point2f p = centre + rotated(o.x, o.y, angle);
    pts.emplace_back(static_cast<int>(std::lround(p.x)), static_cast<int>(std::lround(p.y)));
  }
  return pts;
}

// The shape of class `cls`, `size` px across, centred at `c` (canvas coordinates).
void draw_shape(cv::Mat& mask, int cls, cv::Point2f c, float size, Generator& gen) {
  const float r = size / 2;
  switch (cls) {
    case 0:  // circle
      cv::circle(mask, cv::Point(std::lround(c.x), std::lround(c.y)), std::lround(r), 255, cv::FILLED,
                 cv::LINE_8);
      break;
    case 1: {  // axis-aligned rectangle, aspect 1:2 .. 2:1
      const float aspect = static_cast<float>(gen.uniform(0.5, 2.0));
      const float w = size * std::sqrt(aspect) / 1.42f, h = size / std::sqrt(aspect) / 1.42f;
      cv::rectangle(mask, cv::Point(std::lround(c.x - w / 2), std::lround(c.y - h / 2)),
                    cv::Point(std::lround(c.x + w / 2), std::lround(c.y + h / 2)), 255, cv::FILLED,
                    cv::LINE_8);
      break;
    }
    case 2: {  // equilateral triangle, any rotation
      const float angle = static_cast<float>(gen.uniform(0, 2 * kPi));
      std::vector<cv::Point2f> corners;
      for (int k = 0; k < 3; ++k) {
        const float a = static_cast<float>(k * 2 * kPi / 3);
        corners.emplace_back(r * std::cos(a), r * std::sin(a));
      }
      const std::vector<std::vector<cv::Point>> poly = {to_points(c, corners, angle)};
      cv::fillPoly(mask, poly, 255, cv::LINE_8);
      break;
    }
    default: {  // plus-shaped cross, arms a third as thick as long, tilted up to 20 degrees
      const float angle = static_cast<float>(gen.uniform(-0.35, 0.35));
      const float t = r / 3;
      for (const auto& arm : {std::vector<cv::Point2f>{{-r, -t}, {r, -t}, {r, t}, {-r, t}},
                              std::vector<cv::Point2f>{{-t, -r}, {t, -r}, {t, r}, {-t, r}}}) {
        const std::vector<std::vector<cv::Point>> poly = {to_points(c, arm, angle)};
        cv::fillPoly(mask, poly, 255, cv::LINE_8);
      }
    }
  }
}

// Two-colour linear gradient in a random direction plus smooth low-frequency blotches.
cv::Mat background(int height, Generator& gen) {
  cv::Scalar a, b;
  for (int ch = 0; ch < 3; ++ch) a[ch] = gen.uniform(0, 255), b[ch] = gen.uniform(0, 255);
  const double angle = gen.uniform(0, 2 * kPi);
  const double dx = std::cos(angle) / kWidth, dy = std::sin(angle) / height;
  cv::Mat grid(6, 6, CV_32FC3);
  for (int i = 0; i < 36; ++i)
    for (int ch = 0; ch < 3; ++ch) grid.at<cv::Vec3f>(i / 6, i % 6)[ch] = static_cast<float>(gen.uniform(-40, 40));
  cv::Mat blotches;
  cv::resize(grid, blotches, cv::Size(kWidth, height), 0, 0, cv::INTER_CUBIC);
  cv::Mat out(height, kWidth, CV_8UC3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < kWidth; ++x) {
      const double t = std::clamp(0.5 + (x - kWidth / 2) * dx + (y - height / 2) * dy, 0.0, 1.0);
      const cv::Vec3f& n = blotches.at<cv::Vec3f>(y, x);
      for (int ch = 0; ch < 3; ++ch)
        out.at<cv::Vec3b>(y, x)[ch] = cv::saturate_cast<uint8_t>(a[ch] * (1 - t) + b[ch] * t + n[ch]);
    }
  return out;
}

// A colour far enough from the background under the shape to be seen (best of a few tries).
cv::Vec3b shape_colour(const cv::Mat& image, const cv::Mat& mask, Generator& gen) {
  const cv::Scalar under = cv::mean(image, mask);
  cv::Vec3b best{};
  double best_distance = -1;
  for (int attempt = 0; attempt < 8 && best_distance < 120; ++attempt) {
    cv::Vec3b c;
    double d = 0;
    for (int ch = 0; ch < 3; ++ch) {
      c[ch] = static_cast<uint8_t>(gen.randint(256));
      d += std::abs(c[ch] - under[ch]);
    }
    if (d > best_distance) best_distance = d, best = c;
  }
  return best;
}

// Per-pixel noise of +-10 grey levels, four levels from each draw.
void add_noise(cv::Mat& image, Generator& gen) {
  uint8_t* p = image.data;
  const size_t n = image.total() * image.channels();
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t bits = gen.next_u32();
    for (size_t k = 0; k < 4 && i + k < n; ++k) {
      const int delta = static_cast<int>((bits >> (8 * k)) & 0xFF) % 21 - 10;
      p[i + k] = cv::saturate_cast<uint8_t>(p[i + k] + delta);
    }
  }
}

std::string label_text(const std::vector<LabelBox>& boxes) {
  std::string text;
  char buf[32];
  for (const LabelBox& b : boxes) {
    text += std::to_string(b.cls);
    for (float v : {b.x, b.y, b.w, b.h}) {
      const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, 6);
      text += ' ';
      text.append(buf, res.ptr);
    }
    text += '\n';
  }
  return text;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KESTREL_CHECK(out, "synthetic dataset: cannot write ", path.string(),
                "; check the cache folder is writable (or choose another one)");
  out << text;
  out.close();
  KESTREL_CHECK(out, "synthetic dataset: writing ", path.string(), " failed (disk full?)");
}

std::string marker_text() {
  return str(kGeneratorVersion, " seed=", kSyntheticSeed, " train=", kSyntheticTrainImages,
             " val=", kSyntheticValImages, " width=", kWidth, " quality=", kJpegQuality, "\n");
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return in ? std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) : "";
}

void generate(const fs::path& dir) {
  for (const char* split : {"train", "val"}) {
    fs::create_directories(dir / "images" / split);
    fs::create_directories(dir / "labels" / split);
  }
  const int total = kSyntheticTrainImages + kSyntheticValImages;
  ThreadPool pool(std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
  pool.parallel_for(0, total, [&](int64_t i) {
    const bool train = i < kSyntheticTrainImages;
    const int64_t index = train ? i : i - kSyntheticTrainImages;
    const SyntheticImage s = render_synthetic_image(kSyntheticSeed, train ? index : kSyntheticValStreams + index);
    char name[24];
    std::snprintf(name, sizeof(name), "%06lld", static_cast<long long>(index));
    const char* split = train ? "train" : "val";
    write_jpeg((dir / "images" / split / (std::string(name) + ".jpg")).string(), s.image, kJpegQuality);
    write_text(dir / "labels" / split / (std::string(name) + ".txt"), label_text(s.boxes));
  });
  std::string yaml = str("# Kestrel's built-in synthetic dataset (", kGeneratorVersion,
                         "): shapes whose class is their shape.\npath: .\ntrain: images/train\n",
                         "val: images/val\nnc: ", kSyntheticClasses, "\nnames:\n");
  for (int c = 0; c < kSyntheticClasses; ++c) yaml += str("  ", c, ": ", kSyntheticNames[c], "\n");
  write_text(dir / "synthetic.yaml", yaml);
  write_text(dir / "generator.txt", marker_text());  // last: its presence means complete
}

}  // namespace

SyntheticImage render_synthetic_image(uint64_t seed, uint64_t stream) {
  Generator gen(seed, stream);
  const int height = 240 + 16 * static_cast<int>(gen.randint(6));
  SyntheticImage out;
  out.image = background(height, gen);
  out.owner = cv::Mat(height, kWidth, CV_32S, cv::Scalar(-1));
  const cv::Rect inside(kMargin, kMargin, kWidth, height);
  std::vector<int64_t> full_pixels, visible_pixels;  // per placed shape, inside the image
  const int wanted = 1 + static_cast<int>(gen.randint(6));
  for (int attempt = 0; attempt < 40 && static_cast<int>(out.boxes.size()) < wanted; ++attempt) {
    const int cls = static_cast<int>(gen.randint(kSyntheticClasses));
    const float size = static_cast<float>(gen.uniform(24, 140));
    // Centres up to a third of the size beyond the borders, so some shapes are cut.
    const cv::Point2f c(kMargin + static_cast<float>(gen.uniform(-size / 3, kWidth + size / 3)),
                        kMargin + static_cast<float>(gen.uniform(-size / 3, height + size / 3)));
    cv::Mat canvas = cv::Mat::zeros(height + 2 * kMargin, kWidth + 2 * kMargin, CV_8U);
    draw_shape(canvas, cls, c, size, gen);
    const cv::Mat mask = canvas(inside);
    const int64_t in_image = cv::countNonZero(mask), whole = cv::countNonZero(canvas);
    if (in_image < whole / 2 || in_image < 60) continue;  // mostly outside: try another
    const cv::Rect box = cv::boundingRect(mask);
    if (box.width < 8 || box.height < 8) continue;
    // Overlaps are welcome, hiding most of an earlier shape is not: each keeps 60% in view.
    std::vector<int64_t> covered(out.boxes.size(), 0);
    for (int y = box.y; y < box.y + box.height; ++y)
      for (int x = box.x; x < box.x + box.width; ++x) {
        const int o = out.owner.at<int>(y, x);
        if (o >= 0 && mask.at<uint8_t>(y, x)) ++covered[o];
      }
    bool hides = false;
    for (size_t j = 0; j < covered.size(); ++j)
      hides |= (visible_pixels[j] - covered[j]) * 10 < full_pixels[j] * 6;
    if (hides) continue;
    for (size_t j = 0; j < covered.size(); ++j) visible_pixels[j] -= covered[j];
    out.image.setTo(shape_colour(out.image, mask, gen), mask);
    out.owner.setTo(static_cast<int>(out.boxes.size()), mask);
    full_pixels.push_back(in_image);
    visible_pixels.push_back(in_image);
    LabelBox b;
    b.cls = cls;
    b.x = (box.x + box.width / 2.0f) / kWidth;
    b.y = (box.y + box.height / 2.0f) / height;
    b.w = static_cast<float>(box.width) / kWidth;
    b.h = static_cast<float>(box.height) / height;
    out.boxes.push_back(b);
  }
  add_noise(out.image, gen);
  return out;
}

std::string ensure_synthetic_dataset(const std::string& cache_dir) {
  KESTREL_CHECK(!cache_dir.empty(), "ensure_synthetic_dataset: empty cache folder");
  const fs::path dir = fs::absolute(cache_dir).lexically_normal();
  const fs::path yaml = dir / "synthetic.yaml";
  if (read_text(dir / "generator.txt") == marker_text()) return yaml.string();

  const fs::path tmp = unique_temp_path(dir.string());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    generate(tmp);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    KESTREL_FAIL("synthetic dataset: cannot create ", tmp.string(), " (", e.what(),
                 "); choose a writable cache folder");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(dir, ec);  // an older or incomplete generation
  fs::rename(tmp, dir, ec);
  if (ec) {
    // Another process may have put a complete copy in place meanwhile: then use that one.
    fs::remove_all(tmp, ec);
    KESTREL_CHECK(read_text(dir / "generator.txt") == marker_text(), "synthetic dataset: cannot move ",
                  tmp.string(), " to ", dir.string(), "; check the folder is writable");
  }
  return yaml.string();
}

std::string resolve_data_argument(const std::string& data, const std::string& synthetic_dir) {
  return data == "synthetic" ? ensure_synthetic_dataset(synthetic_dir) : data;
}

std::string default_synthetic_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = xdg && *xdg ? fs::path(xdg) : home && *home ? fs::path(home) / ".cache" : fs::path(".cache");
  return (base / "kestrel" / "synthetic-v1").string();
}

}  // namespace kestrel::yolo::data
