// SegAugmentPipeline: the validation path (letterbox, rect shapes, masks with and without overlap)
// against the reference's LoadImagesAndLabelsAndMasks(augment=False) on coco128-seg images (the
// fixture tests/data/seg_pipeline_reference.txt recorded by tests/scripts/seg_pipeline_reference.py,
// and the script itself when a Python with the reference is found); the training path's
// invariants on synthetic polygons: every instance's mask inside its box (flips included), overlap
// values naming the right label, copy_paste and mixup adding instances consistently, and samples
// that depend only on their generator.
#include "yolo/data/seg_pipeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "tests/support/cli.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/seg_scan.h"

namespace fs = std::filesystem;
namespace kt = kestrel::testing;
using namespace kestrel;
using namespace kestrel::yolo::data;

namespace {

const fs::path kCoco128Seg = "/work/shared/datasets/coco128-seg";

// --- the reference's recorded output ------------------------------------------------------------

struct RefItem {
  std::string name;
  int h = 0, w = 0;
  uint64_t checksum = 0;
  std::array<double, 6> shapes{};  // h0, w0, ratio h, ratio w, pad w, pad h
  std::vector<std::array<double, 5>> labels;
  std::vector<std::array<int64_t, 4>> masks;  // rows, cols, sum, weighted index sum
};
struct RefCase {
  int img_size = 0, batch = 0, ratio = 0;
  bool rect = false, overlap = false;
  double pad = 0;
  std::vector<RefItem> items;
};

std::vector<RefCase> parse_reference(std::istream& in) {
  std::vector<RefCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string kind;
    row >> kind;
    if (kind == "case") {
      RefCase c;
      int rect = 0, overlap = 0;
      row >> c.img_size >> rect >> c.batch >> c.pad >> c.ratio >> overlap;
      c.rect = rect, c.overlap = overlap;
      cases.push_back(c);
    } else if (kind == "item") {
      RefItem it;
      row >> it.name >> it.h >> it.w >> it.checksum;
      cases.back().items.push_back(it);
    } else if (kind == "shapes") {
      for (double& v : cases.back().items.back().shapes) row >> v;
    } else if (kind == "label") {
      std::array<double, 5> l{};
      for (double& v : l) row >> v;
      cases.back().items.back().labels.push_back(l);
    } else if (kind == "mask") {
      std::array<int64_t, 4> m{};
      for (int64_t& v : m) row >> v;
      cases.back().items.back().masks.push_back(m);
    }
  }
  return cases;
}

uint64_t checksum(const cv::Mat& rgb) {
  uint64_t sum = 0, i = 0;
  for (int y = 0; y < rgb.rows; ++y) {
    const uint8_t* p = rgb.ptr<uint8_t>(y);
    for (int x = 0; x < rgb.cols * 3; ++x, ++i) sum += uint64_t{p[x]} * (i % 65521 + 1);
  }
  return sum;
}

std::array<int64_t, 4> mask_stats(const cv::Mat& m) {
  cv::Mat wide;
  m.convertTo(wide, CV_64F);
  int64_t sum = 0, weighted = 0;
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x) {
      const auto v = static_cast<int64_t>(wide.at<double>(y, x));
      sum += v;
      weighted += v * (int64_t{y} * m.cols + x);
    }
  return {m.rows, m.cols, sum, weighted};
}

