// train_step: throughput of one full training step (forward, loss, backward, clip, SGD) per
// model / batch / precision, one JSON line per configuration; --task classify times the
// classifier's step instead (classify_step_bench.cpp), --task segment the segmentation step
// (segment_step_bench.cpp; a -seg model, e.g. --model yolov5s-seg).
//
//   train_step --model yolov5n,yolov5s --img-size 640 --batch-size 16,32 --amp bf16 --device 0
//              --iters 20 [--warmup 3] [--data synthetic|D.yaml] [--workers 8]
//              [--cuda-graph off,on]
//
// --cuda-graph on,off measures each configuration with the step captured into CUDA graphs and
// replayed, and eagerly (TrainStep's graph mode; the warm-up covers the capture).
// Without --data the batches are random and resident on the device (compute only); with --data
// the real augmenting loader feeds every step and data_wait_pct shows how long compute waited.
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/openmp_wait.h"
#include "bench/yolo/train/step_bench.h"

namespace {

using kestrel::bench::StepConfig;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.push_back(part);
  KESTREL_CHECK(!out.empty(), "train_step: empty list '", s, "'");
  return out;
}

int to_int(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size()) return n;
  } catch (const std::exception&) {
  }
  KESTREL_CHECK(false, "train_step ", flag, ": expected an integer, got '", v, "'");
  return 0;
}

const char* kUsage =
    "usage: train_step --model M[,M2] --img-size S --batch-size B[,B2] --amp bf16|fp16|off|bf16-emulated[,..]\n"
    "                  (--amp bf16-operands: the CPU's float32 activations with bfloat16 convolution operands)\n"
    "                  --device cpu|0 --iters N [--warmup K] [--data D.yaml|synthetic] [--workers W]\n"
    "                  [--profile]   per-op forward/backward/update time table on stderr\n"
    "                  [--forward-only]   inference instead: eval mode, no gradients, BN folded\n"
    "                  [--cuda-graph off|on[,..]]   replay the step from CUDA graphs (CUDA only)\n"
    "                  [--tf32 off|on]   CUDA float32 convolutions on TF32 tensor cores (off: FMA only)\n"
    "                  [--task detect|classify|segment]   classify: classify/train.py's step (Adam, 1000 classes);\n"
    "                          segment: segment/train.py's (a -seg model, overlap masks, resident batches)\n";

}  // namespace

int main(int argc, char** argv) {
  kestrel::settle_openmp_wait(argv);  // before any thread: libgomp reads it when it loads
  std::map<std::string, std::string> args{{"model", "yolov5s"}, {"img-size", "640"}, {"batch-size", "16"},
                                          {"amp", "off"},       {"device", "cpu"},    {"iters", "10"},
                                          {"warmup", "2"},      {"data", ""},         {"workers", "4"},
                                          {"profile", "0"},     {"forward-only", "0"}, {"cuda-graph", "off"},
                                          {"task", "detect"},   {"tf32", "off"}};
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        std::printf("%s", kUsage);
        return 0;
      }
      KESTREL_CHECK(a.rfind("--", 0) == 0, "train_step: unexpected argument '", a, "'\n", kUsage);
      std::string key = a.substr(2), value;
      if (const size_t eq = key.find('='); eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (key == "profile" || key == "forward-only") {  // bare switches
        value = "1";
      } else {
        KESTREL_CHECK(i + 1 < argc, "train_step: --", key, " needs a value");
        value = argv[++i];
      }
      KESTREL_CHECK(args.count(key), "train_step: unknown flag --", key, "\n", kUsage);
      args[key] = value;
    }
    StepConfig base;
    base.img_size = to_int("--img-size", args["img-size"]);
    base.iters = to_int("--iters", args["iters"]);
    base.warmup = to_int("--warmup", args["warmup"]);
    base.workers = to_int("--workers", args["workers"]);
    base.data = args["data"];
    base.task = args["task"];
    base.profile = args["profile"] != "0";
    base.forward_only = args["forward-only"] != "0";
    base.device = kestrel::Device::parse(args["device"]);
    KESTREL_CHECK(args["tf32"] == "on" || args["tf32"] == "off", "train_step --tf32: on or off, got '",
                  args["tf32"], "'");
    base.tf32 = args["tf32"] == "on";
    KESTREL_CHECK(base.device.is_cpu() || kestrel::cuda_available(), "train_step --device ", args["device"],
                  ": no CUDA device here; use --device cpu");

    int failures = 0;
    for (const std::string& model : split_list(args["model"]))
      for (const std::string& batch : split_list(args["batch-size"]))
        for (const std::string& amp : split_list(args["amp"]))
          for (const std::string& graphs : split_list(args["cuda-graph"])) {
            KESTREL_CHECK(graphs == "on" || graphs == "off", "train_step --cuda-graph: on or off, got '", graphs, "'");
            StepConfig c = base;
            c.model = model;
            c.batch = to_int("--batch-size", batch);
            c.amp = amp;
            c.cuda_graph = graphs == "on";
            // One configuration failing (out of memory at a large batch) does not stop the sweep.
            try {
              std::printf("%s\n", kestrel::bench::result_json(c, kestrel::bench::run_step_bench(c)).c_str());
            } catch (const std::exception& e) {
              std::printf("%s\n", kestrel::bench::error_json(c, e.what()).c_str());
              ++failures;
            }
            std::fflush(stdout);
          }
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
