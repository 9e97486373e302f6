// `kestrel step`: one training step on a given batch, every intermediate written out, so our
// numerics can be diffed against any other implementation (the reference's train.py step with
// BN in train mode, full lr0, no warmup and no accumulation).
#include <algorithm>
#include <cstdio>

#include "engine/autograd.h"
#include "engine/ops/layout.h"
#include "engine/safetensors_tensors.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/common/shipped_files.h"
#include "yolo/model/model.h"
#include "yolo/model/weights.h"
#include "yolo/train/loss.h"
#include "yolo/train/optimizer.h"

namespace kestrel::cli {
namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

struct Batch {
  Tensor images;   // N x 3 x H x W float32
  Tensor targets;  // M x 6 float32
};

Batch load_batch(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  KESTREL_CHECK(f.contains("images") && f.contains("targets"), "batch '", path,
                "' must hold 'images' (N x 3 x H x W float32) and 'targets' (M x 6 float32)");
  Batch b{safetensors_tensor(f, "images"), safetensors_tensor(f, "targets")};
  KESTREL_CHECK(b.images.dtype() == DType::F32 && b.images.dim() == 4 && b.images.size(1) == 3,
                "batch '", path, "': images must be N x 3 x H x W float32 (NCHW), got ",
                b.images.describe());
  KESTREL_CHECK(b.images.size(0) >= 1, "batch '", path, "': no images");
  KESTREL_CHECK(b.targets.dtype() == DType::F32 && b.targets.dim() == 2 && b.targets.size(1) == 6,
                "batch '", path, "': targets must be M x 6 float32 (image, class, x, y, w, h), ",
                "got ", b.targets.describe());
  return b;
}

// The file layout of a tensor shaped like a state entry (conv weights OHWI -> OIHW), as a copy.
Tensor file_copy(const layers::StateEntry& e, const Tensor& t) {
  return (e.ohwi_conv_weight ? t.permute({0, 3, 1, 2}) : t).clone();
}

bool is_bn_statistic(const std::string& name) {
  for (const char* leaf : {".running_mean", ".running_var", ".num_batches_tracked"}) {
    const std::string l = leaf;
    if (name.size() > l.size() && name.compare(name.size() - l.size(), l.size(), l) == 0)
      return true;
  }
  return false;
}

const FlagTable kFlags = {
    {"cfg", "M.yaml", nullptr, "model yaml in the reference's format (required)"},
    {"weights", "W.safetensors", nullptr, "the model's weights, reference names, OIHW (required)"},
    {"batch", "B.safetensors", nullptr, "the batch: 'images' and 'targets' (required)"},
    {"out", "O.safetensors", nullptr, "where the outputs, losses, gradients and updates go (required)"},
    {"hyp", "H.yaml", "hyp.scratch-low", "hyperparameters"},
    {"device", "cpu|0", "cpu", "cpu, or a CUDA device index"},
    {"img-size", "PIXELS", nullptr, "image size the loss gains assume (default: the images' larger side)"}};

}  // namespace

const Command kStepCommand = {
    "step", "one training step on a batch, dumping outputs, loss, gradients and updates",
    "usage: kestrel step --cfg M.yaml --weights W.safetensors --batch B.safetensors\n"
    "                    --out O.safetensors [--hyp H.yaml] [--device cpu|0] [--img-size S]\n"
    "  --batch holds 'images' N x 3 x H x W float32 in 0..1 and 'targets' M x 6 float32 (image, class,\n"
    "  x, y, w, h normalised). --out receives pred.<level> (bs, na, ny, nx, no); loss.box, loss.obj,\n"
    "  loss.cls, loss; grad.<param>; param_after.<param> after clipping to norm 10 and one SGD Nesterov\n"
    "  step at lr0; bn_after.<buffer> (running statistics).\n",
    run_step, &kFlags};

int run_step(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags));
  for (const char* required : {"cfg", "weights", "batch", "out"})
    if (!args.has(required)) throw UsageError(str("--", required, " is required"));
  const Device device = Device::parse(args.get("device", "cpu"));
  if (device.is_cuda())
    KESTREL_CHECK(device.index < cuda_device_count(), "--device ", device.index,
                  ": this machine has ", cuda_device_count(), " CUDA devices; use --device cpu");

  yolo::DetectionModel model(yolo::load_model_config(yolo::find_shipped_file(args.get("cfg", ""), "--cfg")));
  yolo::load_weights(model, args.get("weights", ""));
  model.to(device);
  model.train(true);
  const Batch batch = load_batch(args.get("batch", ""));
  const int img_size = args.get_int32(
      "img-size", static_cast<int>(std::max(batch.images.size(2), batch.images.size(3))));
  if (img_size < 1) throw UsageError("--img-size must be positive");
  const yolo::Hyp hyp = args.has("hyp") ? yolo::load_hyp(yolo::find_shipped_file(args.get("hyp", ""), "--hyp")) : yolo::Hyp();
  layers::Detect& detect = model.detect();
  const yolo::Hyp loss_hyp = yolo::scale_loss_hyp(hyp, static_cast<int>(detect.nl),
                                                  static_cast<int>(detect.nc),
                                                  img_size);

  Named out;
  const std::vector<Tensor> preds = model.forward(ops::nchw_to_nhwc(batch.images.to(device)));
  const yolo::LossResult loss = yolo::ComputeLoss(detect, loss_hyp)(preds, batch.targets);
  loss.total.backward();
  for (size_t i = 0; i < preds.size(); ++i) out.emplace_back(str("pred.", i), preds[i].detach());
  out.emplace_back("loss.box", Tensor::scalar(loss.box));
  out.emplace_back("loss.obj", Tensor::scalar(loss.obj));
  out.emplace_back("loss.cls", Tensor::scalar(loss.cls));
  out.emplace_back("loss", loss.total.detach());

  const std::vector<layers::StateEntry> entries = model.state_entries();
  std::vector<Tensor> params;
  for (const layers::StateEntry& e : entries) {
    if (!e.is_parameter) continue;
    params.push_back(*e.slot);
    KESTREL_CHECK(e.slot->grad().defined(), "kestrel step: parameter ", e.name,
                  " received no gradient");
    out.emplace_back("grad." + e.name, file_copy(e, e.slot->grad()));
  }

  // The training loop's step at full lr0: clip, then SGD (Nesterov) over the three groups.
  yolo::clip_grad_norm(params, 10.0);
  yolo::Optimizer sgd = yolo::smart_optimizer(model, yolo::OptimizerKind::SGD, hyp.lr0,
                                              hyp.momentum, hyp.weight_decay);
  sgd.step();
  for (const layers::StateEntry& e : entries) {
    if (e.is_parameter)
      out.emplace_back("param_after." + e.name, file_copy(e, *e.slot));
    else if (is_bn_statistic(e.name))
      out.emplace_back("bn_after." + e.name, e.slot->clone());
  }
  save_safetensors(args.get("out", ""), out);
  std::printf("step: %lld images %lldx%lld, %lld targets; loss %.6g (box %.6g, obj %.6g, cls %.6g)"
              " -> %s\n",
              static_cast<long long>(batch.images.size(0)),
              static_cast<long long>(batch.images.size(2)),
              static_cast<long long>(batch.images.size(3)),
              static_cast<long long>(batch.targets.size(0)), loss.total.item(), loss.box,
              loss.obj, loss.cls, args.get("out", "").c_str());
  return 0;
}

}  // namespace kestrel::cli
