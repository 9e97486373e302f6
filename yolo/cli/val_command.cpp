// `kestrel val`: the reference's val.py on a dataset split.
#include <cstdio>
#include <filesystem>
#include <thread>

#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/inference_model.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/synthetic.h"
#include "yolo/shipped_files.h"
#include "yolo/run_dir.h"
#include "yolo/validator.h"

namespace kestrel::cli {

const Command kValCommand = {
    "val", "validate weights on a dataset: P, R, mAP50, mAP50-95 (reference val.py)",
    "usage: kestrel val --weights W.pt|W.safetensors --data D.yaml|synthetic [--img-size 640]\n"
    "                   [--batch-size 32] [--conf-thres 0.001] [--iou-thres 0.6]\n"
    "                   [--task val|test|train] [--device cpu|0] [--half] [--save-json]\n"
    "                   [--save-txt] [--save-conf] [--verbose] [--single-cls] [--max-det 300]\n"
    "                   [--workers 8] [--cfg M.yaml] [--nc N] [--project runs/val] [--name exp]\n"
    "                   [--exist-ok]\n"
    "  --cfg/--nc are only needed for plain weights files (checkpoints carry their model).\n",
    run_val};

int run_val(const std::vector<std::string>& argv) {
  Args args(argv, {{"weights", true}, {"data", true}, {"img-size", true},
                   {"batch-size", true}, {"conf-thres", true}, {"iou-thres", true}, {"task", true},
                   {"device", true}, {"half", false}, {"save-json", false}, {"save-txt", false},
                   {"save-conf", false}, {"verbose", false}, {"single-cls", false}, {"max-det", true},
                   {"workers", true}, {"cfg", true}, {"nc", true}, {"project", true}, {"name", true},
                   {"exist-ok", false}});
  if (!args.has("weights")) throw UsageError("--weights is required");
  const std::string task = args.get("task", "val");
  if (task != "val" && task != "test" && task != "train") throw UsageError("--task must be val, test or train");
  yolo::ValOptions vo;
  vo.img_size = args.get_int32("img-size", 640);
  vo.batch_size = args.get_int32("batch-size", 32);
  vo.conf_thres = args.get_double("conf-thres", 0.001);
  vo.iou_thres = args.get_double("iou-thres", 0.6);
  vo.max_det = args.get_int("max-det", 300);
  vo.single_cls = args.has("single-cls");
  vo.verbose = args.has("verbose");
  vo.save_json = args.has("save-json");
  vo.save_txt = args.has("save-txt");
  vo.save_conf = args.has("save-conf");  // as the reference: only with --save-txt
  vo.workers = args.get_int32("workers", 8);
  vo.plots = true;
  if (vo.batch_size < 1 || vo.img_size < 32) throw UsageError("--batch-size >= 1 and --img-size >= 32");
  if (vo.img_size > kMaxImageSize)
    throw UsageError("--img-size " + std::to_string(vo.img_size) + " is above the limit of " +
                     std::to_string(kMaxImageSize) + " pixels a side");
  const Device device = inference_device(args.get("device", ""));
  if (args.has("half") && !device.is_cuda())  // as the reference: half precision is a GPU matter
    std::printf("WARNING: --half is ignored on the CPU (float32 inference)\n");
  else if (args.has("half"))
    vo.compute_dtype = DType::F16;

  std::string data = args.get("data", "synthetic");
  data = data == "synthetic" ? yolo::data::ensure_synthetic_dataset(yolo::data::default_synthetic_dir())
                             : yolo::find_shipped_file(data, "--data");
  const yolo::data::DatasetConfig dcfg = yolo::data::load_dataset_config(data);
  std::optional<int> nc = args.get_optional_int32("nc");
  if (!nc) nc = vo.single_cls ? 1 : dcfg.nc;  // a checkpoint's own class count wins
  InferenceModel im = load_inference_model(args.get("weights", ""), args.get("cfg", ""), nc, device);
  const int model_nc = static_cast<int>(im.model->detect().nc);
  KESTREL_CHECK(vo.single_cls || model_nc == dcfg.nc, "the weights predict ", model_nc, " classes but ",
                dcfg.yaml_path, " has ", dcfg.nc, "; use the dataset they were trained on");
  const std::vector<std::string> names = im.names.empty() ? dcfg.names : im.names;
  // As the reference: COCO's 91 category ids only when validating on COCO's own val2017.txt.
  vo.coco_ids = dcfg.val.size() == 1 && dcfg.val[0].ends_with("coco/val2017.txt");

  yolo::data::DatasetSplit split = yolo::data::load_split(dcfg, task, dcfg.nc, vo.single_cls, true, 0,
                                                                     /*evaluation=*/true);
  std::printf("%s: %s\n", task.c_str(), split.summary.c_str());
  for (const auto& w : split.warnings) std::printf("%s: %s\n", task.c_str(), w.c_str());
  // val.py's loader: min(cores, batch (none for 1), --workers) threads (data/loader.h).
  vo.workers = yolo::data::dataloader_workers(static_cast<int>(std::thread::hardware_concurrency()), 1, vo.batch_size,
                                              static_cast<int64_t>(split.records.size()), vo.workers);
  const std::string project = args.get("project", "runs/val");
  vo.save_dir = yolo::increment_path(project + "/" + args.get("name", "exp"), args.has("exist-ok"));
  std::filesystem::create_directories(vo.save_dir);
  const int stride = static_cast<int>(std::max(32.0, im.model->strides().back()));
  yolo::Validator validator(split.records, names, model_nc, vo, device, stride);
  const yolo::Console console(true);
  validator.set_console(&console);
  std::printf("%s", validator.run(*im.model).table.c_str());
  std::printf("Results saved to %s\n", vo.save_dir.c_str());
  return 0;
}

}  // namespace kestrel::cli
