// `kestrel export`: the reference's export.py for its ONNX format. The graph is written next to
// the weights (best.safetensors -> best.onnx); see yolo/export/onnx_export.h for what it holds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string_view>

#include "engine/autograd.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/inference_model.h"
#include "yolo/common/console.h"
#include "yolo/export/onnx_export.h"
#include "yolo/model/classifier_file.h"
#include "yolo/model/segmentation_file.h"
#include "yolo/model/release_weights.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

double megabytes(const std::string& path) { return static_cast<double>(fs::file_size(path)) / 1e6; }

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// The reference's flags in its order, then Kestrel's own. Those for the formats Kestrel does not
// write (TorchScript, TensorFlow, TF.js, TensorRT, CoreML) and ONNX's simplifier are accepted with
// a note (print_other_format_notes).
const FlagTable kFlags = {
    {"data", "D.yaml", "data/coco128.yaml", "TF int8 calibration data in the reference; noted and ignored: Kestrel writes ONNX"},
    {"weights", "W.pt", nullptr, "weights to export: a YOLOv5 .pt or a Kestrel .safetensors (required)"},
    {"img-size", "H [W]", "640", "input size (height [width]), rounded up to multiples of the largest stride (also --img, --imgsz)"},
    {"batch-size", "N", "1", "batch size of the graph's input"},
    {"device", "cpu|0", "cpu", "cpu or a GPU index (the dry run's device)"},
    {"half", nullptr, nullptr, "float16 graph; as in the reference it needs a GPU (--device 0) and no --dynamic"},
    {"inplace", nullptr, nullptr, "Detect's in-place ops in the reference; noted and ignored: they do not change the graph"},
    {"keras", nullptr, nullptr, "TensorFlow: use Keras; noted and ignored: Kestrel writes ONNX"},
    {"optimize", nullptr, nullptr, "TorchScript: optimise for mobile; noted and ignored: Kestrel writes ONNX"},
    {"int8", nullptr, nullptr, "CoreML/TensorFlow int8 quantisation; noted and ignored: Kestrel writes ONNX"},
    {"dynamic", nullptr, nullptr, "'batch', 'height' and 'width' axes instead of fixed sizes"},
    {"simplify", nullptr, nullptr, "ONNX: onnx-simplifier; noted and ignored: Kestrel writes its graph as built"},
    {"opset", "N", "12", "ONNX opset, 12 (the reference's default) to the ONNX library's newest"},
    {"verbose", nullptr, nullptr, "TensorRT: verbose log; noted and ignored: Kestrel writes ONNX"},
    {"workspace", "GB", "4", "TensorRT: workspace size; noted and ignored: Kestrel writes ONNX"},
    {"nms", nullptr, nullptr, "TensorFlow: NMS in the graph; noted and ignored: Kestrel's ONNX ends before NMS"},
    {"agnostic-nms", nullptr, nullptr, "TensorFlow: class-agnostic NMS in the graph; noted and ignored: Kestrel's ONNX ends before NMS"},
    {"topk-per-class", "K", "100", "TF.js NMS: top k per class; noted and ignored: Kestrel writes ONNX"},
    {"topk-all", "K", "100", "TF.js NMS: top k over all classes; noted and ignored: Kestrel writes ONNX"},
    {"iou-thres", "IOU", "0.45", "TF.js NMS: IoU threshold; noted and ignored: Kestrel writes ONNX"},
    {"conf-thres", "C", "0.25", "TF.js NMS: confidence threshold; noted and ignored: Kestrel writes ONNX"},
    {"include", "onnx", "onnx", "the format; onnx is the one Kestrel writes"},
    {"cfg", "M.yaml", nullptr, "model yaml, only for plain weights files (checkpoints carry their model)"},
    {"nc", "N", nullptr, "class count, only for plain weights files"}};

