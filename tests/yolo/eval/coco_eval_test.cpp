// COCO evaluation (yolo/eval/coco_eval) against hand-made cases with known results and against
// pycocotools' COCOeval: the recorded stats of two fixture pairs (tests/data/coco_eval/, made by
// its make_fixtures.py; recorded by tests/scripts/coco_eval_reference.py), and the same run live
// where a Python with pycocotools is found (skipped otherwise). Segmentation (iouType segm): the
// fixtures of make_segm_fixtures.py (polygons, a crowd region as uncompressed RLE, compressed RLE
// results with and without boxes) evaluated segm and bbox, recorded and live, and a ground truth
// made from YOLO polygon labels; `kestrel segment val --coco-eval` prints both summaries.
#include "yolo/eval/coco_eval.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "io/rle.h"
#include "tests/support/testing.h"
#include "tests/support/cli.h"
#include "tests/support/coco128.h"

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

// The segm fixtures: (results, iou type, recorded output).
struct SegmCase {
  const char *dt, *type, *expected;
};
const SegmCase kSegmCases[] = {{"segm_dt", "segm", "segm_expected"},
                               {"segm_dt", "bbox", "segm_bbox_expected"},
                               {"segm_nobox_dt", "segm", "segm_nobox_expected"},
                               {"segm_nobox_dt", "bbox", "segm_nobox_bbox_expected"}};

CocoEvalOptions of_type(const std::string& type) {
  CocoEvalOptions o;
  o.iou_type = type == "segm" ? CocoIouType::segm : CocoIouType::bbox;
  return o;
}

void expect_same_stats(const CocoStats& got, const CocoStats& want) {
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "stats[" << i << "]";
}

// A 20 x 20 image: a polygon object, a crowd region (uncompressed RLE) and masks as results.
TEST(CocoEvalSegm, HandCase) {
  const json::Value gt_doc = json::parse(R"({
    "images": [{"id": 1, "height": 20, "width": 20}],
    "categories": [{"id": 1}],
    "annotations": [
      {"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 6, 6], "area": 36, "iscrowd": 0,
       "segmentation": [[2, 2, 8, 2, 8, 8, 2, 8]]},
      {"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 0, 10, 20], "area": 200, "iscrowd": 1,
       "segmentation": {"size": [20, 20], "counts": [200, 200]}}]})");
  const CocoGroundTruth gt = parse_coco_ground_truth(gt_doc, "gt");
  const rle::Rle object = coco_segmentation_rle(gt.annotations[0].segmentation, 20, 20);
  EXPECT_EQ(rle::area(object), 36u);
  // The object exactly (with a box far off: segm ignores it), and a mask half inside the crowd
  // region: IoU 0.5 with it (its own area the union), so ignored at 0.5 only.
  std::vector<CocoDetection> dets(2);
  dets[0] = {int64_t{1}, 1, {0, 0, 1, 1}, 0.9, {}, true};
  dets[0].segmentation.rles = {object};
  std::vector<uint8_t> half(400, 0);
  for (int y = 0; y < 4; ++y)
    for (int x = 5; x < 15; ++x) half[y * 20 + x] = 1;
  dets[1] = {int64_t{1}, 1, {5, 0, 10, 4}, 0.8, {}, true};
  dets[1].segmentation.rles = {rle::encode(half.data(), 20, 20)};
  CocoEvalOptions segm;
  segm.iou_type = CocoIouType::segm;
  const CocoEvalResult r = evaluate_coco(gt, dets, segm);
  EXPECT_NEAR(r.stats[1], 1.0, 1e-15);  // AP50: the hit first, the crowd's detection ignored
  EXPECT_NEAR(r.stats[8], 1.0, 1e-15);
  // Above 0.5 the crowd's detection is a false positive after the hit: AP stays 1.
  EXPECT_NEAR(r.stats[0], 1.0, 1e-15);
  // bbox: the first result's box misses.
  EXPECT_EQ(evaluate_coco(gt, dets).stats[1], 0.0);
  // A result on an image without a size, or polygons pycocotools refuses, is an error.
  CocoGroundTruth no_size = gt;
  no_size.image_sizes.clear();
  EXPECT_NE(kestrel::testing::error_of([&] { evaluate_coco(no_size, dets, segm); }).find("no height and width"),
            std::string::npos);
  CocoGroundTruth bad = gt;
  bad.annotations[0].segmentation = parse_coco_segmentation(json::parse("[[1, 2, 3, 4]]"), "x");
  EXPECT_NE(kestrel::testing::error_of([&] { evaluate_coco(bad, dets, segm); }).find("fewer than 5"), std::string::npos);
  EXPECT_NO_THROW(evaluate_coco(bad, dets));  // bbox never reads it
}

