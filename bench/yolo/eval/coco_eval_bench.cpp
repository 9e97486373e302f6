// COCO evaluation (yolo/eval/coco_eval) on a synthetic COCO-val-sized set: 5000 images of
// 640x480, ~7 objects each (1-13, 1 in 100 a crowd region) over 80 categories, ~100 detections
// each (1-3 jittered ones per object, the rest anywhere, of any category, scores to 5 digits).
// CocoEval5000 times evaluate_coco on the set in memory: what pycocotools' evaluate() +
// accumulate() do (bench/pytorch/coco_eval_reference.py times those on the same set);
// CocoEval5000Files adds reading the two JSON files.
//
// The set is drawn from a fixed seed and written once to $TMPDIR/kestrel_coco_eval_bench/
// (gt.json, dt.json) for the Python side to read; the counter AP is stats[0], which both must
// agree on.
//
// CocoEvalSegm1000 times the segm evaluation (masks' IoU) of a smaller set: 1000 images of
// 640x480, ~7 objects each as polygons of 6-16 vertices (1 in 50 a crowd region as uncompressed
// RLE), ~20 results each with compressed RLE masks (jittered copies of the polygons, the rest
// anywhere) and boxes, as segment/val.py writes them; in $TMPDIR/kestrel_coco_segm_bench/
// (bench/pytorch/coco_eval_reference.py --iou-type segm --dir that).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/rle.h"
#include "yolo/eval/coco_eval.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

constexpr int kImages = 5000, kClasses = 80, kWidth = 640, kHeight = 480;

struct Set {
  json::Value gt, dt;
  CocoGroundTruth ground_truth;
  std::vector<CocoDetection> detections;
  fs::path gt_path, dt_path;
};

double rounded(double v, double scale) { return std::round(v * scale) / scale; }

const Set& synthetic_set() {
  static const Set set = [] {
    std::mt19937_64 rng(5000);
    auto u = [&](double lo, double hi) { return lo + (hi - lo) * ((rng() >> 11) * 0x1.0p-53); };
    auto n = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
    json::Array images, annotations, categories, rows;
    for (int c = 0; c < kClasses; ++c)
      categories.emplace_back(json::Object{{"id", coco_category_id(c, true)}, {"name", "class" + std::to_string(c)}});
    auto box = [&](double x, double y, double w, double h) {
      return json::Array{rounded(x, 100), rounded(y, 100), rounded(w, 100), rounded(h, 100)};
    };
    for (int i = 0; i < kImages; ++i) {
      const int64_t id = 100000 + i;
      images.emplace_back(json::Object{{"id", id}, {"width", int64_t{kWidth}}, {"height", int64_t{kHeight}}});
      const int objects = n(1, 13);
      int detections = 0;
      for (int o = 0; o < objects; ++o) {
        const double w = std::exp(u(std::log(6.0), std::log(400.0))), h = w * u(0.5, 2.0);
        const double x = u(0, kWidth - std::min(w, kWidth - 1.0)), y = u(0, kHeight - std::min(h, kHeight - 1.0));
        const int64_t cat = coco_category_id(n(0, kClasses - 1), true);
        const bool crowd = n(0, 99) == 0;
        annotations.emplace_back(json::Object{{"id", static_cast<int64_t>(annotations.size() + 1)},
                                              {"image_id", id},
                                              {"category_id", cat},
                                              {"bbox", box(x, y, w, h)},
                                              {"area", rounded(w * h * (crowd ? 1.0 : u(0.6, 1.0)), 100)},
                                              {"iscrowd", int64_t{crowd}}});
        for (int d = n(1, 3); d > 0; --d, ++detections) {
          const double jw = w * u(0.8, 1.2), jh = h * u(0.8, 1.2);
          rows.emplace_back(json::Object{{"image_id", id},
                                         {"category_id", n(0, 9) ? cat : coco_category_id(n(0, kClasses - 1), true)},
                                         {"bbox", box(x + w * u(-0.1, 0.1), y + h * u(-0.1, 0.1), jw, jh)},
                                         {"score", rounded(u(0.05, 1.0), 1e5)}});
        }
      }
      for (; detections < 100; ++detections) {
        const double w = u(4, 300), h = u(4, 300);
        rows.emplace_back(json::Object{{"image_id", id},
                                       {"category_id", coco_category_id(n(0, kClasses - 1), true)},
                                       {"bbox", box(u(0, kWidth - w), u(0, kHeight - h), w, h)},
                                       {"score", rounded(u(0.001, 0.6), 1e5)}});
      }
    }
    Set s;
    s.gt = json::Object{{"images", std::move(images)}, {"annotations", std::move(annotations)},
                        {"categories", std::move(categories)}};
    s.dt = json::Value(std::move(rows));
    s.ground_truth = parse_coco_ground_truth(s.gt, "synthetic gt");
    s.detections = parse_coco_detections(s.dt, "synthetic detections");
    const fs::path dir = fs::temp_directory_path() / "kestrel_coco_eval_bench";
    fs::create_directories(dir);
    s.gt_path = dir / "gt.json";
    s.dt_path = dir / "dt.json";
    std::ofstream(s.gt_path) << json::dump(s.gt);
    std::ofstream(s.dt_path) << json::dump(s.dt);
    return s;
  }();
  return set;
}

