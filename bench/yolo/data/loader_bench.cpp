// The data pipeline's throughput on the CPU: decode-only images/s beside the training loader's
// images/s (4-image mosaic at 640, random perspective, HSV, flips; batches of 16 collated into
// u8 NHWC) on 1 and 2 worker threads: decoding every image each time it is used
// (LoaderMosaic640), a first epoch with the default decoded-image cache (LoaderMosaic640FirstEpoch)
// with --cache ram (LoaderMosaic640Cached) and with --cache disk (LoaderMosaic640CachedDisk); and a mosaic sample's time by stage. The images are coco128's when the shared dataset is
// present, else 32 random 640x480 JPEGs written once into the temp directory.
#include <chrono>
#include <filesystem>
#include <opencv2/imgproc.hpp>
#include <memory>
#include <random>

#include "bench/kernels/bench_common.h"
#include "engine/thread_pool.h"
#include "yolo/data/augment.h"
#include "yolo/data/hsv_rgb.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/image_io.h"
#include "yolo/data/label_scan.h"
#include "yolo/data/loader.h"
#include "yolo/data/mosaic_warp.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

constexpr int kBatch = 16;

std::vector<ImageRecord> synthetic_records() {
  const fs::path dir = fs::temp_directory_path() / "kestrel_loader_bench";
  fs::create_directories(dir);
  std::mt19937 rng(0);
  std::vector<ImageRecord> records;
  for (int i = 0; i < 32; ++i) {
    ImageRecord r{(dir / ("im" + std::to_string(i) + ".jpg")).string(), 640, 480, {}};
    if (!fs::exists(r.image_path)) {
      cv::Mat img(480, 640, CV_8UC3);
      cv::randu(img, 0, 256);
      write_jpeg(r.image_path, img, 90);
    }
    for (int k = 0; k < 4; ++k)
      r.boxes.push_back({k, 0.2f + 0.15f * k, 0.5f, 0.2f, 0.3f + 0.1f * (i % 3)});
    records.push_back(r);
  }
  return records;
}

// Built once per process: the benchmarks only read it.
const std::vector<ImageRecord>& bench_records() {
  static const std::vector<ImageRecord> records = [] {
    for (const char* root : {"../shared/datasets/coco128/images/train2017",
                             "/work/shared/datasets/coco128/images/train2017"}) {
      if (!fs::is_directory(root)) continue;
      std::vector<std::string> paths;
      for (const auto& e : fs::directory_iterator(root))
        if (e.path().extension() == ".jpg") paths.push_back(e.path().string());
      std::sort(paths.begin(), paths.end());
      ThreadPool pool(2);
      ScanResult scan = scan_images(paths, 80, pool);
      if (!scan.records.empty()) return scan.records;
    }
    return synthetic_records();
  }();
  return records;
}

// OpenCV on the calling thread only, as the reference's loader workers run it (utils/general.py
// sets cv2.setNumThreads(0)), so that "per worker" means one core's work on both sides.
void single_threaded_opencv() { cv::setNumThreads(1); }

