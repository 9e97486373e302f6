// Writing a DetectionModel as the reference's stripped checkpoint (yolo/model/pt_writer.h): read
// back by Kestrel's own .pt reader, every tensor equals the model's rounded to float16, the
// records are the reference's (module classes, one shared SiLU, yaml, names, save, strides); and,
// where Python with torch and the reference's tree are found, torch.load reads the file into a
// models.yolo.DetectionModel whose forward matches Kestrel's on the same weights. A
// SegmentationModel alike: read back through load_segmentation_weights, its Segment and Proto
// records the reference's (nm, npr, detect = getattr(Detect, 'forward')); the live check of a
// segmentation run's best.pt in torch is tests/yolo/train/segment_reference_files_test.cpp's.
#include "yolo/model/pt_writer.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/autograd.h"
#include "layers/conv.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/model/pt_checkpoint.h"
#include "yolo/model/segmentation_file.h"
#include "yolo/model/segmentation_model.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

namespace fs = std::filesystem;
using pickle::Value;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kestrel_pt_writer_" + std::to_string(::getpid()) + "_" + name)).string();
}

const std::vector<std::string> kNames = {"heron", "kestrel", "owl", "swift"};

// A yolov5n's BatchNorms given statistics and affine values other than the
// initial ones, so that a tensor written to the wrong place shows.
void give_statistics(layers::Module& m) {
  autograd::NoGradGuard no_grad;
  int k = 0;
  m.visit([&](layers::Module& module) {
    auto* bn = dynamic_cast<layers::BatchNorm2d*>(&module);
    if (!bn) return;
    const int64_t c = bn->weight.numel();
    std::vector<float> mean(c), var(c), weight(c), bias(c);
    for (int64_t i = 0; i < c; ++i, ++k) {
      mean[i] = 0.01f * static_cast<float>((k * 7) % 13) - 0.05f;
      var[i] = 0.5f + 0.1f * static_cast<float>((k * 5) % 7);
      weight[i] = 0.8f + 0.05f * static_cast<float>((k * 3) % 9);
      bias[i] = 0.02f * static_cast<float>((k * 11) % 5) - 0.04f;
    }
    bn->running_mean.copy_(Tensor::from_vector(mean, {c}));
    bn->running_var.copy_(Tensor::from_vector(var, {c}));
    bn->weight.copy_(Tensor::from_vector(weight, {c}));
    bn->bias.copy_(Tensor::from_vector(bias, {c}));
    bn->num_batches_tracked.copy_(Tensor::scalar(static_cast<double>(k), DType::I64));
  });
}

PtWriteOptions options() {
  PtWriteOptions o;
  o.names = kNames;
  o.best_fitness = 0.25;
  o.hyp = {{"lr0", json::Value(0.01)}, {"mosaic", json::Value(1.0)}};
  o.class_weights = {0.5, 1.0, 1.5, 2.0};
  o.opt = {{"epochs", json::Value(int64_t{3})}, {"cfg", json::Value("models/yolov5n.yaml")}};
  o.date = "2026-11-29T04:00:00.000000";
  return o;
}

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).to(DType::F64).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// The model's forward on one 1 x h x w x 3 image of pixel (y, x, c) = ((7y + 3x + 5c) % 17) / 16:
// the sum of the decoded detections and of the raw outputs' magnitudes.
std::pair<double, double> forward_sums(DetectionModel& m, int64_t h, int64_t w) {
  std::vector<float> pixels;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) pixels.push_back(static_cast<float>((y * 7 + x * 3 + c * 5) % 17) / 16.0f);
  m.train(false);
  autograd::NoGradGuard no_grad;
  const DetectionModel::Prediction p = m.predict(Tensor::from_vector(pixels, {1, h, w, 3}));
  double boxes = 0, raw = 0;
  for (double v : values(p.boxes)) boxes += v;
  for (const Tensor& r : p.raw)
    for (double v : values(r)) raw += std::abs(v);
  return {boxes, raw};
}

}  // namespace