// The set's size, and (once, on stderr) the stats both sides must agree on.
void report(benchmark::State& state, const Set& s, const CocoEvalResult& r) {
  state.SetLabel("shape=" + std::to_string(kImages) + "img_" + std::to_string(s.ground_truth.annotations.size()) +
                 "gt_" + std::to_string(s.detections.size()) + "dt_80cls device=cpu");
  static bool printed = false;
  if (!printed) {
    std::fprintf(stderr, "CocoEval5000: AP %.17g AP50 %.17g (gt %s, results %s)\n", r.stats[0], r.stats[1],
                 s.gt_path.c_str(), s.dt_path.c_str());
    printed = true;
  }
}

void BM_CocoEval5000(benchmark::State& state) {
  const Set& s = synthetic_set();
  CocoEvalResult r;
  for (auto _ : state) {
    r = evaluate_coco(s.ground_truth, s.detections);
    benchmark::DoNotOptimize(r.stats);
  }
  report(state, s, r);
}

void BM_CocoEval5000Files(benchmark::State& state) {
  const Set& s = synthetic_set();
  CocoEvalResult r;
  for (auto _ : state) {
    r = evaluate_coco_files(s.gt_path.string(), s.dt_path.string());
    benchmark::DoNotOptimize(r.stats);
  }
  report(state, s, r);
}

constexpr int kSegmImages = 1000;