std::vector<std::string> coco_images(const std::vector<RefCase>& cases) {
  std::vector<std::string> paths;
  for (const RefItem& it : cases.front().items)
    paths.push_back((kCoco128Seg / "images" / "train2017" / it.name).string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

void expect_matches_reference(const std::vector<RefCase>& cases) {
  ASSERT_FALSE(cases.empty());
  ThreadPool pool(2);
  const ScanResult scan = scan_segment_images(coco_images(cases), 80, pool);
  ASSERT_EQ(scan.records.size(), cases.front().items.size());
  for (const RefCase& c : cases) {
    SCOPED_TRACE("case " + std::to_string(c.img_size) + (c.rect ? " rect" : "") + " batch " +
                 std::to_string(c.batch) + " ratio " + std::to_string(c.ratio) + (c.overlap ? " overlap" : ""));
    PipelineOptions o;
    o.img_size = c.img_size;
    o.rect = c.rect;
    o.batch_size = c.batch;
    o.pad = c.pad;
    const SegAugmentPipeline pipeline(scan.records, o, {c.ratio, c.overlap});
    ASSERT_EQ(pipeline.size(), static_cast<int64_t>(c.items.size()));
    for (size_t i = 0; i < c.items.size(); ++i) {
      const RefItem& want = c.items[i];
      SCOPED_TRACE(want.name);
      Generator gen = sample_generator(0, 0, 0, i);
      const SegSample got = pipeline.get(static_cast<int64_t>(i), gen);
      EXPECT_EQ(fs::path(got.sample.path).filename().string(), want.name);
      EXPECT_EQ(got.sample.image.rows, want.h);
      EXPECT_EQ(got.sample.image.cols, want.w);
      EXPECT_EQ(checksum(got.sample.image), want.checksum);
      ASSERT_TRUE(got.sample.has_shapes);
      const SampleShapes& sh = got.sample.shapes;
      const std::array<double, 6> shapes{double(sh.h0), double(sh.w0), sh.ratio_h, sh.ratio_w, sh.pad_w, sh.pad_h};
      for (int k = 0; k < 6; ++k) EXPECT_DOUBLE_EQ(shapes[k], want.shapes[k]) << "shapes[" << k << "]";
      ASSERT_EQ(got.sample.labels.size(), want.labels.size());
      // Boxes to within a few float32 ulps: detection's box conversions (augment.h) compute in
      // float64 where the reference computes in float32. Order and classes exactly.
      for (size_t k = 0; k < want.labels.size(); ++k) {
        const LabelBox& l = got.sample.labels[k];
        EXPECT_EQ(l.cls, static_cast<int>(want.labels[k][0])) << "label " << k;
        const std::array<double, 4> g{l.x, l.y, l.w, l.h};
        for (int j = 0; j < 4; ++j) EXPECT_NEAR(g[j], want.labels[k][j + 1], 3e-7) << "label " << k << "[" << j + 1 << "]";
      }
      ASSERT_EQ(got.masks.size(), want.masks.size());
      for (size_t k = 0; k < want.masks.size(); ++k) EXPECT_EQ(mask_stats(got.masks[k]), want.masks[k]) << "mask " << k;
    }
  }
}

// --- synthetic polygons -------------------------------------------------------------------------

class SegPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_seg_pipeline_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "images");
    fs::create_directories(dir_ / "labels");
    // Eight images of assorted shapes, each with one to four polygons (triangles, quads, pentagons)
    // that overlap now and then; pixels random so that any misplaced copy shows.
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const int sizes[8][2] = {{96, 64}, {64, 96}, {80, 80}, {120, 60}, {50, 70}, {100, 100}, {72, 48}, {64, 64}};
    std::vector<std::string> paths;
    for (int i = 0; i < 8; ++i) {
      const int w = sizes[i][0], h = sizes[i][1];
      cv::Mat img(h, w, CV_8UC3);
      cv::randu(img, 0, 256);
      const std::string name = "im" + std::to_string(i);
      paths.push_back((dir_ / "images" / (name + ".png")).string());
      write_png(paths.back(), img);
      std::ofstream labels(dir_ / "labels" / (name + ".txt"));
      for (int k = 0; k <= i % 4; ++k) {
        const double cx = 0.25 + 0.5 * u(rng), cy = 0.25 + 0.5 * u(rng), r = 0.1 + 0.15 * u(rng);
        const int corners = 3 + k % 3;
        labels << (i + k) % 5;
        for (int c = 0; c < corners; ++c) {
          const double a = 2 * CV_PI * c / corners + 0.3 * u(rng);
          labels << " " << std::clamp(cx + r * std::cos(a), 0.0, 1.0) << " " << std::clamp(cy + r * std::sin(a), 0.0, 1.0);
        }
        labels << "\n";
      }
    }
    ThreadPool pool(2);
    records_ = scan_segment_images(paths, 5, pool).records;
  }
  void TearDown() override { fs::remove_all(dir_); }

  SegAugmentPipeline pipeline(bool overlap, double copy_paste = 0, double mixup = 0, double perspective = 0) const {
    PipelineOptions o;
    o.img_size = 96;
    o.augment = true;
    o.hyp.flipud = 0.5;
    o.hyp.copy_paste = copy_paste;
    o.hyp.mixup = mixup;
    o.hyp.perspective = perspective;
    o.hyp.degrees = 10;
    return SegAugmentPipeline(records_, o, {2, overlap});
  }

  fs::path dir_;
  std::vector<ImageRecord> records_;
};

