// `kestrel model`: builds a model from its yaml and prints the reference's layer table and
// summary line; optionally loads weights (checking them) or writes freshly initialised ones.
#include <cstdio>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/model.h"
#include "yolo/shipped_files.h"
#include "yolo/weights.h"

namespace kestrel::cli {

const Command kModelCommand = {
    "model", "print a model's layer table, parameters and GFLOPs",
    "usage: kestrel model --cfg MODEL.yaml [--nc N] [--img-size 640] [--weights W.safetensors]\n"
    "                     [--save W.safetensors] [--half] [--seed 0]\n"
    "  --cfg       model yaml in the YOLOv5 format (models/yolov5s.yaml, ...)\n"
    "  --nc        override the yaml's number of classes\n"
    "  --img-size  image size for the GFLOPs figure (default 640)\n"
    "  --weights   load and check these weights (strict: names, shapes, dtypes)\n"
    "  --save      write the model's weights (reference names, OIHW) to this file\n"
    "  --half      with --save: store floating-point tensors as float16\n"
    "  --seed      seed of the weight initialisation (default 0)\n",
    run_model};

int run_model(const std::vector<std::string>& argv) {
  Args args(argv, {{"cfg", true}, {"nc", true}, {"img-size", true}, {"weights", true},
                   {"save", true}, {"half", false}, {"seed", true}});
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