void report_images(benchmark::State& state, double images_per_iteration) {
  state.counters["images_per_s"] =
      benchmark::Counter(images_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// Decoding alone (JPEG to BGR, EXIF applied), kBatch images per iteration on one thread.
void BM_DecodeOnly(benchmark::State& state) {
  single_threaded_opencv();
  const auto& records = bench_records();
  bench::Case c(state, Device::cpu(), DType::U8, str(records.size(), "_images"));
  size_t next = 0;
  c.run([&] {
    for (int i = 0; i < kBatch; ++i) {
      benchmark::DoNotOptimize(read_image(records[next].image_path).data);
      next = (next + 1) % records.size();
    }
  });
  report_images(state, kBatch);
}

// One training batch per iteration from a loader with `threads` workers (mosaic 640,
// scratch-low augmentations). The epoch restarts when exhausted; the loader prefetches, so the
// steady state measures how fast the workers produce batches. Cache::Ram: the images are decoded
// and resized once beforehand (--cache ram); Cache::Disk: read back from the .npy files --cache
// disk writes beside them (the images hard-linked, else copied, into a temporary folder first,
// since the shared dataset is read-only; the .npy files stay there for later runs).
enum class Cache { None, Ram, Disk };

std::vector<ImageRecord> writable_records() {
  const fs::path dir = fs::temp_directory_path() / "kestrel_loader_bench_disk";
  fs::create_directories(dir);
  std::vector<ImageRecord> records = bench_records();
  for (ImageRecord& r : records) {
    const fs::path to = dir / fs::path(r.image_path).filename();
    std::error_code ec;
    if (!fs::exists(to)) {
      fs::create_hard_link(r.image_path, to, ec);
      if (ec) fs::copy_file(r.image_path, to);
    }
    r.image_path = to.string();
  }
  return records;
}

void run_loader(benchmark::State& state, Cache cache) {
  single_threaded_opencv();
  const int threads = static_cast<int>(state.range(0));
  PipelineOptions po;
  po.img_size = 640;
  po.augment = true;
  po.batch_size = kBatch;
  auto pipeline = std::make_shared<AugmentPipeline>(
      cache == Cache::Disk ? writable_records() : bench_records(), po);
  if (cache == Cache::Ram && !pipeline->cache_images(threads)) {
    state.SkipWithError("--cache ram: not enough memory for the images");
    return;
  }
  if (cache == Cache::Disk) pipeline->cache_to_disk(threads);
  bench::Case c(state, Device::cpu(), DType::U8, str(kBatch, "x640x640x3_threads", threads));
  LoaderOptions lo;
  lo.batch_size = kBatch;
  lo.workers = threads;
  Loader loader(pipeline, lo, sequential_order(pipeline->size()));
  int64_t epoch = 0;
  loader.start_epoch(epoch);
  c.run([&] {
    std::optional<Batch> b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      b = loader.next();
    }
    benchmark::DoNotOptimize(b->images.data_ptr());
  });
  report_images(state, kBatch);
}

// Where a mosaic sample's time goes on one thread (ms per sample in the counters): decode (4
// JPEGs), resize (load_image's long side to 640), then today's path and the canvas path it
// replaced on the same draws: fused_warp (mosaic_warp.h, flips inside) and hsv_rgb (HSV straight
// to RGB), against canvas (the 1280x1280 mosaic), warp (cv::warpAffine to 640), hsv (BGR to HSV,
// tables, back to BGR) and flip_rgb (the flip and the BGR to RGB swap).
void BM_MosaicStages640(benchmark::State& state) {
  single_threaded_opencv();
  using Clock = std::chrono::steady_clock;
  const auto& records = bench_records();
  const kestrel::yolo::Hyp hyp;
  const int s = 640;
  enum { kDecode, kResize, kFused, kHsvRgb, kCanvas, kWarp, kHsv, kFlipRgb, kStages };
  fused_hsv_available();  // the fused HSV path's one-time check (0.1 s a process), outside the laps
  double t[kStages] = {};
  int64_t samples = 0, next = 0;
  auto lap = [](Clock::time_point& since) {
    const Clock::time_point now = Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - since).count();
    since = now;
    return ms;
  };
  for (auto _ : state) {
    Generator gen = sample_generator(0, 0, 0, next);
    const int yc = static_cast<int>(gen.uniform(s / 2, 3 * s / 2));
    const int xc = static_cast<int>(gen.uniform(s / 2, 3 * s / 2));
    const PerspectiveParams p = draw_perspective(gen, hyp);
    const std::optional<std::array<double, 3>> gains = draw_hsv_gains(gen, hyp.hsv_h, hyp.hsv_s, hyp.hsv_v);
    const bool lr = gen.uniform() < hyp.fliplr;
    std::array<cv::Mat, 4> decoded, tiles;
    std::array<std::vector<LabelBox>, 4> labels;
    std::array<cv::Size, 4> sizes;
    Clock::time_point at = Clock::now();
    for (int k = 0; k < 4; ++k) {
      const ImageRecord& r = records[(next + 37 * k) % records.size()];
      decoded[k] = read_image(r.image_path);
      labels[k] = r.boxes;
    }
    t[kDecode] += lap(at);
    for (int k = 0; k < 4; ++k) tiles[k] = resize_long_side(decoded[k], s, true), sizes[k] = tiles[k].size();
    t[kResize] += lap(at);
    const cv::Matx33d M = perspective_matrix(p, 2 * s, 2 * s, s, s);
    const cv::Matx23d affine(M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2));
    cv::Mat fused = warp_mosaic_affine(tiles, place_tiles(sizes, s, xc, yc), s, xc, yc, affine, s, s, lr);
    t[kFused] += lap(at);
    to_rgb_with_hsv_gains(fused, gains);
    const cv::Mat& rgb = fused;
    t[kHsvRgb] += lap(at);
    Mosaic m = place_mosaic(tiles, labels, s, xc, yc);
    t[kCanvas] += lap(at);
    Warped w = random_perspective(m.image, m.boxes, p, -s / 2);
    t[kWarp] += lap(at);
    if (gains) apply_hsv_gains(w.image, *gains);
    t[kHsv] += lap(at);
    std::vector<LabelBox> out = to_normalised_boxes(w.boxes, s, s);
    if (lr) flip_lr(w.image, out);
    cv::Mat rgb_canvas;
    cv::cvtColor(w.image, rgb_canvas, cv::COLOR_BGR2RGB);
    t[kFlipRgb] += lap(at);
    benchmark::DoNotOptimize(rgb.data);
    benchmark::DoNotOptimize(rgb_canvas.data);
    ++samples, ++next;
  }
  const char* names[kStages] = {"decode_ms", "resize_ms", "fused_warp_ms", "hsv_rgb_ms",
                                "canvas_ms", "warp_ms", "hsv_ms", "flip_rgb_ms"};
  for (int i = 0; i < kStages; ++i) state.counters[names[i]] = t[i] / std::max<int64_t>(samples, 1);
  const double today = t[kDecode] + t[kResize] + t[kFused] + t[kHsvRgb];
  state.counters["decode_share"] = t[kDecode] / std::max(today, 1e-9);
  state.counters["canvas_path_decode_share"] =
      t[kDecode] / std::max(t[kDecode] + t[kResize] + t[kCanvas] + t[kWarp] + t[kHsv] + t[kFlipRgb], 1e-9);
}

