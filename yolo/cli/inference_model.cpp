#include "yolo/cli/inference_model.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "engine/safetensors_tensors.h"
#include "yolo/cli/frame_predictor.h"
#include "yolo/eval/validator.h"
#include "io/json.h"
#include "kernels/bf16_operands.h"
#include "layers/conv.h"
#include "yolo/common/shipped_files.h"
#include "yolo/common/version.h"
#include "yolo/eval/augmented_inference.h"
#include "yolo/model/release_weights.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

namespace kestrel::cli {

Device inference_device(const std::string& spec) {
  Device d = Device::cpu();
  if (spec.empty()) {
    d = cuda_available() ? Device::cuda(0) : Device::cpu();
  } else {
    d = Device::parse(spec);
    KESTREL_CHECK(d.is_cpu() || d.index < cuda_device_count(), "--device ", spec, ": no such GPU (",
                  cuda_device_count(), " CUDA devices); use --device cpu");
  }
  std::printf("%s\n", yolo::startup_line(d).c_str());  // as the reference's select_device says it
  return d;
}

namespace {

const std::string* metadata_entry(const SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata().find(key);
  return it == file.metadata().end() ? nullptr : &it->second;
}

json::Value parse_metadata(const std::string& text, const std::string& key, const std::string& weights) {
  try {
    return json::parse(text);
  } catch (const Error& e) {
    KESTREL_FAIL("'", weights, "': metadata '", key, "' is not valid JSON (", e.what(), "); the file is damaged");
  }
}

std::vector<std::string> names_of(const json::Value& names, const std::string& weights) {
  KESTREL_CHECK(names.is_array(), "'", weights, "': the class names are not a JSON list; the file is damaged");
  std::vector<std::string> out;
  for (const auto& n : names.as_array()) out.push_back(n.as_string());
  return out;
}

}  // namespace

InferenceModel load_inference_model(const std::string& weights, const std::string& cfg,
                                    std::optional<int> nc, Device device, bool allow_onnx) {
  InferenceModel out;
  // A release name (yolov5s.pt) or a URL is downloaded before its first bytes are looked at.
  const std::string local = yolo::fetch_missing_weights(weights);
  if (allow_onnx && yolo::weights_format(local) == yolo::WeightsFormat::kOnnx) {
    out.onnx = load_onnx_model(local, /*segmentation=*/false);
    out.names = out.onnx->names();
    return out;
  }
  const SafetensorsFile file = yolo::read_weights_file(local);
  yolo::ModelConfig config;
  if (const std::string* options = metadata_entry(file, "options")) {  // a training checkpoint
    json::Value opts = parse_metadata(*options, "options", weights);
    const json::Value* yaml = opts.find("cfg_yaml");
    KESTREL_CHECK(yaml, "checkpoint '", weights, "' has no model yaml in its options");
    const json::Value* cfg_name = opts.find("cfg");
    config = yolo::parse_model_config(yaml->as_string(), cfg_name ? cfg_name->as_string() : weights);
    if (opts.find("nc")) nc = static_cast<int>(opts.find("nc")->as_integer());
    if (const json::Value* names = opts.find("names")) out.names = names_of(*names, weights);
  } else if (const std::string* yaml = metadata_entry(file, "model_yaml")) {  // converted weights
    config = yolo::parse_model_config(*yaml, weights + " (its model_yaml)");
    if (const std::string* yaml_file = metadata_entry(file, "model_yaml_file"))
      config.name = std::filesystem::path(*yaml_file).stem().string();
    if (const std::string* n = metadata_entry(file, "nc")) nc = static_cast<int>(parse_metadata(*n, "nc", weights).as_integer());
    if (const std::string* names = metadata_entry(file, "names")) out.names = names_of(parse_metadata(*names, "names", weights), weights);
  } else {
    KESTREL_CHECK(!cfg.empty(), "'", weights, "' is a plain weights file without its model: ",
                  "give its model with --cfg (e.g. --cfg yolov5s.yaml) and --nc if not 80");
    config = yolo::load_model_config(yolo::find_shipped_file(cfg, "--cfg"));
  }
  out.model = std::make_shared<yolo::DetectionModel>(config, nc, 0);
  yolo::load_weights(*out.model, file, yolo::inference_prefix(file));
  out.model->to(device);
  out.model->train(false);
  // As the reference's attempt_load(fuse=True): inference runs with each BatchNorm folded into its
  // convolution once (layers/conv.cpp), and says so.
  layers::fuse_convs(*out.model);
  std::printf("Fusing layers... \n%s\n", out.model->summary(640, /*fused=*/true).c_str());
  return out;
}

}  // namespace kestrel::cli

