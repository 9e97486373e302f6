// COCO evaluation (yolo/eval/coco_eval) against hand-made cases with known results and against
// pycocotools' COCOeval: the recorded stats of two fixture pairs (tests/data/coco_eval/, made by
// its make_fixtures.py; recorded by tests/scripts/coco_eval_reference.py), and the same run live
// where a Python with pycocotools is found (skipped otherwise).
#include "yolo/eval/coco_eval.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo;

namespace {

const fs::path kFixtures = "tests/data/coco_eval";

CocoObject object(int64_t id, CocoImageId image, int64_t cat, CocoBox box, bool crowd = false, double area = -1) {
  return {id, std::move(image), cat, box, area < 0 ? box.w * box.h : area, crowd};
}

CocoDetection detection(CocoImageId image, int64_t cat, CocoBox box, double score) {
  return {std::move(image), cat, box, score};
}

void expect_stats(const CocoStats& got, const CocoStats& want) {
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "stats[" << i << "]";
}

// What coco_eval_reference.py prints: 12 summary lines, then the 12 stats.
struct Reference {
  std::string summary;
  CocoStats stats{};
};

Reference parse_reference(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  Reference r;
  if (lines.size() < 24) {
    ADD_FAILURE() << "reference output too short:\n" << text;
    return r;
  }
  const size_t first = lines.size() - 24;
  for (size_t i = 0; i < 12; ++i) r.summary += lines[first + i] + "\n";
  for (size_t i = 0; i < 12; ++i) r.stats[i] = std::stod(lines[first + 12 + i]);
  return r;
}

std::string file_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Three images, two categories, one object of each size class: found exactly.
TEST(CocoEval, PerfectDetectionsScoreOne) {
  CocoGroundTruth gt;
  gt.images = {int64_t{1}, int64_t{2}, int64_t{3}};
  gt.categories = {7, 3};
  std::vector<CocoDetection> dets;
  const CocoBox sizes[3] = {{5, 5, 20, 20}, {40, 30, 50, 50}, {100, 80, 120, 120}};
  int64_t id = 1;
  for (int64_t img = 1; img <= 3; ++img)
    for (int64_t cat : {3, 7}) {
      const CocoBox b = sizes[(img + cat) % 3];
      gt.annotations.push_back(object(id++, img, cat, b));
      dets.push_back(detection(img, cat, b, 0.9));
    }
  const CocoEvalResult r = evaluate_coco(gt, dets);
  EXPECT_EQ(r.category_ids, (std::vector<int64_t>{3, 7}));
  // Near, not equal: pycocotools' precision tp / (fp + tp + eps) is 1 - 2^-52 after one hit.
  for (double s : r.stats) EXPECT_NEAR(s, 1.0, 1e-15);
}

// A crowd region: a detection matched to it is ignored, and its IoU is the intersection over the
// detection's own area (half the detection inside it: 0.5, where the plain IoU would be 1/3).
TEST(CocoEval, CrowdRegionIgnoresItsDetections) {
  CocoGroundTruth gt;
  gt.images = {int64_t{1}};
  gt.categories = {1};
  gt.annotations = {object(1, int64_t{1}, 1, {0, 0, 100, 100}, /*crowd=*/true),
                    object(2, int64_t{1}, 1, {200, 200, 50, 50})};
  const std::vector<CocoDetection> dets = {detection(int64_t{1}, 1, {50, 0, 100, 100}, 0.9),
                                           detection(int64_t{1}, 1, {200, 200, 50, 50}, 0.8)};
  const CocoEvalResult r = evaluate_coco(gt, dets);
  // IoU 0.5: the first detection sits on the crowd (ignored), the second is a hit: AP 1. Above
  // 0.5 the first is a false positive ahead of the hit: precision 0.5 at every recall point.
  // AR@1: only the first (the crowd's) detection counts, so nothing is found.
  expect_stats(r.stats, {0.55, 1.0, 0.5, -1, 1.0, -1, 0, 1, 1, -1, 1, -1});
  // Inside the crowd region entirely: ignored at every threshold.
  const std::vector<CocoDetection> inside = {detection(int64_t{1}, 1, {10, 10, 30, 30}, 0.9),
                                             detection(int64_t{1}, 1, {60, 50, 40, 40}, 0.85),
                                             detection(int64_t{1}, 1, {200, 200, 50, 50}, 0.8)};
  EXPECT_NEAR(evaluate_coco(gt, inside).stats[0], 1.0, 1e-15);
}

// An image without detections: its objects are misses.
TEST(CocoEval, ImageWithoutDetections) {
  CocoGroundTruth gt;
  gt.images = {int64_t{10}, int64_t{11}};
  gt.categories = {1};
  gt.annotations = {object(1, int64_t{10}, 1, {0, 0, 40, 40}), object(2, int64_t{11}, 1, {0, 0, 40, 40})};
  const CocoEvalResult r = evaluate_coco(gt, {detection(int64_t{10}, 1, {0, 0, 40, 40}, 0.5)});
  // Precision 1 up to recall 0.5 (51 of the 101 points: 0.5 itself is 50 * 0.01), 0 beyond.
  EXPECT_NEAR(r.stats[0], 51.0 / 101, 1e-15);
  EXPECT_NEAR(r.stats[8], 0.5, 1e-15);
  // No detections at all: zeros where there are objects, -1 where there are none.
  const CocoEvalResult none = evaluate_coco(gt, {});
  expect_stats(none.stats, {0, 0, 0, -1, 0, -1, 0, 0, 0, -1, 0, -1});
}

// A category without ground truth is -1 and left out of the means; with none at all, every
// stat is -1.
TEST(CocoEval, CategoryWithoutGroundTruth) {
  CocoGroundTruth gt;
  gt.images = {int64_t{1}};
  gt.categories = {1, 2};
  gt.annotations = {object(1, int64_t{1}, 1, {10, 10, 50, 50})};
  const std::vector<CocoDetection> dets = {detection(int64_t{1}, 2, {100, 100, 50, 50}, 0.99),
                                           detection(int64_t{1}, 1, {10, 10, 50, 50}, 0.5)};
  const CocoEvalResult r = evaluate_coco(gt, dets);
  EXPECT_NEAR(r.stats[0], 1.0, 1e-15);
  // precision[t=0][r=0][k=1][a=0][m=2] is -1.
  EXPECT_EQ(r.precision[((0 * 101 + 0) * 2 + 1) * 12 + 0 * 3 + 2], -1.0);
  gt.annotations.clear();
  for (double s : evaluate_coco(gt, dets).stats) EXPECT_EQ(s, -1.0);
}

// maxDets: an image's detections past the 1st / 10th / 100th by score do not count.
TEST(CocoEval, MaxDetsTruncates) {
  CocoGroundTruth gt;
  gt.images = {int64_t{1}};
  gt.categories = {1};
  gt.annotations = {object(1, int64_t{1}, 1, {0, 0, 40, 40})};
  std::vector<CocoDetection> dets;
  for (int i = 0; i < 10; ++i) dets.push_back(detection(int64_t{1}, 1, {500.0 + 50 * i, 500, 40, 40}, 0.9 - 0.01 * i));
  dets.push_back(detection(int64_t{1}, 1, {0, 0, 40, 40}, 0.1));
  CocoEvalResult r = evaluate_coco(gt, dets);
  EXPECT_EQ(r.stats[6], 0.0);  // AR@1
  EXPECT_EQ(r.stats[7], 0.0);  // AR@10
  EXPECT_EQ(r.stats[8], 1.0);  // AR@100
  EXPECT_NEAR(r.stats[1], 1.0 / 11, 1e-15);
  // 100 better-scored misses push the hit past maxDets 100.
  for (int i = 10; i < 100; ++i) dets.push_back(detection(int64_t{1}, 1, {500.0 + 50 * i, 500, 40, 40}, 0.5));
  r = evaluate_coco(gt, dets);
  EXPECT_EQ(r.stats[8], 0.0);
  EXPECT_EQ(r.stats[0], 0.0);
}

// Area ranges: a ground truth's `area` field decides its range (not its box); an unmatched
// detection outside the range is ignored, a matched one counts.
TEST(CocoEval, AreaRangesUseTheAreaField) {
  CocoGroundTruth gt;
  gt.images = {int64_t{1}};
  gt.categories = {1};
  gt.annotations = {object(1, int64_t{1}, 1, {0, 0, 20, 20}, false, /*area=*/2000)};  // a medium object
  const std::vector<CocoDetection> dets = {detection(int64_t{1}, 1, {300, 300, 200, 200}, 0.9),  // large miss
                                           detection(int64_t{1}, 1, {0, 0, 20, 20}, 0.8)};
  const CocoEvalResult r = evaluate_coco(gt, dets);
  EXPECT_EQ(r.stats[3], -1.0);  // small: no object
  EXPECT_NEAR(r.stats[4], 1.0, 1e-15);  // medium: the large miss is ignored
  EXPECT_EQ(r.stats[5], -1.0);  // large
  EXPECT_NEAR(r.stats[0], 0.5, 1e-15);  // all: the miss ranks first
}

// summarize()'s lines, character for character.
TEST(CocoEval, SummaryLines) {
  const std::string s = coco_summary({0.5, 0.25, -1, 0.0004999, 0.0005, 1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6});
  EXPECT_EQ(s.substr(0, s.find('\n') + 1),
            " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.500\n");
  EXPECT_NE(s.find(" Average Precision  (AP) @[ IoU=0.75      | area=   all | maxDets=100 ] = -1.000\n"), std::string::npos);
  EXPECT_NE(s.find(" Average Precision  (AP) @[ IoU=0.50:0.95 | area= small | maxDets=100 ] = 0.000\n"), std::string::npos);
  EXPECT_NE(s.find(" Average Precision  (AP) @[ IoU=0.50:0.95 | area=medium | maxDets=100 ] = 0.001\n"), std::string::npos);
  EXPECT_NE(s.find(" Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets=  1 ] = 0.100\n"), std::string::npos);
  EXPECT_NE(s.find(" Average Recall     (AR) @[ IoU=0.50:0.95 | area= large | maxDets=100 ] = 0.600\n"), std::string::npos);
}

// Bad input: results on an image the ground truth lacks, a file without images, mixed id kinds.
TEST(CocoEval, RefusesBadInput) {
  CocoGroundTruth gt;
  gt.images = {int64_t{1}};
  gt.categories = {1};
  try {
    evaluate_coco(gt, {detection(int64_t{2}, 1, {0, 0, 1, 1}, 0.5)});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("image 2"), std::string::npos) << e.what();
  }
  gt.images.push_back(std::string("a"));
  EXPECT_THROW(evaluate_coco(gt, {}), Error);
  try {
    parse_coco_ground_truth(json::parse(R"({"categories": []})"), "gt.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gt.json has no 'images'"), std::string::npos) << e.what();
  }
  try {
    parse_coco_detections(json::parse(R"([{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3], "score": 1}])"),
                          "res.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("res.json: [0].bbox"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_coco_ground_truth("/nonexistent/instances_val2017.json"), Error);
}

// The ground truth made from YOLO labels: ids as val.py derives them, pixel boxes, COCO's ids.
TEST(CocoEval, GroundTruthFromLabels) {
  std::vector<data::ImageRecord> records(2);
  records[0].image_path = "/d/images/000000000042.jpg";
  records[0].width = 640;
  records[0].height = 480;
  records[0].boxes = {{0, 0.5f, 0.5f, 0.25f, 0.5f}, {11, 0.25f, 0.25f, 0.125f, 0.125f}};
  records[1].image_path = "/d/images/cat photo.png";
  records[1].width = 100;
  records[1].height = 200;
  const json::Value doc = coco_labels_json(records, {"a", "b"}, /*coco_ids=*/true);
  const CocoGroundTruth gt = parse_coco_ground_truth(doc, "labels");
  ASSERT_EQ(gt.images.size(), 2u);
  EXPECT_EQ(gt.images[0], CocoImageId(int64_t{42}));
  EXPECT_EQ(gt.images[1], CocoImageId(std::string("cat photo")));
  ASSERT_EQ(gt.annotations.size(), 2u);
  const CocoObject& o = gt.annotations[0];
  EXPECT_EQ(o.id, 1);
  EXPECT_EQ(o.category_id, 1);
  EXPECT_EQ(gt.annotations[1].category_id, 13);  // class 11 is COCO's 13
  EXPECT_DOUBLE_EQ(o.bbox.x, 240);
  EXPECT_DOUBLE_EQ(o.bbox.y, 120);
  EXPECT_DOUBLE_EQ(o.bbox.w, 160);
  EXPECT_DOUBLE_EQ(o.bbox.h, 240);
  EXPECT_DOUBLE_EQ(o.area, 160.0 * 240);
  EXPECT_FALSE(o.iscrowd);
  EXPECT_EQ(gt.categories, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(coco_category_id(5, false), 5);
  EXPECT_EQ(coco_image_id("x/123abc.jpg"), CocoImageId(std::string("123abc")));
  // The labels found exactly score 1.
  std::vector<CocoDetection> dets;
  for (const CocoObject& a : gt.annotations) dets.push_back(detection(a.image_id, a.category_id, a.bbox, 0.7));
  // Numbers and strings together cannot be sorted (Python's sorted() refuses them too); the
  // numbered image alone evaluates.
  EXPECT_THROW(evaluate_coco(gt, dets), Error);
  CocoEvalOptions only42;
  only42.image_ids = std::vector<CocoImageId>{int64_t{42}};
  std::erase_if(dets, [](const CocoDetection& d) { return d.image_id != CocoImageId(int64_t{42}); });
  EXPECT_NEAR(evaluate_coco(gt, dets, only42).stats[0], 1.0, 1e-15);
}

// The recorded pycocotools numbers of the two fixture pairs, to every digit (they agree to the
// bit; the 1e-12 leaves room for another numpy's summation order) and the printed lines.
TEST(CocoEval, MatchesRecordedPycocotools) {
  for (const char* pair : {"coco128", "strings"}) {
    SCOPED_TRACE(pair);
    const fs::path gt = kFixtures / (std::string(pair) + "_gt.json");
    const fs::path dt = kFixtures / (std::string(pair) + "_dt.json");
    const Reference ref = parse_reference(file_text(kFixtures / (std::string(pair) + "_expected.txt")));
    const CocoEvalResult r = evaluate_coco_files(gt.string(), dt.string());
    expect_stats(r.stats, ref.stats);
    EXPECT_EQ(coco_summary(r.stats), ref.summary);
  }
}

// The same against pycocotools run now, and on a ground truth made from labels by Kestrel.
TEST(CocoEval, MatchesLivePycocotools) {
  const std::string python = kestrel::testing::find_python({"pycocotools", "numpy"});
  if (python.empty()) GTEST_SKIP() << "no Python with pycocotools ($KESTREL_PYTHON, python3): live parity not run";
  const fs::path tmp = fs::temp_directory_path() / ("kestrel_coco_eval_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  // A labels-made ground truth with detections drawn around it.
  std::vector<data::ImageRecord> records;
  json::Array rows;
  uint32_t seed = 12345;
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return (seed >> 8) / 16777216.0;
  };
  for (int i = 0; i < 40; ++i) {
    data::ImageRecord rec;
    rec.image_path = "/d/" + std::to_string(1000 + i) + ".jpg";
    rec.width = 640;
    rec.height = 480;
    for (int b = 0; b < 1 + i % 6; ++b)
      rec.boxes.push_back({static_cast<int>(next() * 5), 0.1f + 0.8f * static_cast<float>(next()),
                           0.1f + 0.8f * static_cast<float>(next()), 0.02f + 0.3f * static_cast<float>(next()),
                           0.02f + 0.3f * static_cast<float>(next())});
    for (const data::LabelBox& b : rec.boxes) {
      if (next() < 0.2) continue;
      const double w = b.w * 640 * (0.9 + 0.2 * next()), h = b.h * 480 * (0.9 + 0.2 * next());
      rows.emplace_back(json::Object{{"image_id", int64_t{1000 + i}},
                                     {"category_id", coco_category_id(next() < 0.9 ? b.cls : 2, true)},
                                     {"bbox", json::Array{b.x * 640.0 - w / 2 + 3 * next(), b.y * 480.0 - h / 2, w, h}},
                                     {"score", static_cast<double>(static_cast<int>(next() * 100)) / 100}});
    }
    records.push_back(rec);
  }
  {
    std::ofstream(tmp / "labels_gt.json") << json::dump(coco_labels_json(records, {"a", "b", "c", "d", "e"}, true));
    std::ofstream(tmp / "labels_dt.json") << json::dump(json::Value(rows));
  }
  struct Pair {
    fs::path gt, dt;
  };
  for (const Pair& p : {Pair{kFixtures / "coco128_gt.json", kFixtures / "coco128_dt.json"},
                        Pair{kFixtures / "strings_gt.json", kFixtures / "strings_dt.json"},
                        Pair{tmp / "labels_gt.json", tmp / "labels_dt.json"}}) {
    SCOPED_TRACE(p.gt.string());
    const kestrel::testing::CliResult out = kestrel::testing::run_command(python + " tests/scripts/coco_eval_reference.py " +
                                                        p.gt.string() + " " + p.dt.string());
    ASSERT_EQ(out.code, 0) << out.out;
    const Reference ref = parse_reference(out.out);
    const CocoEvalResult r = evaluate_coco_files(p.gt.string(), p.dt.string());
    expect_stats(r.stats, ref.stats);
    EXPECT_EQ(coco_summary(r.stats), ref.summary);
  }
  fs::remove_all(tmp);
}

// `kestrel val --coco-eval` on the synthetic set with fresh weights: the 12 lines after the table,
// against a ground truth made from the labels; a --coco-gt that does not exist is a usage error.
TEST(CocoEval, ValCommandPrintsTheSummary) {
  const fs::path dir = fs::temp_directory_path() / ("kestrel_coco_eval_cli_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(kestrel::testing::run_kestrel("model --cfg models/yolov5n.yaml --nc 4 --save " + weights).code, 0);
  const std::string common = "val --weights " + weights + " --cfg models/yolov5n.yaml --data synthetic --img-size 64 --batch-size 16 --device cpu"
                             " --workers 1 --project " + (dir / "val").string();
  const kestrel::testing::CliResult r = kestrel::testing::run_kestrel(common + " --coco-eval");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Evaluating COCO mAP"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" Average Recall     (AR) @[ IoU=0.50:0.95 | area= large | maxDets=100 ] = "), std::string::npos)
      << r.out;
  EXPECT_TRUE(fs::exists(dir / "val/exp/predictions.json"));
  const kestrel::testing::CliResult missing = kestrel::testing::run_kestrel(common + " --coco-gt " + (dir / "none.json").string());
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("none.json: no such file"), std::string::npos) << missing.out;
  fs::remove_all(dir);
}

}  // namespace