// The training default without --cache ram, from a cold start: each iteration is one whole first
// epoch of a fresh pipeline whose decoded-image cache (image_cache.h) starts empty, so an image is
// decoded once per epoch instead of once per mosaic that uses it.
void BM_LoaderMosaic640FirstEpoch(benchmark::State& state) {
  single_threaded_opencv();
  const int threads = static_cast<int>(state.range(0));
  PipelineOptions po;
  po.img_size = 640;
  po.augment = true;
  po.batch_size = kBatch;
  bench::Case c(state, Device::cpu(), DType::U8, str(kBatch, "x640x640x3_threads", threads));
  LoaderOptions lo;
  lo.batch_size = kBatch;
  lo.workers = threads;
  int64_t epoch = 0, images = 0;
  c.run([&] {
    auto pipeline = std::make_shared<AugmentPipeline>(bench_records(), po);
    pipeline->keep_decoded_images(default_image_cache_budget(1));
    Loader loader(pipeline, lo, sequential_order(pipeline->size()));
    loader.start_epoch(epoch++);
    images = 0;
    while (std::optional<Batch> b = loader.next()) images += b->size();
  });
  report_images(state, static_cast<double>(images));
}

void BM_LoaderMosaic640(benchmark::State& state) { run_loader(state, Cache::None); }
void BM_LoaderMosaic640Cached(benchmark::State& state) { run_loader(state, Cache::Ram); }
void BM_LoaderMosaic640CachedDisk(benchmark::State& state) { run_loader(state, Cache::Disk); }

}  // namespace

BENCHMARK(BM_MosaicStages640)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeOnly)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderMosaic640)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderMosaic640FirstEpoch)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderMosaic640Cached)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderMosaic640CachedDisk)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
