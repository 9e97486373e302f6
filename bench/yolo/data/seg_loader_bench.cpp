// The segmentation training loader's images/s on the CPU (LoaderMosaicSeg640), beside detection's
// LoaderMosaic640 (loader_bench.cpp): 4-image mosaic at 640 with its polygons, the segment random
// perspective (1000 points per polygon), overlap masks at ratio 4, HSV and flips; batches of 16
// collated into u8 NHWC images and f32 masks, on 1 and 2 worker threads, each image decoded at
// every use or, in LoaderMosaicSeg640Cached, from --cache ram. The images are
// coco128-seg's when the shared dataset is present, else 32 random 640x480 JPEGs with four
// polygons each, written once into the temp directory.
#include <filesystem>
#include <fstream>
#include <opencv2/imgproc.hpp>
#include <random>

#include "bench/kernels/bench_common.h"
#include "engine/thread_pool.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/seg_loader.h"
#include "yolo/data/seg_scan.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

constexpr int kSegBatch = 16;

std::vector<std::string> synthetic_seg_images() {
  const fs::path dir = fs::temp_directory_path() / "kestrel_seg_loader_bench";
  fs::create_directories(dir / "images");
  fs::create_directories(dir / "labels");
  std::vector<std::string> paths;
  for (int i = 0; i < 32; ++i) {
    const std::string name = "im" + std::to_string(i);
    paths.push_back((dir / "images" / (name + ".jpg")).string());
    if (fs::exists(paths.back())) continue;
    cv::Mat img(480, 640, CV_8UC3);
    cv::randu(img, 0, 256);
    write_jpeg(paths.back(), img, 90);
    std::ofstream labels(dir / "labels" / (name + ".txt"));
    for (int k = 0; k < 4; ++k)  // a pentagon per instance
      labels << k << " " << 0.1 + 0.2 * k << " 0.3 " << 0.25 + 0.2 * k << " 0.35 " << 0.28 + 0.2 * k << " 0.6 "
             << 0.17 + 0.2 * k << " 0.7 " << 0.08 + 0.2 * k << " 0.5\n";
  }
  return paths;
}

// Built once per process: the benchmark only reads it.
const std::vector<ImageRecord>& seg_bench_records() {
  static const std::vector<ImageRecord> records = [] {
    std::vector<std::string> paths;
    for (const char* root : {"../shared/datasets/coco128-seg/images/train2017",
                             "/work/shared/datasets/coco128-seg/images/train2017"}) {
      if (!fs::is_directory(root)) continue;
      for (const auto& e : fs::directory_iterator(root))
        if (e.path().extension() == ".jpg") paths.push_back(e.path().string());
      break;
    }
    if (paths.empty()) paths = synthetic_seg_images();
    std::sort(paths.begin(), paths.end());
    ThreadPool pool(2);
    return scan_segment_images(paths, 80, pool).records;
  }();
  return records;
}

// Steady state: batches of epochs in order, after a warm-up batch. With ram_cache the images are
// decoded and resized once beforehand (--cache ram); without, every use decodes its image.
void run_seg_loader(benchmark::State& state, bool ram_cache) {
  cv::setNumThreads(1);  // one core per worker, as the reference's loader workers
  const int threads = static_cast<int>(state.range(0));
  PipelineOptions po;
  po.img_size = 640;
  po.augment = true;
  po.batch_size = kSegBatch;
  auto pipeline = std::make_shared<SegAugmentPipeline>(seg_bench_records(), po, SegMaskOptions{4, true});
  if (ram_cache && !pipeline->images().cache_images(threads)) {
    state.SkipWithError("--cache ram: not enough memory for the images");
    return;
  }
  bench::Case c(state, Device::cpu(), DType::U8, str(kSegBatch, "x640x640x3_threads", threads));
  LoaderOptions lo;
  lo.batch_size = kSegBatch;
  lo.workers = threads;
  SegLoader loader(pipeline, lo, sequential_order(pipeline->size()));
  int64_t epoch = 0;
  loader.start_epoch(epoch);
  // The images the timed batches held: an epoch's last batch is short when the dataset is not a
  // multiple of kSegBatch (coco128-seg's 100 images: 6 x 16 + 4), so counting kSegBatch a batch
  // would overstate the rate. The first call is Case::run's warm-up and is not counted.
  int64_t calls = 0, images = 0;
  c.run([&] {
    std::optional<SegBatch> b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      b = loader.next();
    }
    if (calls++ > 0) images += b->size();
    benchmark::DoNotOptimize(b->masks.data_ptr());
  });
  const double per_iteration = state.iterations() > 0 ? static_cast<double>(images) / state.iterations() : 0.0;
  state.counters["images_per_s"] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LoaderMosaicSeg640(benchmark::State& state) { run_seg_loader(state, false); }
void BM_LoaderMosaicSeg640Cached(benchmark::State& state) { run_seg_loader(state, true); }

}  // namespace

BENCHMARK(BM_LoaderMosaicSeg640)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderMosaicSeg640Cached)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