TEST(PtWriter, KestrelReadsBackEveryTensorAsFloat16) {
  DetectionModel source(load_model_config("models/yolov5n.yaml"), 4, 1);
  give_statistics(source);
  const std::string path = temp_path("readback.pt");
  write_reference_pt(source, path, options());

  const SafetensorsFile file = read_weights_file(path);
  EXPECT_TRUE(is_pt_weights(file));
  EXPECT_EQ(file.metadata().at("nc"), "4");
  EXPECT_EQ(file.metadata().at("names"), R"(["heron","kestrel","owl","swift"])");
  EXPECT_EQ(inference_prefix(file), "model.");

  DetectionModel loaded(load_model_config("models/yolov5n.yaml"), 4, 99);
  load_weights(loaded, file, "model.");
  const std::vector<layers::StateEntry> want = source.state_entries(), got = loaded.state_entries();
  ASSERT_EQ(want.size(), got.size());
  ASSERT_EQ(file.names().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].name, got[i].name);
    const Tensor& w = *want[i].slot;
    EXPECT_EQ(file.entry("model." + want[i].name).dtype, is_floating(w.dtype()) ? "F16" : "I64") << want[i].name;
    const Tensor rounded = is_floating(w.dtype()) ? w.to(DType::F16) : w;
    EXPECT_EQ(values(rounded), values(*got[i].slot)) << want[i].name;
  }
  // The model's yaml comes back as the reference's DetectionModel keeps it.
  const DetectionModel from_yaml(parse_model_config(weights_model_yaml(file), "from_pt"), std::nullopt, 0);
  EXPECT_EQ(from_yaml.detect().nc, 4);
  EXPECT_EQ(from_yaml.layer_count(), source.layer_count());
  fs::remove(path);
}

TEST(PtWriter, RecordsAreTheReferences) {
  DetectionModel source(load_model_config("models/yolov5n.yaml"), 4, 2);
  give_statistics(source);
  const std::string path = temp_path("records.pt");
  write_reference_pt(source, path, options());
  const PtCheckpoint ckpt = parse_pt_checkpoint(read_file_bytes(path), path);
  const Value& root = *ckpt.root;
  std::vector<std::string> keys;
  for (const auto& [k, v] : root.entries) keys.push_back(k->text);
  EXPECT_EQ(keys, (std::vector<std::string>{"epoch", "best_fitness", "model", "ema", "updates", "optimizer", "opt",
                                            "git", "date"}));
  EXPECT_EQ(root.find("epoch")->integer, -1);
  EXPECT_EQ(root.find("best_fitness")->real, 0.25);
  EXPECT_TRUE(root.find("ema")->is(Value::Kind::None));
  EXPECT_EQ(root.find("opt")->find("epochs")->integer, 3);
  EXPECT_EQ(root.find("date")->text, "2026-11-29T04:00:00.000000");

  const Value& model = *ckpt.model;
  ASSERT_TRUE(model.is_call("models.yolo.DetectionModel"));
  EXPECT_EQ(model.state->find("yaml_file")->text, "yolov5n.yaml");
  EXPECT_EQ(model.state->find("nc")->integer, 4);
  const Value* yaml = model.state->find("yaml");
  EXPECT_EQ(yaml->find("nc")->integer, 4);
  EXPECT_EQ(yaml->find("ch")->integer, 3);
  EXPECT_EQ(yaml->find("depth_multiple")->real, 0.33);
  const Value& upsample_row = *yaml->find("head")->items[1];
  EXPECT_EQ(upsample_row.items[2]->text, "nn.Upsample");
  EXPECT_EQ(upsample_row.items[3]->items[0]->text, "None");  // as PyYAML reads [None, 2, 'nearest']
  EXPECT_EQ(upsample_row.items[3]->items[1]->integer, 2);
  std::vector<int64_t> save;
  for (const Value* v : model.state->find("save")->items) save.push_back(v->integer);
  EXPECT_EQ(save, (std::vector<int64_t>{4, 6, 10, 14, 17, 20, 23}));
  const Value* names = model.state->find("names");
  ASSERT_TRUE(names->is(Value::Kind::Dict));
  EXPECT_EQ(names->entries[1].first->integer, 1);
  EXPECT_EQ(names->entries[1].second->text, "kestrel");

  const Value& layers = *model.state->find("_modules")->find("model");
  ASSERT_TRUE(layers.is_call("torch.nn.modules.container.Sequential"));
  const auto& rows = layers.state->find("_modules")->entries;
  ASSERT_EQ(rows.size(), 25u);
  const Value& conv0 = *rows[0].second;
  EXPECT_TRUE(conv0.is_call("models.common.Conv"));
  EXPECT_EQ(conv0.state->find("type")->text, "models.common.Conv");
  EXPECT_EQ(conv0.state->find("f")->integer, -1);
  EXPECT_EQ(conv0.state->find("np")->integer, 1760);
  const Value& conv2d = *conv0.state->find("_modules")->find("conv");
  EXPECT_TRUE(conv2d.is_call("torch.nn.modules.conv.Conv2d"));
  EXPECT_EQ(conv2d.state->find("padding")->items[0]->integer, 2);
  EXPECT_TRUE(conv2d.state->find("_parameters")->find("weight")->is_call("torch._utils._rebuild_parameter"));
  EXPECT_TRUE(conv2d.state->find("_parameters")->find("bias")->is(Value::Kind::None));
  EXPECT_EQ(rows[12].second->state->find("f")->items[1]->integer, 6);
  EXPECT_EQ(rows[11].second->state->find("type")->text, "torch.nn.modules.upsampling.Upsample");
  // One SiLU, shared by every Conv.
  const Value* act = conv0.state->find("_modules")->find("act");
  EXPECT_TRUE(act->is_call("torch.nn.modules.activation.SiLU"));
  EXPECT_EQ(rows[23].second->state->find("_modules")->find("cv3")->state->find("_modules")->find("act"), act);
  const Value& detect = *rows[24].second;
  EXPECT_TRUE(detect.is_call("models.yolo.Detect"));
  EXPECT_EQ(detect.state->find("no")->integer, 9);
  EXPECT_EQ(detect.state->find("grid")->items.size(), 3u);
  const TorchTensor stride = ckpt.file.tensor(*detect.state->find("stride"), "stride");
  EXPECT_EQ(stride.dtype, "F16");
  const TorchTensor model_stride = ckpt.file.tensor(*model.state->find("stride"), "stride");
  EXPECT_EQ(model_stride.dtype, "F32");
  EXPECT_EQ(model_stride.bytes.size(), 12u);
  EXPECT_EQ(model.state->find("hyp")->find("lr0")->real, 0.01);
  const TorchTensor class_weights = ckpt.file.tensor(*model.state->find("class_weights"), "class_weights");
  EXPECT_EQ(class_weights.dtype, "F32");
  EXPECT_EQ(class_weights.shape, (std::vector<int64_t>{4}));
  fs::remove(path);
}