// One line for each given flag that belongs to another format (or to a step Kestrel does not
// take), saying so; the ONNX export goes on as without it.
void print_other_format_notes(const Args& args) {
  for (const char* flag : {"data", "inplace", "keras", "optimize", "int8", "simplify", "verbose", "workspace",
                           "nms", "agnostic-nms", "topk-per-class", "topk-all", "iou-thres", "conf-thres"}) {
    if (!args.has(flag)) continue;
    for (const Flag& f : kFlags)
      if (std::string_view(f.name) == flag) std::printf("--%s: %s\n", flag, f.help);
  }
}

}  // namespace

const Command kExportCommand = {
    "export", "export weights for deployment: ONNX (reference export.py)",
    "usage: kestrel export --weights W.pt|W.safetensors [--include onnx] [--img-size 640 [W]] [--batch-size 1]\n"
    "                      [--dynamic] [--half] [--device cpu|0] [--opset 12] [--cfg M.yaml] [--nc N]\n"
    "  writes W.onnx next to the weights: input 'images' (batch, 3, height, width) RGB in [0, 1],\n"
    "  output 'output0' (batch, anchors, 5 + nc): xywh in pixels, objectness and class scores\n"
    "  --cfg/--nc are only needed for plain weights files (checkpoints carry their model).\n",
    run_export, &kFlags};

