// `kestrel model`: builds a model from its yaml (a detector, a -seg model, a classifier's yaml or a
// detector's cut at --cutoff) and prints the reference's layer table and summary line; optionally
// loads weights (checking them) or writes freshly initialised ones.
#include <cstdio>
#include <memory>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/common/shipped_files.h"
#include "yolo/model/classification_model.h"
#include "yolo/model/model.h"
#include "yolo/model/segmentation_model.h"
#include "yolo/model/weights.h"

namespace kestrel::cli {
namespace {

const FlagTable kFlags = {
    {"cfg", "M.yaml", nullptr, "model yaml in the YOLOv5 format (yolov5s.yaml, yolov5s-seg.yaml, ... by name; required)"},
    {"nc", "N", nullptr, "override the yaml's number of classes"},
    {"img-size", "PIXELS", "640", "image size for the GFLOPs figure"},
    {"weights", "W.safetensors", nullptr, "load and check these weights (strict: names, shapes, dtypes)"},
    {"save", "W.safetensors", nullptr, "write the model's weights (reference names, OIHW) to this file"},
    {"half", nullptr, nullptr, "with --save: store floating-point tensors as float16"},
    {"seed", "N", "0", "seed of the weight initialisation"},
    {"cutoff", "N", nullptr, "print the classifier cut from this detection yaml at layer N (the reference's -cls models: 10)"}};

}  // namespace

const Command kModelCommand = {
    "model", "print a model's layer table, parameters and GFLOPs",
    "usage: kestrel model --cfg MODEL.yaml [--nc N] [--img-size 640] [--weights W.safetensors]\n"
    "                     [--save W.safetensors] [--half] [--seed 0] [--cutoff N]\n"
    "  prints the reference's parse_model table and summary line.\n",
    run_model, &kFlags};

int run_model(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags));
  if (!args.has("cfg")) throw UsageError("--cfg is required");
  const int64_t img_size = args.get_int("img-size", 640);
  if (img_size <= 0) throw UsageError("--img-size must be positive");
  const std::optional<int> nc = args.get_optional_int32("nc");
  const std::string cfg = yolo::find_shipped_file(args.get("cfg", ""), "--cfg");
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0));
  yolo::ModelConfig config = yolo::load_model_config(cfg);
  if (args.has("cutoff"))
    config = yolo::classifier_config(config, nc.value_or(1000), static_cast<int>(args.get_int("cutoff", 10)));
  // Each kind of model by its head: Detect, Segment (a -seg yaml) or Classify.
  std::unique_ptr<layers::Module> model;
  std::string table;
  if (yolo::is_classifier_config(config)) {
    auto m = std::make_unique<yolo::ClassificationModel>(config, seed);
    if (nc && !args.has("cutoff")) m->set_classes(*nc, seed + 1);
    table = m->describe(img_size);
    model = std::move(m);
  } else if (yolo::is_segmentation_config(config)) {
    auto m = std::make_unique<yolo::SegmentationModel>(config, nc, seed);
    table = m->describe(img_size);
    model = std::move(m);
  } else {
    auto m = std::make_unique<yolo::DetectionModel>(config, nc, seed);
    table = m->describe(img_size);
    model = std::move(m);
  }
  if (args.has("weights")) yolo::load_weights(*model, args.get("weights", ""));
  std::printf("%s", table.c_str());
  if (args.has("save")) {
    const std::string path = args.get("save", "");
    yolo::save_weights(*model, path, args.has("half") ? DType::F16 : DType::F32);
    std::printf("weights written to %s\n", path.c_str());
  }
  return 0;
}

}  // namespace kestrel::cli