TEST(PtWriter, TheReferenceLoadsItAndComputesKestrelsOutputs) {
  kestrel::testing::Reference ref;
  if (const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml"}, "models/yolo.py");
      !missing.empty())
    GTEST_SKIP() << missing;
  DetectionModel source(load_model_config("models/yolov5n.yaml"), 4, 3);
  give_statistics(source);
  const std::string path = temp_path("reference.pt");
  write_reference_pt(source, path, options());
  const int64_t h = 64, w = 96;
  const kestrel::testing::CliResult r = kestrel::testing::run_reference_python(
      ref, "tests/scripts/pt_writer_check.py " + path + " " + std::to_string(h) + " " + std::to_string(w));
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.rfind("sums ");
  ASSERT_NE(at, std::string::npos) << r.out;
  std::istringstream line(r.out.substr(at + 5));
  double boxes = 0, raw = 0;
  int nc = 0;
  std::string names;
  line >> boxes >> raw >> nc >> names;
  EXPECT_EQ(nc, 4);
  EXPECT_EQ(names, "heron,kestrel,owl,swift");
  EXPECT_NE(r.out.find("hyp {'lr0': 0.01, 'mosaic': 1.0}"), std::string::npos) << r.out;

  DetectionModel same(load_model_config("models/yolov5n.yaml"), 4, 5);
  load_weights(same, path, "model.");  // the float16-rounded weights the file holds
  const auto [kestrel_boxes, kestrel_raw] = forward_sums(same, h, w);
  EXPECT_NEAR(kestrel_boxes, boxes, 1e-3 * std::abs(boxes)) << r.out;
  EXPECT_NEAR(kestrel_raw, raw, 1e-3 * std::abs(raw)) << r.out;
  // $KESTREL_PT_WRITER_KEEP names a folder to keep the file in, to try the reference's tools on.
  if (const char* keep = std::getenv("KESTREL_PT_WRITER_KEEP"))
    fs::copy_file(path, fs::path(keep) / "kestrel_written.pt", fs::copy_options::overwrite_existing);
  fs::remove(path);
}