// The recorded pycocotools numbers of the segm fixtures, bit for bit, and the printed lines.
TEST(CocoEvalSegm, MatchesRecordedPycocotools) {
  for (const SegmCase& c : kSegmCases) {
    SCOPED_TRACE(std::string(c.dt) + " " + c.type);
    const Reference ref = parse_reference(file_text(kFixtures / (std::string(c.expected) + ".txt")));
    const CocoEvalResult r = evaluate_coco_files((kFixtures / "segm_gt.json").string(),
                                                 (kFixtures / (std::string(c.dt) + ".json")).string(), of_type(c.type));
    expect_same_stats(r.stats, ref.stats);
    EXPECT_EQ(coco_summary(r.stats), ref.summary);
  }
}

// YOLO polygon labels: one polygon per box, normalised; an image of 64 x 48.
std::vector<data::ImageRecord> polygon_records(int n, uint32_t seed) {
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return (seed >> 8) / 16777216.0;
  };
  std::vector<data::ImageRecord> records;
  for (int i = 0; i < n; ++i) {
    data::ImageRecord rec;
    rec.image_path = "/d/" + std::to_string(500 + i) + ".jpg";
    rec.width = i % 2 ? 64 : 100;
    rec.height = 48;
    for (int k = 0; k < 1 + i % 4; ++k) {
      const double cx = 0.1 + 0.8 * next(), cy = 0.1 + 0.8 * next(), r = 0.03 + 0.25 * next();
      std::vector<float> seg;
      float x0 = 1, y0 = 1, x1 = 0, y1 = 0;
      const int points = 3 + static_cast<int>(next() * 8);
      for (int p = 0; p < points; ++p) {
        const double a = 6.283185307179586 * p / points, rr = r * (0.5 + 0.5 * next());
        const auto x = static_cast<float>(std::clamp(cx + rr * std::cos(a), 0.0, 1.0));
        const auto y = static_cast<float>(std::clamp(cy + rr * std::sin(a), 0.0, 1.0));
        seg.insert(seg.end(), {x, y});
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
      rec.boxes.push_back({static_cast<int>(next() * 3), (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0});
      rec.segments.push_back(seg);
    }
    records.push_back(rec);
  }
  return records;
}

// The ground truth made from polygon labels: the polygon in pixels, its area pycocotools' (the
// RLE area of the polygon); its own masks as results score 1.
TEST(CocoEvalSegm, GroundTruthFromPolygonLabels) {
  std::vector<data::ImageRecord> records(1);
  records[0].image_path = "/d/7.jpg";
  records[0].width = 10;
  records[0].height = 20;
  records[0].boxes = {{1, 0.5f, 0.25f, 0.4f, 0.3f}};
  records[0].segments = {{0.3f, 0.1f, 0.7f, 0.1f, 0.7f, 0.4f, 0.3f, 0.4f}};
  const json::Value doc = coco_labels_json(records, {"a", "b"}, false);
  const json::Value& ann = doc.find("annotations")->as_array()[0];
  const json::Array& poly = ann.find("segmentation")->as_array()[0].as_array();
  ASSERT_EQ(poly.size(), 8u);
  EXPECT_DOUBLE_EQ(poly[0].as_real(), static_cast<double>(0.3f) * 10);
  EXPECT_DOUBLE_EQ(poly[1].as_real(), static_cast<double>(0.1f) * 20);
  // x 3..7, y 2..8: the pixel centres 3..6 x 2..7 inside: 4 x 6.
  EXPECT_EQ(ann.find("area")->as_real(), 24.0);
  EXPECT_EQ(ann.find("bbox")->as_array()[2].as_real(), static_cast<double>(0.4f) * 10);

  const std::vector<data::ImageRecord> many = polygon_records(12, 77);
  const CocoGroundTruth gt = parse_coco_ground_truth(coco_labels_json(many, {"a", "b", "c"}, false), "labels");
  std::vector<CocoDetection> dets;
  for (const CocoObject& a : gt.annotations) {
    CocoDetection d{a.image_id, a.category_id, a.bbox, 0.5, {}, true};
    const data::ImageRecord& rec = many[static_cast<size_t>(std::get<int64_t>(a.image_id) - 500)];
    d.segmentation.rles = {coco_segmentation_rle(a.segmentation, rec.height, rec.width)};
    EXPECT_EQ(a.area, static_cast<double>(rle::area(d.segmentation.rles[0])));
    dets.push_back(d);
  }
  CocoEvalOptions segm;
  segm.iou_type = CocoIouType::segm;
  const CocoEvalResult r = evaluate_coco(gt, dets, segm);
  EXPECT_NEAR(r.stats[0], 1.0, 1e-15);
  EXPECT_NEAR(r.stats[8], 1.0, 1e-15);
}

// The same against pycocotools run now: the fixtures, and a ground truth made from polygon labels
// by Kestrel with results made from jittered polygons.
TEST(CocoEvalSegm, MatchesLivePycocotools) {
  const std::string python = kestrel::testing::find_python({"pycocotools", "numpy"});
  if (python.empty()) GTEST_SKIP() << "no Python with pycocotools ($KESTREL_PYTHON, python3): live parity not run";
  const fs::path tmp = fs::temp_directory_path() / ("kestrel_coco_segm_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  const std::vector<data::ImageRecord> records = polygon_records(30, 31337);
  const json::Value gt_doc = coco_labels_json(records, {"a", "b", "c"}, true);
  uint32_t seed = 99;
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return (seed >> 8) / 16777216.0;
  };
  json::Array rows;
  for (const json::Value& ann : gt_doc.find("annotations")->as_array()) {
    const int64_t image = ann.find("image_id")->as_integer();
    const data::ImageRecord& rec = records[static_cast<size_t>(image - 500)];
    for (int copy = 0; copy < (next() < 0.3 ? 2 : 1); ++copy) {
      if (next() < 0.15) continue;
      std::vector<double> xy;
      for (const json::Value& v : ann.find("segmentation")->as_array()[0].as_array())
        xy.push_back(v.as_real() + (next() - 0.5) * (copy ? 6 : 2));
      const rle::Rle m = rle::from_polygon(xy.data(), xy.size() / 2, rec.height, rec.width);
      const rle::Bbox b = rle::bbox(m);
      json::Object row{{"image_id", image},
                       {"category_id", next() < 0.9 ? ann.find("category_id")->as_integer() : int64_t{3}},
                       {"bbox", json::Array{b.x, b.y, b.w + 0.25, b.h}},
                       {"score", static_cast<double>(static_cast<int>(next() * 20)) / 20},
                       {"segmentation", rle::to_json(m)}};
      rows.emplace_back(std::move(row));
    }
  }
  {
    std::ofstream(tmp / "labels_gt.json") << json::dump(gt_doc);
    std::ofstream(tmp / "labels_dt.json") << json::dump(json::Value(rows));
  }
  struct Run {
    fs::path gt, dt;
    std::string type;
  };
  std::vector<Run> runs;
  for (const SegmCase& c : kSegmCases) runs.push_back({kFixtures / "segm_gt.json", kFixtures / (std::string(c.dt) + ".json"), c.type});
  runs.push_back({tmp / "labels_gt.json", tmp / "labels_dt.json", "segm"});
  runs.push_back({tmp / "labels_gt.json", tmp / "labels_dt.json", "bbox"});
  for (const Run& run : runs) {
    SCOPED_TRACE(run.dt.string() + " " + run.type);
    const kestrel::testing::CliResult out = kestrel::testing::run_command(
        python + " tests/scripts/coco_eval_reference.py " + run.gt.string() + " " + run.dt.string() + " " + run.type);
    ASSERT_EQ(out.code, 0) << out.out;
    const Reference ref = parse_reference(out.out);
    const CocoEvalResult r = evaluate_coco_files(run.gt.string(), run.dt.string(), of_type(run.type));
    expect_same_stats(r.stats, ref.stats);
    EXPECT_EQ(coco_summary(r.stats), ref.summary);
  }
  fs::remove_all(tmp);
}

// `kestrel segment val --coco-eval` on the first 4 images of coco128-seg with the trained weights:
// both summaries after the table, against a ground truth made from the polygon labels.
TEST(CocoEvalSegm, SegmentValCommandPrintsBothSummaries) {
  if (!fs::exists(kestrel::testing::kCoco128Seg)) GTEST_SKIP() << kestrel::testing::kCoco128Seg << " is absent";
  const fs::path dir = fs::temp_directory_path() / ("kestrel_coco_segm_cli_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string yaml = kestrel::testing::scratch_coco128_seg(dir / "data", 4);
  const std::string common = "segment val --weights tests/data/yolov5n_seg_coco128_16.pt --data " + yaml +
                             " --img-size 160 --batch-size 4 --device cpu --workers 1 --project " + (dir / "val").string();
  const kestrel::testing::CliResult r = kestrel::testing::run_kestrel(common + " --coco-eval");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t bbox = r.out.find("Evaluate annotation type *bbox*"), segm = r.out.find("Evaluate annotation type *segm*");
  ASSERT_NE(bbox, std::string::npos) << r.out;
  ASSERT_NE(segm, std::string::npos) << r.out;
  EXPECT_LT(bbox, segm);
  const std::string first = " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = ";
  EXPECT_NE(r.out.find(first, bbox), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(first, segm), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("unable to run"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir / "val/exp/predictions.json"));
  const kestrel::testing::CliResult missing =
      kestrel::testing::run_kestrel(common + " --coco-gt " + (dir / "none.json").string());
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("none.json: no such file"), std::string::npos) << missing.out;
  fs::remove_all(dir);
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