int run_export(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kFlags), /*lists=*/{"img-size"}, /*own=*/{"cfg", "nc"});
  const yolo::Console console(true);
  console.line(console.colour("export: "), args.echo(kFlags, {"img-size"}));
  if (!args.has("weights")) throw UsageError("--weights is required");
  const std::string include = args.get("include", "onnx");
  if (include != "onnx") throw UsageError("--include " + include + ": Kestrel exports onnx only");
  print_other_format_notes(args);
  yolo::OnnxExportOptions o;
  o.batch = args.get_int32("batch-size", 1);
  o.dynamic = args.has("dynamic");
  o.half = args.has("half");
  o.opset = args.get_int32("opset", 12);
  // --img-size H [W], as the reference's export (one size is square).
  std::vector<int> img_size = args.has("img-size") ? args.get_int_list("img-size") : std::vector<int>{640};
  if (img_size.size() == 1) img_size.push_back(img_size[0]);
  if (img_size.size() != 2) throw UsageError("--img-size takes one or two sizes (height width), e.g. 640 or 480 640");
  if (o.batch < 1 || img_size[0] < 1 || img_size[1] < 1) throw UsageError("--batch-size and --img-size must be positive");
  if (img_size[0] > kMaxImageSize || img_size[1] > kMaxImageSize)
    throw UsageError("--img-size is above the limit of " + std::to_string(kMaxImageSize) + " pixels a side");
  const Device device = inference_device(args.get("device", "cpu"));
  // As the reference: float16 export is for GPUs (where half inference runs), and a float16 graph
  // has fixed shapes.
  if (o.half && !device.is_cuda())
    throw UsageError("--half writes a float16 model and, as the reference's export, needs a GPU: add --device 0, "
                     "or drop --half for a float32 model");
  if (o.half && o.dynamic) throw UsageError("--half and --dynamic do not go together: use one of them");

  const auto start = std::chrono::steady_clock::now();
  const std::string weights = args.get("weights", "");
  onnx::ModelProto graph;
  std::vector<int64_t> shape;
  const auto round_up = [](int size, int64_t gs) { return static_cast<int64_t>(std::ceil(static_cast<double>(size) / gs)) * gs; };
  const auto sizes = [&](int64_t gs) {
    o.height = round_up(img_size[0], gs);
    o.width = round_up(img_size[1], gs);
    for (int k = 0; k < 2; ++k) {
      const int64_t used = k == 0 ? o.height : o.width;
      if (used != img_size[k])
        std::printf("WARNING: --img-size %d is not a multiple of the largest stride %lld, using %lld\n", img_size[k],
                    static_cast<long long>(gs), static_cast<long long>(used));
      if (img_size[0] == img_size[1]) break;  // one line for a square size, as before
    }
  };
  // A dry run at the export's size on the device, as the reference's: the model runs and its
  // output has the graph's shape.
  const auto dry_run = [&](const Shape& got) {
    KESTREL_CHECK(got == shape, "the model's output ", shape_text(got), " differs from the graph's ", shape_text(shape));
  };
  if (std::optional<yolo::LoadedSegmenter> loaded = yolo::try_load_segmentation_weights(weights, device)) {
    const std::shared_ptr<yolo::SegmentationModel>& seg = loaded->model;
    const auto& strides = seg->strides();
    sizes(static_cast<int64_t>(*std::max_element(strides.begin(), strides.end())));
    o.names = loaded->names;
    const onnx::ModelProto proto = yolo::build_onnx_model(*seg, o);
    shape.clear();
    for (const auto& dim : proto.graph().output(0).type().tensor_type().shape().dim()) shape.push_back(dim.dim_value());
    {
      autograd::NoGradGuard no_grad;
      dry_run(seg->predict(Tensor::zeros({o.batch, o.height, o.width, seg->config().input_channels}, DType::F32, device))
                  .boxes.shape());
    }
    std::printf("Kestrel: starting from %s with output shape %s (%.1f MB)\n", weights.c_str(), shape_text(shape).c_str(),
                megabytes(weights));
    std::printf("\nONNX: starting export with opset %d%s...\n", o.opset, o.dynamic ? ", dynamic axes" : "");
    graph = proto;
  } else if (yolo::is_classifier_weights(yolo::fetch_missing_weights(weights, /*classify=*/true))) {
    yolo::LoadedClassifier c = yolo::load_classifier_weights(weights, device);
    sizes(yolo::kClassifierStride);
    o.names = c.names;
    shape = {o.batch, c.model->nc()};
    autograd::NoGradGuard no_grad;
    dry_run(c.model->forward(Tensor::zeros({o.batch, o.height, o.width, c.model->config().input_channels}, DType::F32, device)).shape());
    std::printf("Kestrel: starting from %s with output shape %s (%.1f MB)\n", weights.c_str(), shape_text(shape).c_str(),
                megabytes(weights));
    std::printf("\nONNX: starting export with opset %d%s...\n", o.opset, o.dynamic ? ", dynamic axes" : "");
    graph = yolo::build_onnx_model(*c.model, o);
  } else {
    InferenceModel im = load_inference_model(weights, args.get("cfg", ""), args.get_optional_int32("nc"), device);
    const auto& strides = im.model->strides();
    sizes(static_cast<int64_t>(*std::max_element(strides.begin(), strides.end())));
    o.names = im.names;
    shape = yolo::onnx_output_shape(*im.model, o);
    {
      autograd::NoGradGuard no_grad;
      dry_run(im.model->predict(Tensor::zeros({o.batch, o.height, o.width, im.model->config().input_channels}, DType::F32, device))
                  .boxes.shape());
    }
    std::printf("Kestrel: starting from %s with output shape %s (%.1f MB)\n", weights.c_str(), shape_text(shape).c_str(),
                megabytes(weights));
    std::printf("\nONNX: starting export with opset %d%s...\n", o.opset, o.dynamic ? ", dynamic axes" : "");
    graph = yolo::build_onnx_model(*im.model, o);
  }

  const std::string out = fs::path(weights).replace_extension(".onnx").string();
  yolo::save_onnx_model(graph, out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ONNX: export success, %.1fs, saved as %s (%.1f MB)\n", seconds, out.c_str(), megabytes(out));
  std::printf("\nExport complete (%.1fs)\nResults saved to %s\nVisualize: https://netron.app\n", seconds,
              fs::absolute(out).parent_path().c_str());
  return 0;
}

}  // namespace kestrel::cli
