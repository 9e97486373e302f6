// A -seg model's .onnx in `kestrel segment val` and `kestrel segment predict` (OpenCV DNN on the
// CPU, as the reference's DetectMultiBackend runs an exported -seg model in segment/val.py and
// segment/predict.py), against the .pt it was exported from: tests/data/yolov5n_seg_coco128_16.pt
// (a yolov5n-seg the reference trained on coco128-seg's first 16 images), exported at 160x160 by
// `kestrel export` here.
// - ValMatchesThePtRunSquare: `segment val --weights x.onnx` validates square letterboxed images one
//   at a time (a fixed-size export at its own size), with detection's ONNX messages, and prints the
//   "all" row that the .pt gives under those same settings: SegValidator on the model with rect
//   off and batches of one, since the CLI validates a .pt in rectangular batches (as the reference),
//   whose inputs differ. Within one unit of the printed third digit; SegValidator over the
//   OnnxModel gives the .pt's metrics within 1e-3 (float32 sums in another order: boxes 1e-3 px).
// - PredictWritesThePtPolygons: `segment predict --save-txt --save-conf` on square crops (so that the
//   .pt's minimal padding and the .onnx's full padding letterbox them alike) writes the .pt's lines:
//   the same classes and confidences (1e-4), each polygon point within a pixel of the 160-pixel
//   input (1/160 normalised) of a point of the other's polygon, both ways.
// - RefusesTheOtherKind: a -seg export in `kestrel val`, a detector's in `segment val/predict`.
// The first two skip where coco128-seg is absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/autograd.h"
#include "tests/support/cli.h"
#include "tests/support/coco128.h"
#include "tests/support/testing.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/image_codec.h"
#include "yolo/eval/seg_validator.h"
#include "yolo/export/onnx_model.h"
#include "yolo/model/segmentation_file.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::kCoco128Seg;
using kestrel::testing::run_kestrel;
using namespace kestrel;

namespace {

const char* kWeights = "tests/data/yolov5n_seg_coco128_16.pt";
constexpr int kImages = 8;
// The images cropped square for predict (among those the weights learnt).
const char* const kCrops[] = {"000000000009", "000000000034", "000000000042"};

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_onnx_segment_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// The weights copied into `dir` and exported there at 160x160: {w.pt, w.onnx}.
std::array<std::string, 2> exported(const fs::path& dir) {
  const std::string pt = (dir / "w.pt").string();
  fs::copy_file(kWeights, pt);
  const CliResult r = run_kestrel("export --weights " + pt + " --img 160");
  EXPECT_EQ(r.code, 0) << r.out;
  return {pt, (dir / "w.onnx").string()};
}

// The last "all" row of a segmentation table: images, instances, box and mask P, R, mAP50, mAP50-95.
std::vector<double> all_row(const std::string& text) {
  static const std::regex re(R"(^\s*all((?:\s+\S+){10})\s*$)");
  std::vector<double> row;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    std::istringstream values(m[1].str());
    row.clear();
    for (double v; values >> v;) row.push_back(v);
  }
  return row;
}

std::vector<double> metric_values(const yolo::SegValMetrics& m) {
  return {m.box.mp, m.box.mr, m.box.map50, m.box.map, m.mask.mp, m.mask.mr, m.mask.map50, m.mask.map};
}

}  // namespace