const Set& synthetic_segm_set() {
  static const Set set = [] {
    std::mt19937_64 rng(1000);
    auto u = [&](double lo, double hi) { return lo + (hi - lo) * ((rng() >> 11) * 0x1.0p-53); };
    auto n = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
    json::Array images, annotations, categories, rows;
    for (int c = 0; c < kClasses; ++c)
      categories.emplace_back(json::Object{{"id", coco_category_id(c, true)}, {"name", "class" + std::to_string(c)}});
    auto polygon = [&](double cx, double cy, double r, double jitter) {
      std::vector<double> xy;
      const int k = n(6, 16);
      for (int i = 0; i < k; ++i) {
        const double a = 6.283185307179586 * i / k, rr = r * u(0.6, 1.0);
        xy.push_back(rounded(cx + rr * std::cos(a) + u(-jitter, jitter), 100));
        xy.push_back(rounded(cy + rr * std::sin(a) + u(-jitter, jitter), 100));
      }
      return xy;
    };
    auto result = [&](int64_t id, int64_t cat, const std::vector<double>& xy, double score) {
      const rle::Rle m = rle::from_polygon(xy.data(), xy.size() / 2, kHeight, kWidth);
      const rle::Bbox b = rle::bbox(m);
      rows.emplace_back(json::Object{{"image_id", id},
                                     {"category_id", cat},
                                     {"bbox", json::Array{b.x, b.y, b.w, b.h}},
                                     {"score", score},
                                     {"segmentation", rle::to_json(m)}});
    };
    for (int i = 0; i < kSegmImages; ++i) {
      const int64_t id = 200000 + i;
      images.emplace_back(json::Object{{"id", id}, {"width", int64_t{kWidth}}, {"height", int64_t{kHeight}}});
      int detections = 0;
      for (int o = n(1, 13); o > 0; --o) {
        const double r = std::exp(u(std::log(4.0), std::log(200.0)));
        const double cx = u(0, kWidth), cy = u(0, kHeight);
        const int64_t cat = coco_category_id(n(0, kClasses - 1), true);
        const bool crowd = n(0, 49) == 0;
        const std::vector<double> xy = polygon(cx, cy, r, 0);
        json::Array poly;
        for (double v : xy) poly.emplace_back(v);
        json::Value segmentation = json::Array{json::Value(std::move(poly))};
        const rle::Rle mask = rle::from_polygon(xy.data(), xy.size() / 2, kHeight, kWidth);
        if (crowd) {
          json::Array counts;
          for (uint32_t c : mask.counts) counts.emplace_back(static_cast<int64_t>(c));
          segmentation = json::Object{{"size", json::Array{int64_t{kHeight}, int64_t{kWidth}}}, {"counts", std::move(counts)}};
        }
        const rle::Bbox b = rle::bbox(mask);
        annotations.emplace_back(json::Object{{"id", static_cast<int64_t>(annotations.size() + 1)},
                                              {"image_id", id},
                                              {"category_id", cat},
                                              {"bbox", json::Array{b.x, b.y, b.w, b.h}},
                                              {"area", static_cast<double>(rle::area(mask))},
                                              {"iscrowd", int64_t{crowd}},
                                              {"segmentation", std::move(segmentation)}});
        for (int d = n(1, 2); d > 0; --d, ++detections)
          result(id, n(0, 9) ? cat : coco_category_id(n(0, kClasses - 1), true), polygon(cx, cy, r, 0.15 * r),
                 rounded(u(0.05, 1.0), 1e5));
      }
      for (; detections < 20; ++detections)
        result(id, coco_category_id(n(0, kClasses - 1), true), polygon(u(0, kWidth), u(0, kHeight), u(3, 120), 0),
               rounded(u(0.001, 0.6), 1e5));
    }
    Set s;
    s.gt = json::Object{{"images", std::move(images)}, {"annotations", std::move(annotations)},
                        {"categories", std::move(categories)}};
    s.dt = json::Value(std::move(rows));
    s.ground_truth = parse_coco_ground_truth(s.gt, "synthetic segm gt");
    s.detections = parse_coco_detections(s.dt, "synthetic segm detections");
    const fs::path dir = fs::temp_directory_path() / "kestrel_coco_segm_bench";
    fs::create_directories(dir);
    s.gt_path = dir / "gt.json";
    s.dt_path = dir / "dt.json";
    std::ofstream(s.gt_path) << json::dump(s.gt);
    std::ofstream(s.dt_path) << json::dump(s.dt);
    return s;
  }();
  return set;
}

void BM_CocoEvalSegm1000(benchmark::State& state) {
  const Set& s = synthetic_segm_set();
  CocoEvalOptions options;
  options.iou_type = CocoIouType::segm;
  CocoEvalResult r;
  for (auto _ : state) {
    r = evaluate_coco(s.ground_truth, s.detections, options);
    benchmark::DoNotOptimize(r.stats);
  }
  state.SetLabel("shape=" + std::to_string(kSegmImages) + "img_" + std::to_string(s.ground_truth.annotations.size()) +
                 "gt_" + std::to_string(s.detections.size()) + "dt_80cls_segm device=cpu");
  static bool printed = false;
  if (!printed) {
    std::fprintf(stderr, "CocoEvalSegm1000: AP %.17g AP50 %.17g (gt %s, results %s)\n", r.stats[0], r.stats[1],
                 s.gt_path.c_str(), s.dt_path.c_str());
    printed = true;
  }
}

}  // namespace

BENCHMARK(BM_CocoEval5000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CocoEval5000Files)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CocoEvalSegm1000)->Unit(benchmark::kMillisecond);
