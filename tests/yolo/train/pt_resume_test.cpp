// The reference's own training checkpoint (tests/data/tiny_train.pt, train.py's last.pt of a
// tiny model after two SGD steps) as Kestrel's checkpoint: epoch, best fitness, EMA updates, hyp
// and options as the reference saved them, every momentum buffer under the name of the parameter
// the reference's optimizer index belongs to (tests/data/pt_checkpoints.json records both), the
// groups' settings, and float32 weights; a stripped .pt reads as stripped, which resume refuses.
// Runs with Adam and AdamW (tiny_adam.pt, micro_adamw.pt): every exp_avg, exp_avg_sq and step under
// its parameter's name, beta1 per group, and the next step as the reference's resume takes it.
#include "yolo/train/pt_resume.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>

#include "io/zip_archive.h"
#include "tests/support/testing.h"
#include "tests/support/zip_writer.h"
#include "yolo/model/model.h"
#include "yolo/model/model_config.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/optimizer.h"

namespace {

namespace json = kestrel::json;
namespace yolo = kestrel::yolo;
using kestrel::testing::error_of;

const json::Value& manifest(const std::string& file = "tiny_train.pt") {
  static const json::Value all = [] {
    std::ifstream in("tests/data/pt_checkpoints.json");
    return json::parse(std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
  }();
  return *all.find(file);
}

uint32_t crc_of(const kestrel::Tensor& t) {
  const kestrel::Tensor c = t.contiguous();
  return kestrel::crc32(std::string_view(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size()));
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
    const kestrel::Tensor t = safetensors_tensor(f, key);
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

// tests/data/tiny_adam.pt (Adam) and micro_adamw.pt (AdamW): train.py's last.pt after two steps.
class PtAdamResume : public ::testing::TestWithParam<std::string> {};

// Every parameter's exp_avg and exp_avg_sq under its name, bit for bit, its step count, and the
// groups' lr, initial lr, beta1 (Kestrel's per-group momentum slot) and weight decay.
TEST_P(PtAdamResume, MomentsAndStepsCarryTheirParametersNames) {
  const json::Value& m = manifest(GetParam());
  const kestrel::SafetensorsFile f = yolo::read_checkpoint_file("tests/data/" + GetParam());
  const json::Object& state = m.find("adam_state")->as_object();
  ASSERT_FALSE(state.empty());
  for (const auto& [name, expect] : state) {
    const std::string key = "optimizer." + name;
    ASSERT_TRUE(f.contains(key + ".exp_avg") && f.contains(key + ".exp_avg_sq") && f.contains(key + ".step")) << key;
    EXPECT_EQ(crc_of(safetensors_tensor(f, key + ".exp_avg")), static_cast<uint32_t>(expect.find("exp_avg_crc32")->as_integer())) << name;
    EXPECT_EQ(crc_of(safetensors_tensor(f, key + ".exp_avg_sq")), static_cast<uint32_t>(expect.find("exp_avg_sq_crc32")->as_integer())) << name;
    const kestrel::Tensor step = safetensors_tensor(f, key + ".step");
    EXPECT_EQ(step.dtype(), kestrel::DType::I64);
    EXPECT_EQ(step.shape(), kestrel::Shape{});
    EXPECT_EQ(static_cast<double>(*step.data<int64_t>()), expect.find("step")->as_real()) << name;
  }
  const json::Value groups = json::parse(f.metadata().at("optimizer"));
  EXPECT_EQ(groups.find("kind")->as_string(), m.find("optimizer")->as_string());
  const json::Array& reference = m.find("param_groups")->as_array();
  ASSERT_EQ(groups.find("groups")->as_array().size(), reference.size());
  for (size_t g = 0; g < reference.size(); ++g) {
    const json::Value& ours = groups.find("groups")->as_array()[g];
    EXPECT_EQ(ours.find("params")->as_integer(), reference[g].find("params")->as_integer());
    for (const char* key : {"lr", "initial_lr", "weight_decay"})
      EXPECT_EQ(ours.find(key)->as_real(), reference[g].find(key)->as_real()) << g << " " << key;
    EXPECT_EQ(ours.find("momentum")->as_real(), reference[g].find("betas")->as_array()[0].as_real()) << g;
  }
}

// Resumed into Kestrel's model and optimizer, one step with the gradient 0.5 * p + 0.01 moves the
// parameters where the reference's resumed optimizer (smart_optimizer, load_state_dict) moved them.
TEST_P(PtAdamResume, TheNextStepIsTheReferences) {
  const json::Value& m = manifest(GetParam());
  const std::string path = "tests/data/" + GetParam();
  const yolo::CheckpointInfo info = yolo::read_checkpoint_info(path);
  const auto nc = static_cast<int>(info.options.find("nc")->as_integer());
  yolo::DetectionModel model(yolo::parse_model_config(info.options.find("cfg_yaml")->as_string(), path), nc, 0);
  yolo::Optimizer opt = yolo::smart_optimizer(model, yolo::parse_optimizer_kind(m.find("optimizer")->as_string()),
                                              0.5, 0.5, 0.5);  // every setting comes from the checkpoint
  yolo::load_checkpoint(path, yolo::TrainingObjects{&model, nullptr, &opt, nullptr, nullptr});
  for (const kestrel::Tensor& p : opt.parameters()) {
    kestrel::Tensor g = kestrel::Tensor::empty(p.shape(), kestrel::DType::F32);
    const float* w = p.data<float>();
    float* out = g.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) out[i] = w[i] * 0.5f + 0.01f;  // elementwise: any layout
    p.set_grad(g);
  }
  opt.step();
  int compared = 0;
  double worst = 0;
  for (const kestrel::layers::StateEntry& e : model.state_entries()) {
    const json::Value* want = m.find("next_step")->find(e.name);
    if (!want) continue;
    const kestrel::Tensor file_layout = e.ohwi_conv_weight ? e.slot->permute({0, 3, 1, 2}) : *e.slot;
    const std::vector<double> got = file_layout.to_double_vector();
    const json::Array& values = want->as_array();
    ASSERT_EQ(got.size(), values.size()) << e.name;
    for (size_t i = 0; i < got.size(); ++i) {
      // Kestrel's Adam rounds as PyTorch 2's (m as a lerp towards g), 1.13 as m * b1 + (1 - b1) * g
      // and v's and p's updates in another order: a few float32 ulps apart (at most 0.13 of this
      // tolerance). Mapping errors, tried in the reference on micro_adamw.pt, land far outside it:
      // AdamW's weight decay left out 5x, beta1 0.9 or a step count of 5 over 10^5x.
      const double r = values[i].as_real(), tolerance = 1e-8 + 1e-6 * std::abs(r);
      worst = std::max(worst, std::abs(got[i] - r) / tolerance);
      EXPECT_NEAR(got[i], r, tolerance) << e.name << "[" << i << "]";
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(m.find("next_step")->as_object().size()));
  std::printf("%s: %d parameters after one resumed step, worst difference %.3g of the tolerance\n",
              GetParam().c_str(), compared, worst);
}

INSTANTIATE_TEST_SUITE_P(Files, PtAdamResume, ::testing::Values("tiny_adam.pt", "micro_adamw.pt"),
                         [](const auto& info) { return info.param == "tiny_adam.pt" ? "Adam" : "AdamW"; });

}  // namespace

namespace {

// tiny_train.pt with `insert` spliced into its data.pkl at `at` (a byte offset), re-zipped.
std::string spliced_checkpoint(const std::function<size_t(const std::string&)>& at, const std::string& insert) {
  std::ifstream in("tests/data/tiny_train.pt", std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const kestrel::ZipArchive zip = kestrel::ZipArchive::parse(bytes, "tiny_train.pt");
  std::vector<kestrel::testing::ZipInput> entries;
  for (const kestrel::ZipEntry& e : zip.entries()) {
    std::string data(zip.data(e));
    if (e.name.ends_with("/data.pkl")) data.insert(at(data), insert);
    entries.push_back({e.name, data});
  }
  const std::string path = (std::filesystem::temp_directory_path() / ("kestrel_hostile_" + std::to_string(::getpid()) + ".pt")).string();
  std::ofstream(path, std::ios::binary) << kestrel::testing::make_zip(entries);
  return path;
}

// A value a checkpoint holds where a number belongs may be anything a pickle can spell: a bare
// global of numpy's scalar (no call, so no arguments to read) is refused naming the key, as a
// crafted file did crash resume before (issue 42).
TEST(PtResume, ABareGlobalWhereANumberBelongsIsRefusedByName) {
  // POP the number the file holds, push the global `numpy.core.multiarray.scalar` in its place.
  const std::string bare_scalar = "0cnumpy.core.multiarray\nscalar\n";
  const std::string fitness = spliced_checkpoint(
      [](const std::string& pkl) {
        const size_t key = pkl.find("best_fitness");
        return pkl.find(std::string("X\x05\0\0\0model", 10), key);  // the next key: best_fitness's value ends there
      },
      bare_scalar);
  std::string e = error_of([&] { yolo::read_checkpoint_file(fitness); });
  EXPECT_NE(e.find("best_fitness"), std::string::npos) << e;
  EXPECT_NE(e.find("neither a number nor a numpy float64"), std::string::npos) << e;
  std::filesystem::remove(fitness);

  const std::string lr = spliced_checkpoint(
      [](const std::string& pkl) {
        const size_t key = pkl.find(std::string("X\x02\0\0\0lr", 7), pkl.find("param_groups"));
        const size_t value = key + 7 + 5;  // the key, its LONG_BINPUT, then the value: BINFLOAT 0.01
        EXPECT_EQ(pkl[value], 'G');
        return value + 9;
      },
      bare_scalar);
  e = error_of([&] { yolo::read_checkpoint_file(lr); });
  EXPECT_NE(e.find("optimizer group 0's 'lr'"), std::string::npos) << e;
  std::filesystem::remove(lr);
}

}  // namespace