TEST(OnnxSegment, ValMatchesThePtRunSquare) {
  if (!fs::exists(kCoco128Seg / "coco128-seg.yaml")) GTEST_SKIP() << "coco128-seg not found at " << kCoco128Seg;
  const fs::path dir = scratch("val");
  const std::string yaml = kestrel::testing::scratch_coco128_seg(dir / "data", kImages);
  const auto [pt, onnx] = exported(dir);

  // The CLI on the .onnx: --img-size and --batch-size give way to the export's square batches of one.
  const CliResult r = run_kestrel("segment val --weights " + onnx + " --data " + yaml +
                                  " --img-size 320 --batch-size 8 --device cpu --workers 1 --half --dnn --project " +
                                  (dir / "runs").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "is a fixed-size export for 160x160 images: validating at 160, not --img-size 320")) << r.out;
  EXPECT_TRUE(mentions(r.out, "Forcing --batch-size 1 square inference (1,3,160,160) for non-PyTorch models")) << r.out;
  EXPECT_TRUE(mentions(r.out, "WARNING: --half is ignored for ONNX weights")) << r.out;
  EXPECT_TRUE(mentions(r.out, "per image at shape (1, 3, 160, 160)")) << r.out;
  const std::vector<double> cli = all_row(r.out);
  ASSERT_EQ(cli.size(), 10u) << r.out;

  // The .pt and the .onnx in process, square batches of one at 160.
  const yolo::data::DatasetConfig dcfg = yolo::data::load_dataset_config(yaml);
  const yolo::data::DatasetSplit split =
      yolo::data::load_split(dcfg, "val", dcfg.nc, false, true, 0, /*evaluation=*/true, /*polygons=*/true);
  yolo::SegValOptions o;
  o.img_size = 160;
  o.batch_size = 1;
  o.rect = false;
  o.workers = 1;
  const yolo::LoadedSegmenter loaded = yolo::load_segmentation_weights(pt, Device::cpu());
  const yolo::SegValResult want =
      yolo::SegValidator(split.records, dcfg.names, dcfg.nc, o, Device::cpu(), 32).run(*loaded.model);
  yolo::OnnxModel model(onnx);
  ASSERT_TRUE(model.segmentation());
  EXPECT_EQ(model.nm(), 32);
  EXPECT_EQ(model.nc(), 80);
  const yolo::SegValResult got =
      yolo::SegValidator(split.records, dcfg.names, dcfg.nc, o, Device::cpu(), 32).run([&](const Tensor& x) {
        yolo::OnnxModel::SegmentOutputs out = model.predict_segmentation(x);
        EXPECT_EQ(out.protos.shape(), (Shape{1, 40, 40, 32}));
        return yolo::SegmentationModel::Prediction{out.boxes, out.protos, {}};
      });
  std::printf(".pt square:\n%s.onnx in process:\n%s.onnx CLI: %s\n", want.table.c_str(), got.table.c_str(),
              r.out.substr(r.out.rfind("all ") - 20).c_str());
  EXPECT_EQ(got.images, kImages);
  EXPECT_EQ(got.instances, want.instances);
  const std::vector<double> a = metric_values(got.metrics), b = metric_values(want.metrics);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3) << "metric " << i;
  EXPECT_GT(b[6], 0.1) << "the trained weights' masks should match some labels";

  // The printed rows: images and instances equal, each metric within one unit of its third digit.
  const std::vector<double> printed = all_row(want.table);
  ASSERT_EQ(printed.size(), 10u) << want.table;
  EXPECT_EQ(cli[0], printed[0]);
  EXPECT_EQ(cli[1], printed[1]);
  for (size_t i = 2; i < printed.size(); ++i) {
    const double unit = printed[i] > 0 ? std::pow(10.0, std::floor(std::log10(printed[i])) - 2) : 1e-3;
    EXPECT_LE(std::abs(cli[i] - printed[i]), unit * 1.001) << "column " << i << " of the all row";
  }
  fs::remove_all(dir);
}

namespace {

// A --save-txt line: class, polygon points (x, y normalised), confidence.
struct PolygonLine {
  int cls = 0;
  std::vector<std::array<double, 2>> points;
  double conf = 0;
};

std::vector<PolygonLine> read_lines(const fs::path& path) {
  std::vector<PolygonLine> out;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    std::istringstream words(text);
    std::vector<double> v;
    for (double x; words >> x;) v.push_back(x);
    EXPECT_TRUE(v.size() >= 8 && v.size() % 2 == 0) << path << ": " << text;
    if (v.size() < 8) continue;
    PolygonLine line;
    line.cls = static_cast<int>(v[0]);
    line.conf = v.back();
    for (size_t k = 1; k + 2 < v.size(); k += 2) line.points.push_back({v[k], v[k + 1]});
    out.push_back(std::move(line));
  }
  return out;
}

// The largest distance from a point of `a` to the nearest point of `b`.
double one_sided_distance(const std::vector<std::array<double, 2>>& a, const std::vector<std::array<double, 2>>& b) {
  double worst = 0;
  for (const auto& p : a) {
    double best = INFINITY;
    for (const auto& q : b) best = std::min(best, std::hypot(p[0] - q[0], p[1] - q[1]));
    worst = std::max(worst, best);
  }
  return worst;
}

// Every line of `got` pairs with one of `want`: the class, the confidence within 1e-4 and the
// polygons within `tolerance` of each other both ways (lines of tied confidences may swap places).
// Returns the largest distance of the pairs (infinity when a line has no pair).
double expect_same_polygons(const fs::path& got, const fs::path& want, double tolerance) {
  const std::vector<PolygonLine> g = read_lines(got), w = read_lines(want);
  EXPECT_EQ(g.size(), w.size()) << got << " vs " << want;
  if (g.size() != w.size()) return INFINITY;
  double worst = 0;
  std::vector<bool> used(w.size(), false);
  for (size_t i = 0; i < g.size(); ++i) {
    bool found = false;
    for (size_t j = 0; j < w.size() && !found; ++j) {
      if (used[j] || g[i].cls != w[j].cls || std::abs(g[i].conf - w[j].conf) > 1e-4) continue;
      const double d =
          std::max(one_sided_distance(g[i].points, w[j].points), one_sided_distance(w[j].points, g[i].points));
      if (d > tolerance) continue;
      used[j] = found = true;
      worst = std::max(worst, d);
    }
    EXPECT_TRUE(found) << got << " line " << i + 1 << " (class " << g[i].cls << ", conf " << g[i].conf
                       << ") has no counterpart in " << want;
    if (!found) worst = INFINITY;
  }
  return worst;
}

}  // namespace