// The set pixels of mask `m` equal to `value` lie within box `b` (normalised to an image r times
// the mask's size), give or take two mask pixels: downsampling blurs the edge by one, and where a
// polygon leaves the image its box ends at the last point inside while the fill of the edge
// crossing the border (points truncated to int) may reach a pixel further.
void expect_inside(const cv::Mat& m, int value, const LabelBox& b, int r, const std::string& what) {
  cv::Mat wide;
  m.convertTo(wide, CV_32S);
  const double W = m.cols * r, H = m.rows * r;
  const double x1 = (b.x - b.w / 2) * W, x2 = (b.x + b.w / 2) * W, y1 = (b.y - b.h / 2) * H, y2 = (b.y + b.h / 2) * H;
  int outside = 0;
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x)
      if (wide.at<int>(y, x) == value && ((x + 0.5) * r < x1 - 2 * r || (x + 0.5) * r > x2 + 2 * r ||
                                          (y + 0.5) * r < y1 - 2 * r || (y + 0.5) * r > y2 + 2 * r))
        ++outside;
  EXPECT_EQ(outside, 0) << what;
}

void expect_consistent(const SegSample& s, bool overlap, int r, const std::string& what) {
  ASSERT_EQ(s.sample.image.rows, 96) << what;
  const int n = static_cast<int>(s.sample.labels.size());
  if (overlap) {
    ASSERT_EQ(s.masks.size(), 1u) << what;
    double lo = 0, hi = 0;
    cv::minMaxLoc(s.masks[0], &lo, &hi);
    EXPECT_GE(lo, 0) << what;
    EXPECT_LE(hi, n) << what;
    if (n > 0) {
      EXPECT_GE(hi, 1) << what;
    }
    for (int k = 0; k < n; ++k) expect_inside(s.masks[0], k + 1, s.sample.labels[k], r, what + " instance " + std::to_string(k + 1));
  } else {
    ASSERT_EQ(static_cast<int>(s.masks.size()), n) << what;
    for (int k = 0; k < n; ++k) expect_inside(s.masks[k], 1, s.sample.labels[k], r, what + " mask " + std::to_string(k));
  }
  for (const cv::Mat& m : s.masks) {
    EXPECT_EQ(m.rows, 96 / r) << what;
    EXPECT_EQ(m.cols, 96 / r) << what;
  }
}

bool same(const SegSample& a, const SegSample& b) {
  if (a.sample.labels != b.sample.labels || a.masks.size() != b.masks.size()) return false;
  if (cv::norm(a.sample.image, b.sample.image, cv::NORM_INF) != 0) return false;
  for (size_t k = 0; k < a.masks.size(); ++k)
    if (a.masks[k].type() != b.masks[k].type() || cv::norm(a.masks[k], b.masks[k], cv::NORM_INF) != 0) return false;
  return true;
}

}  // namespace

TEST(SegPipelineReference, MatchesRecordedReference) {
  if (!fs::exists(kCoco128Seg)) GTEST_SKIP() << "no coco128-seg at " << kCoco128Seg;
  std::ifstream in("tests/data/seg_pipeline_reference.txt");
  ASSERT_TRUE(in) << "run from the repository root";
  expect_matches_reference(parse_reference(in));
}

