// The reference's own training checkpoint (tests/data/tiny_train.pt, train.py's last.pt of a
// tiny model after two SGD steps) as Kestrel's checkpoint: epoch, best fitness, EMA updates, hyp
// and options as the reference saved them, every momentum buffer under the name of the parameter
// the reference's optimizer index belongs to (tests/data/pt_checkpoints.json records both), the
// groups' settings, and float32 weights; a stripped .pt reads as stripped, which resume refuses.
#include "yolo/pt_resume.h"

#include <fstream>
#include <iterator>

#include "engine/zip_archive.h"
#include "tests/support/testing.h"
#include "yolo/checkpoint.h"

namespace {

namespace json = kestrel::json;
namespace yolo = kestrel::yolo;
using kestrel::testing::error_of;

const json::Value& manifest() {
  static const json::Value all = [] {
    std::ifstream in("tests/data/pt_checkpoints.json");
    return json::parse(std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
  }();
  return *all.find("tiny_train.pt");
}

TEST(PtResume, TheInfoIsTheReferences) {
  const yolo::CheckpointInfo info = yolo::read_checkpoint_info("tests/data/tiny_train.pt");
  EXPECT_EQ(info.epoch, manifest().find("epoch")->as_integer());
  EXPECT_EQ(info.best_fitness, manifest().find("best_fitness")->as_real());
  EXPECT_FALSE(info.stripped);
  EXPECT_DOUBLE_EQ(info.hyp.lr0, 0.01);
  EXPECT_DOUBLE_EQ(info.hyp.momentum, 0.937);
  EXPECT_EQ(info.options.find("batch_size")->as_string(), "32");
  EXPECT_EQ(info.options.find("imgsz")->as_string(), "64");
  EXPECT_EQ(info.options.find("epochs")->as_string(), "3");
  EXPECT_EQ(info.options.find("optimizer")->as_string(), "SGD");
  EXPECT_EQ(info.options.find("data")->as_string(), "synthetic");
  EXPECT_EQ(json::dump(*info.options.find("names")), json::dump(*manifest().find("names")));
  EXPECT_EQ(json::dump(json::parse(info.options.find("cfg_yaml")->as_string())), json::dump(*manifest().find("model_yaml")));
}

TEST(PtResume, MomentumBuffersCarryTheirParametersNames) {
  const kestrel::SafetensorsFile f = yolo::read_checkpoint_file("tests/data/tiny_train.pt");
  const json::Object& momentum = manifest().find("momentum")->as_object();
  int buffers = 0;
  for (const std::string& name : f.names()) buffers += name.rfind("optimizer.", 0) == 0;
  EXPECT_EQ(buffers, 177);  // every parameter: 60 biases, 60 decayed weights, 57 BN weights
  for (const auto& [name, expect] : momentum) {
    const std::string key = "optimizer." + name + ".momentum_buffer";
    ASSERT_TRUE(f.contains(key)) << key;
    const kestrel::Tensor t = f.get(key);
    EXPECT_EQ(t.dtype(), kestrel::DType::F32);
    const std::string_view bytes(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    EXPECT_EQ(kestrel::crc32(bytes), static_cast<uint32_t>(expect.find("crc32")->as_integer())) << name;
  }
  const json::Value groups = json::parse(f.metadata().at("optimizer"));
  EXPECT_EQ(groups.find("kind")->as_string(), "SGD");
  const json::Array& reference = manifest().find("param_groups")->as_array();
  ASSERT_EQ(groups.find("groups")->as_array().size(), reference.size());
  for (size_t g = 0; g < reference.size(); ++g) {
    const json::Value& ours = groups.find("groups")->as_array()[g];
    EXPECT_EQ(ours.find("params")->as_integer(), static_cast<int64_t>(reference[g].find("params")->as_array().size()));
    for (const char* key : {"lr", "initial_lr", "momentum", "weight_decay"})
      EXPECT_EQ(ours.find(key)->as_real(), reference[g].find(key)->as_real()) << g << " " << key;
  }
  EXPECT_EQ(f.metadata().at("ema_updates"), std::to_string(manifest().find("updates")->as_integer()));
}

TEST(PtResume, WeightsAreWidenedToFloat32) {
  const kestrel::SafetensorsFile f = yolo::read_checkpoint_file("tests/data/tiny_train.pt");
  EXPECT_EQ(f.entry("model.model.0.conv.weight").dtype, "F32");
  EXPECT_EQ(f.entry("ema.model.24.anchors").dtype, "F32");
  EXPECT_EQ(f.entry("ema.model.0.bn.num_batches_tracked").dtype, "I64");
}

TEST(PtResume, AStrippedPtCannotBeResumed) {
  const yolo::CheckpointInfo info = yolo::read_checkpoint_info("tests/data/yolov5n_synthetic.pt");
  EXPECT_TRUE(info.stripped);
  EXPECT_NE(error_of([&] { yolo::check_resumable(info, "best.pt"); }).find("stripped final checkpoint"), std::string::npos);
}

}  // namespace
