// `kestrel model`: builds a model from its yaml and prints the reference's layer table and
// summary line; optionally loads weights (checking them) or writes freshly initialised ones.
#include <cstdio>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/common/shipped_files.h"
#include "yolo/model/model.h"
#include "yolo/model/weights.h"

namespace kestrel::cli {
namespace {

const FlagTable kFlags = {
    {"cfg", "M.yaml", nullptr, "model yaml in the YOLOv5 format (yolov5s.yaml, ... by name; required)"},
    {"nc", "N", nullptr, "override the yaml's number of classes"},
    {"img-size", "PIXELS", "640", "image size for the GFLOPs figure"},
    {"weights", "W.safetensors", nullptr, "load and check these weights (strict: names, shapes, dtypes)"},
    {"save", "W.safetensors", nullptr, "write the model's weights (reference names, OIHW) to this file"},
    {"half", nullptr, nullptr, "with --save: store floating-point tensors as float16"},
    {"seed", "N", "0", "seed of the weight initialisation"}};

}  // namespace

const Command kModelCommand = {
    "model", "print a model's layer table, parameters and GFLOPs",
    "usage: kestrel model --cfg MODEL.yaml [--nc N] [--img-size 640] [--weights W.safetensors]\n"
    "                     [--save W.safetensors] [--half] [--seed 0]\n"
    "  prints the reference's parse_model table and summary line.\n",
    run_model, &kFlags};

int run_model(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags));
  if (!args.has("cfg")) throw UsageError("--cfg is required");
  const int64_t img_size = args.get_int("img-size", 640);
  if (img_size <= 0) throw UsageError("--img-size must be positive");
  const std::optional<int> nc = args.get_optional_int32("nc");
  const std::string cfg = yolo::find_shipped_file(args.get("cfg", ""), "--cfg");
  yolo::DetectionModel model(yolo::load_model_config(cfg), nc,
                             static_cast<uint64_t>(args.get_int("seed", 0)));
  if (args.has("weights")) yolo::load_weights(model, args.get("weights", ""));
  std::printf("%s", model.describe(img_size).c_str());
  if (args.has("save")) {
    const std::string path = args.get("save", "");
    yolo::save_weights(model, path, args.has("half") ? DType::F16 : DType::F32);
    std::printf("weights written to %s\n", path.c_str());
  }
  return 0;
}

}  // namespace kestrel::cli
