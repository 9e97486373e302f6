// The classification loader's throughput on the CPU (LoaderClassify224): whole shuffled training
// epochs (RandomResizedCrop to 224, flip, colour jitter, ImageNet normalisation into float32 NHWC
// batches of 64) on 1 and 2 worker threads, decoding every image each time (no --cache), and with
// --cache ram (LoaderClassify224Cached). The images are coco128-cls/train's when the shared dataset
// is present, else 140 random JPEGs of its typical sizes written once into the temp directory.
// bench/pytorch/classify_loader_reference.py times the reference on the same images.
#include <filesystem>
#include <random>

#include "bench/kernels/bench_common.h"
#include "yolo/data/classify_loader.h"
#include "yolo/data/image_codec.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

constexpr int kBatch = 64;

std::vector<ClassifySample> synthetic_samples() {
  const fs::path dir = fs::temp_directory_path() / "kestrel_classify_loader_bench";
  std::mt19937 rng(0);
  std::uniform_int_distribution<int> side(40, 320);
  std::vector<ClassifySample> samples;
  for (int i = 0; i < 140; ++i) {
    const fs::path p = dir / std::to_string(i % 10) / ("im" + std::to_string(i) + ".jpg");
    const int w = side(rng), h = side(rng);
    if (!fs::exists(p)) {
      fs::create_directories(p.parent_path());
      cv::Mat img(h, w, CV_8UC3);
      cv::randu(img, 0, 256);
      write_jpeg(p.string(), img, 90);
    }
    samples.push_back({p.string(), i % 10});
  }
  return samples;
}

// Built once per process: the benchmarks only read it.
const std::vector<ClassifySample>& bench_samples() {
  static const std::vector<ClassifySample> samples = [] {
    for (const char* root : {"../shared/datasets/coco128-cls", "/work/shared/datasets/coco128-cls"})
      if (fs::is_directory(root)) return load_classify_dataset(root).train.samples;
    return synthetic_samples();
  }();
  return samples;
}

// OpenCV on the calling thread only, as the reference's loader workers run it (cv2.setNumThreads(0)).
void run_loader(benchmark::State& state, ClassifyCacheMode cache) {
  cv::setNumThreads(1);
  const int threads = static_cast<int>(state.range(0));
  ClassifyLoaderOptions o;
  o.size = 224;
  o.batch_size = kBatch;
  o.augment = o.shuffle = true;
  o.workers = threads;
  o.cache = cache;
  ClassifyLoader loader(bench_samples(), o);
  bench::Case c(state, Device::cpu(), DType::F32, str(kBatch, "x224x224x3_threads", threads));
  int64_t epoch = 0;
  c.run([&] {
    loader.start_epoch(epoch++);
    while (std::optional<ClassifyBatch> b = loader.next()) benchmark::DoNotOptimize(b->images.data_ptr());
  });
  state.counters["images_per_s"] = benchmark::Counter(static_cast<double>(loader.samples_per_epoch()),
                                                      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LoaderClassify224(benchmark::State& state) { run_loader(state, ClassifyCacheMode::None); }
void BM_LoaderClassify224Cached(benchmark::State& state) { run_loader(state, ClassifyCacheMode::Ram); }

}  // namespace

BENCHMARK(BM_LoaderClassify224)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderClassify224Cached)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond);