namespace {

PtWriteOptions seg_options() {
  PtWriteOptions o;
  o.names = {"square", "triangle"};
  o.best_fitness = 0.5;
  o.opt = {{"epochs", json::Value(int64_t{2})}, {"mask_ratio", json::Value(int64_t{4})}, {"no_overlap", json::Value(false)}};
  o.date = "2026-11-29T04:00:00.000000";
  return o;
}

}  // namespace

TEST(PtWriter, SegmentationModelReadsBackAsFloat16WithTheReferencesRecords) {
  SegmentationModel source(load_model_config("models/yolov5n-seg.yaml"), 2, 1);
  give_statistics(source);
  const std::string path = temp_path("seg.pt");
  write_reference_pt(source, path, seg_options());

  const LoadedSegmenter loaded = load_segmentation_weights(path, Device::cpu());
  EXPECT_EQ(loaded.names, (std::vector<std::string>{"square", "triangle"}));
  EXPECT_EQ(loaded.model->nc(), 2);
  const std::vector<layers::StateEntry> want = source.state_entries(), got = loaded.model->state_entries();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].name, got[i].name);
    const Tensor& w = *want[i].slot;
    EXPECT_EQ(values(is_floating(w.dtype()) ? w.to(DType::F16) : w), values(*got[i].slot)) << want[i].name;
  }

  const PtCheckpoint ckpt = parse_pt_checkpoint(read_file_bytes(path), path);
  const Value& model = *ckpt.model;
  ASSERT_TRUE(model.is_call("models.yolo.SegmentationModel"));
  EXPECT_EQ(model.state->find("yaml_file")->text, "yolov5n-seg.yaml");
  EXPECT_EQ(model.state->find("yaml")->find("nc")->integer, 2);
  const auto& rows = model.state->find("_modules")->find("model")->state->find("_modules")->entries;
  ASSERT_EQ(rows.size(), 25u);
  const Value& segment = *rows[24].second;
  ASSERT_TRUE(segment.is_call("models.yolo.Segment"));
  EXPECT_EQ(segment.state->find("type")->text, "models.yolo.Segment");
  EXPECT_EQ(segment.state->find("nm")->integer, 32);
  EXPECT_EQ(segment.state->find("npr")->integer, 64);  // 256 at yolov5n's width 0.25
  EXPECT_EQ(segment.state->find("no")->integer, 5 + 2 + 32);
  const Value* detect = segment.state->find("detect");
  ASSERT_TRUE(detect && detect->is_call("__builtin__.getattr"));
  ASSERT_EQ(detect->args->items.size(), 2u);
  EXPECT_EQ(detect->args->items[0]->text, "models.yolo.Detect");
  EXPECT_EQ(detect->args->items[1]->text, "forward");
  std::vector<std::string> children;
  for (const auto& [k, v] : segment.state->find("_modules")->entries) children.push_back(k->text);
  EXPECT_EQ(children, (std::vector<std::string>{"m", "proto"}));
  const Value& proto = *segment.state->find("_modules")->find("proto");
  ASSERT_TRUE(proto.is_call("models.common.Proto"));
  children.clear();
  for (const auto& [k, v] : proto.state->find("_modules")->entries) children.push_back(k->text);
  EXPECT_EQ(children, (std::vector<std::string>{"cv1", "upsample", "cv2", "cv3"}));
  EXPECT_TRUE(proto.state->find("_modules")->find("upsample")->is_call("torch.nn.modules.upsampling.Upsample"));
  // Proto's Convs share the model's one SiLU.
  const Value* act = rows[0].second->state->find("_modules")->find("act");
  EXPECT_EQ(proto.state->find("_modules")->find("cv3")->state->find("_modules")->find("act"), act);
  fs::remove(path);
}