namespace kestrel::cli {

int64_t InferenceModel::nc() const {
  if (model) return model->detect().nc;
  if (onnx->nc()) return *onnx->nc();
  return static_cast<int64_t>(names.size());
}

int InferenceModel::stride() const {
  if (onnx) return std::max(32, onnx->stride().value_or(32));
  return static_cast<int>(std::max(32.0, *std::max_element(model->strides().begin(), model->strides().end())));
}

Tensor InferenceModel::predict(const Tensor& images) {
  if (onnx) return onnx->predict(images);
  return augment ? yolo::predict_augmented(*model, images) : model->predict(images).boxes;
}

DType inference_dtype(bool half, const InferenceModel& im, Device device) {
  if (!half || im.onnx || device.is_cuda()) return inference_dtype(half, im.onnx != nullptr, device);
  // The CPU: bfloat16 activations where it has bfloat16 arithmetic (the reference ignores --half
  // there; Kestrel's --half is its fast inference on such CPUs).
  if (!kernels::cpu_bf16_support().native()) {
    std::printf("WARNING: --half on the CPU runs bfloat16 on CPUs with AVX-512 BF16 or AMX, which this one "
                "lacks (float32 inference)\n");
    return DType::F32;
  }
  if (im.augment) {
    std::printf("WARNING: --half with --augment on the CPU: float32 inference (the augmentation's scaling "
                "runs in float32 there)\n");
    return DType::F32;
  }
  std::printf("--half: bfloat16 inference on the CPU (float32 weights and sums, bfloat16 activations)\n");
  return DType::BF16;
}

DType inference_dtype(bool half, bool onnx, Device device) {
  if (!half) return DType::F32;
  if (onnx) {
    std::printf("WARNING: --half is ignored for ONNX weights: OpenCV DNN runs them on the CPU in float32\n");
    return DType::F32;
  }
  if (!device.is_cuda()) {  // as the reference: half precision is a GPU matter
    std::printf("WARNING: --half is ignored on the CPU (float32 inference)\n");
    return DType::F32;
  }
  return DType::F16;
}

void set_tf32(const std::string& tf32, InferenceModel& im) {
  KESTREL_CHECK(tf32 == "on" || tf32 == "off", "--tf32: on or off, got '", tf32, "'");
  if (im.model) layers::set_conv_math(*im.model, tf32 == "on", /*deterministic=*/false);
}

void set_augment(bool augment, InferenceModel& im) {
  if (augment && im.onnx)
    std::printf("WARNING: --augment is ignored for ONNX weights (the graph runs as exported, at one scale)\n");
  im.augment = augment && im.model;
}

std::shared_ptr<yolo::OnnxModel> load_onnx_model(const std::string& weights, bool segmentation) {
  auto onnx = std::make_shared<yolo::OnnxModel>(weights);
  if (segmentation)
    KESTREL_CHECK(onnx->segmentation(), "'", weights, "' is a detection model's export (one output, no mask "
                  "prototypes); run it with `kestrel val` or `kestrel detect`, or export a -seg model");
  else
    KESTREL_CHECK(!onnx->segmentation(), "'", weights, "' is a segmentation model's export (its output1 holds ",
                  onnx->nm(), " mask prototypes); run it with `kestrel segment val` or `kestrel segment predict`");
  return onnx;
}

Device onnx_val_settings(const yolo::OnnxModel& onnx, Device device, yolo::ValOptions& vo) {
  if (device.is_cuda()) std::printf("WARNING: ONNX weights run in OpenCV DNN on the CPU, not on %s\n", device.str().c_str());
  if (onnx.height() || onnx.width()) {
    KESTREL_CHECK(onnx.height() && onnx.width() && *onnx.height() == *onnx.width(), "'", onnx.path(),
                  "' takes ", onnx.height().value_or(0), "x", onnx.width().value_or(0), " images, but val runs square ones: "
                  "export it square (--img-size N) or with --dynamic");
    if (*onnx.height() != vo.img_size)
      std::printf("WARNING: '%s' is a fixed-size export for %lldx%lld images: validating at %lld, not --img-size %d\n",
                  onnx.path().c_str(), static_cast<long long>(*onnx.height()), static_cast<long long>(*onnx.width()),
                  static_cast<long long>(*onnx.height()), vo.img_size);
    vo.img_size = static_cast<int>(*onnx.height());
  }
  vo.batch_size = 1;
  vo.rect = false;
  std::printf("Forcing --batch-size 1 square inference (1,3,%d,%d) for non-PyTorch models\n", vo.img_size, vo.img_size);
  return Device::cpu();
}

Device onnx_predict_settings(const yolo::OnnxModel& onnx, Device device, std::vector<int>& size, DetectSettings& s) {
  if (device.is_cuda()) std::printf("WARNING: ONNX weights run in OpenCV DNN on the CPU, not on %s\n", device.str().c_str());
  s.letterbox_auto = false;
  if (onnx.height() && onnx.width()) {
    const std::vector<int> fixed = {static_cast<int>(*onnx.height()), static_cast<int>(*onnx.width())};
    if (fixed != size)
      std::printf("WARNING: '%s' is a fixed-size export for %dx%d images: detecting at that size, not --img-size %d %d\n",
                  onnx.path().c_str(), fixed[0], fixed[1], size[0], size[1]);
    size = fixed;
  }
  return Device::cpu();
}

}  // namespace kestrel::cli