TEST(SegPipelineReference, MatchesLiveReference) {
  if (!fs::exists(kCoco128Seg)) GTEST_SKIP() << "no coco128-seg at " << kCoco128Seg;
  kt::Reference ref;
  const std::string why = kt::find_reference(ref, {"torch", "cv2", "numpy"}, "utils/segment/dataloaders.py");
  if (!why.empty()) GTEST_SKIP() << why;
  const kt::CliResult r = kt::run_command("KESTREL_REFERENCE_DIR=" + ref.dir + " " + ref.python +
                                          " tests/scripts/seg_pipeline_reference.py " + kCoco128Seg.string() +
                                          " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream in(r.out);
  expect_matches_reference(parse_reference(in));
}

TEST_F(SegPipelineTest, ScanKeepsOnePolygonPerBox) {
  ASSERT_EQ(records_.size(), 8u);
  for (const ImageRecord& r : records_) {
    ASSERT_EQ(r.segments.size(), r.boxes.size()) << r.image_path;
    for (const std::vector<float>& s : r.segments) EXPECT_GE(s.size(), 6u);
  }
}

TEST_F(SegPipelineTest, AugmentedMasksLieInsideTheirBoxes) {
  for (bool overlap : {true, false})
    for (double perspective : {0.0, 0.0005}) {
      const SegAugmentPipeline p = pipeline(overlap, 0, 0, perspective);
      for (int64_t epoch = 0; epoch < 3; ++epoch)
        for (int64_t i = 0; i < p.size(); ++i) {
          Generator gen = sample_generator(1, 0, epoch, i);
          expect_consistent(p.get(i, gen), overlap, 2,
                            "epoch " + std::to_string(epoch) + " sample " + std::to_string(i) +
                                (overlap ? " overlap" : "") + " perspective " + std::to_string(perspective));
        }
    }
}

TEST_F(SegPipelineTest, CopyPasteAndMixupAddConsistentInstances) {
  const SegAugmentPipeline plain = pipeline(true), mixed = pipeline(true, 1.0, 1.0);
  size_t plain_instances = 0, mixed_instances = 0;
  for (int64_t i = 0; i < plain.size(); ++i) {
    Generator g1 = sample_generator(3, 0, 0, i), g2 = sample_generator(3, 0, 0, i);
    plain_instances += plain.get(i, g1).sample.labels.size();
    const SegSample s = mixed.get(i, g2);
    mixed_instances += s.sample.labels.size();
    expect_consistent(s, true, 2, "sample " + std::to_string(i));
  }
  EXPECT_GT(mixed_instances, plain_instances);
}

TEST_F(SegPipelineTest, FlipsMoveMasksWithTheirBoxes) {
  // Every flip on: labels and masks are mirrored together (the inside check fails otherwise for
  // any instance off the image's centre line).
  PipelineOptions o;
  o.img_size = 96;
  o.augment = true;
  o.hyp.flipud = 1.0;
  o.hyp.fliplr = 1.0;
  o.hyp.mosaic = 0.0;
  const SegAugmentPipeline flipped(records_, o, {2, false});
  o.hyp.flipud = o.hyp.fliplr = 0.0;
  const SegAugmentPipeline straight(records_, o, {2, false});
  for (int64_t i = 0; i < flipped.size(); ++i) {
    Generator g1 = sample_generator(5, 0, 0, i), g2 = sample_generator(5, 0, 0, i);
    const SegSample a = flipped.get(i, g1), b = straight.get(i, g2);
    expect_consistent(a, false, 2, "flipped " + std::to_string(i));
    ASSERT_EQ(a.sample.labels.size(), b.sample.labels.size());
    for (size_t k = 0; k < a.masks.size(); ++k) {
      EXPECT_FLOAT_EQ(a.sample.labels[k].x, 1.0f - b.sample.labels[k].x);
      EXPECT_FLOAT_EQ(a.sample.labels[k].y, 1.0f - b.sample.labels[k].y);
      cv::Mat back;
      cv::flip(a.masks[k], back, -1);
      EXPECT_EQ(cv::norm(back, b.masks[k], cv::NORM_INF), 0) << "sample " << i << " mask " << k;
    }
  }
}

TEST_F(SegPipelineTest, SampleDependsOnlyOnItsGenerator) {
  const SegAugmentPipeline p = pipeline(true, 0.5, 0.5);
  for (int64_t i = 0; i < p.size(); ++i) {
    Generator g1 = sample_generator(9, 1, 2, i), g2 = sample_generator(9, 1, 2, i);
    const SegSample a = p.get(i, g1);
    Generator other = sample_generator(9, 1, 2, (i + 1) % p.size());
    p.get((i + 1) % p.size(), other);  // in between: nothing carries over
    EXPECT_TRUE(same(a, p.get(i, g2))) << "sample " << i;
  }
}

TEST_F(SegPipelineTest, BoxLabelsGetEmptyMasks) {
  // A polygon-less record keeps its boxes when letterboxed (the reference fails on it), with
  // empty masks.
  std::vector<ImageRecord> records = records_;
  records[0].segments.clear();
  PipelineOptions o;
  o.img_size = 96;
  const SegAugmentPipeline p(records, o, {4, false});
  Generator gen = sample_generator(0, 0, 0, 0);
  const SegSample s = p.get(0, gen);
  ASSERT_EQ(s.sample.labels.size(), records[0].boxes.size());
  ASSERT_EQ(s.masks.size(), records[0].boxes.size());
  for (const cv::Mat& m : s.masks) EXPECT_EQ(cv::countNonZero(m), 0);
}