TEST(OnnxSegment, PredictWritesThePtPolygons) {
  if (!fs::exists(kCoco128Seg / "coco128-seg.yaml")) GTEST_SKIP() << "coco128-seg not found at " << kCoco128Seg;
  const fs::path dir = scratch("predict");
  const auto [pt, onnx] = exported(dir);
  // Square crops (the shorter side) of three of the images the weights learnt.
  fs::create_directories(dir / "images");
  for (const char* stem : kCrops) {
    const cv::Mat image = yolo::data::read_image((kCoco128Seg / "images/train2017" / (std::string(stem) + ".jpg")).string());
    ASSERT_FALSE(image.empty()) << stem;
    const int side = std::min(image.rows, image.cols);
    const cv::Rect square((image.cols - side) / 2, (image.rows - side) / 2, side, side);
    yolo::data::write_png((dir / "images" / (std::string(stem) + ".png")).string(), image(square).clone());
  }
  for (const auto& [weights, name] : {std::pair{pt, "pt"}, std::pair{onnx, "onnx"}}) {
    const CliResult r = run_kestrel("segment predict --weights " + weights + " --source " + (dir / "images").string() +
                                    " --img 160 --conf-thres 0.1 --save-txt --save-conf --nosave --dnn --device cpu "
                                    "--project " + dir.string() + " --name " + name);
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* stem : kCrops) EXPECT_TRUE(mentions(r.out, std::string(stem) + ".png: 160x160 ")) << r.out;
    if (std::string(name) == "onnx") {
      EXPECT_FALSE(mentions(r.out, "Fusing layers")) << r.out;
    }
  }
  int lines = 0;
  for (const char* stem : kCrops) {
    const fs::path file = std::string(stem) + ".txt";
    const double worst = expect_same_polygons(dir / "onnx/labels" / file, dir / "pt/labels" / file, 1.0 / 160 + 1e-6);
    lines += static_cast<int>(read_lines(dir / "pt/labels" / file).size());
    std::printf("%s: %d instances, polygons of the .onnx and the .pt within %.3g input pixels\n", stem,
                static_cast<int>(read_lines(dir / "pt/labels" / file).size()), worst * 160);
  }
  EXPECT_GE(lines, 10) << "the crops should hold confident instances";
  fs::remove_all(dir);
}

TEST(OnnxSegment, RefusesTheOtherKind) {
  const fs::path dir = scratch("refuse");
  const std::string seg = (dir / "seg.pt").string(), det = (dir / "det.pt").string();
  fs::copy_file(kWeights, seg);
  fs::copy_file("tests/data/yolov5n_coco80.pt", det);
  for (const std::string& w : {seg, det}) {
    const CliResult r = run_kestrel("export --weights " + w + " --img 64");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  const std::string seg_onnx = (dir / "seg.onnx").string(), det_onnx = (dir / "det.onnx").string();
  CliResult r = run_kestrel("val --weights " + seg_onnx + " --data synthetic --device cpu --project " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "is a segmentation model's export")) << r.out;
  EXPECT_TRUE(mentions(r.out, "kestrel segment val")) << r.out;
  r = run_kestrel("detect --weights " + seg_onnx + " --source tests/data/segment_predict/images --device cpu --nosave "
                  "--project " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "is a segmentation model's export")) << r.out;
  r = run_kestrel("segment predict --weights " + det_onnx + " --source tests/data/segment_predict/images --device cpu "
                  "--nosave --project " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "is a detection model's export")) << r.out;
  EXPECT_TRUE(mentions(r.out, "kestrel detect")) << r.out;
  r = run_kestrel("segment val --weights " + det_onnx + " --device cpu --project " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(mentions(r.out, "is a detection model's export")) << r.out;
  // The graph's own reading: a detector's has no prototypes.
  yolo::OnnxModel d(det_onnx);
  EXPECT_FALSE(d.segmentation());
  EXPECT_EQ(d.nc(), 80);
  EXPECT_NE(kestrel::testing::error_of([&] { d.predict_segmentation(Tensor::zeros({1, 64, 64, 3})); })
                .find("not a segmentation model's"),
            std::string::npos);
  yolo::OnnxModel s(seg_onnx);
  EXPECT_TRUE(s.segmentation());
  EXPECT_EQ(s.nc(), 80);
  fs::remove_all(dir);
}
