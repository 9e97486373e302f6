// Kestrel's run directory as the reference's tools read it (issue 41): opt.yaml and hyp.yaml with
// the reference's keys, order and types; weights/last.pt the checkpoint train.py saves at an
// epoch's end (read back through Kestrel's own .pt reader, it equals the epoch's safetensors
// checkpoint: weights rounded to float16, momentum buffers, group rates, epoch, EMA updates),
// best.pt and last.pt stripped as strip_optimizer leaves them when the run ends; no .kestrel.lock
// left behind. Live, where Python with torch and the v7.0 tree exist: the reference's train.py
// --resume continues Kestrel's interrupted run to its end, and its val.py on Kestrel's best.pt
// prints the numbers of Kestrel's own final validation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/safetensors_tensors.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/common/yaml_load.h"
#include "yolo/data/data_argument.h"
#include "yolo/model/pt_checkpoint.h"
#include "yolo/model/weights_file.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/reference_opt.h"
#include "yolo/train/trainer.h"

using namespace kestrel;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_reference_files_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A YAML node's type as PyYAML's safe_load gives it.
std::string kind_of(const YAML::Node& n) {
  if (n.IsMap()) return "dict";
  if (n.IsSequence()) return "list";
  if (n.IsNull()) return "None";
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return "str";
  if (std::regex_match(s, std::regex("~|null|Null|NULL|"))) return "None";
  if (std::regex_match(s, std::regex("true|True|TRUE|false|False|FALSE|yes|no|on|off"))) return "bool";
  if (std::regex_match(s, std::regex("[-+]?[0-9]+"))) return "int";
  if (std::regex_match(s, std::regex(R"([-+]?([0-9]*\.[0-9]*)([eE][-+][0-9]+)?)"))) return "float";
  return "str";
}

std::vector<std::pair<std::string, std::string>> keys_and_kinds(const YAML::Node& root) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : root) out.emplace_back(kv.first.as<std::string>(), kind_of(kv.second));
  return out;
}

// 8 images of the synthetic set with their labels, as a dataset of its own whose yaml has an
// absolute path (the reference resolves a relative one against its own tree).
std::string tiny_dataset(const fs::path& dir) {
  const std::string synthetic = yolo::resolve_data("synthetic");
  const fs::path root = fs::path(synthetic).parent_path();
  fs::create_directories(dir / "images");
  fs::create_directories(dir / "labels");
  std::vector<fs::path> images;
  for (const auto& e : fs::directory_iterator(root / "images" / "train")) images.push_back(e.path());
  std::sort(images.begin(), images.end());
  images.resize(8);
  for (const fs::path& im : images) {
    fs::copy_file(im, dir / "images" / im.filename());
    fs::copy_file(root / "labels" / "train" / im.stem().concat(".txt"), dir / "labels" / im.stem().concat(".txt"));
  }
  std::ofstream(dir / "tiny.yaml") << "path: " << fs::absolute(dir).string()
                                   << "\ntrain: images\nval: images\nnames:\n  0: circle\n  1: rectangle\n"
                                      "  2: triangle\n  3: cross\n";
  return (dir / "tiny.yaml").string();
}

yolo::TrainOptions tiny_run(const fs::path& project, const std::string& data) {
  yolo::TrainOptions o;
  o.cfg = "models/yolov5n.yaml";
  o.data = data;
  o.device = "cpu";
  o.img_size = 64;
  o.batch_size = 4;
  o.epochs = 2;
  o.workers = 1;
  o.noplots = true;
  o.no_tensorboard = true;
  o.save_period = 1;
  o.project = project.string();
  o.name = "exp";
  return o;
}

std::vector<float> floats(const SafetensorsFile& f, const std::string& name) {
  Tensor t = safetensors_tensor(f, name).to(DType::F32).contiguous();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<float> rounded_half(std::vector<float> v) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(DType::F16).to(DType::F32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void expect_no_lock(const fs::path& run) {
  EXPECT_FALSE(fs::exists(run / ".kestrel.lock")) << "the run left its lock file in " << run;
}

}  // namespace

TEST(ReferenceOpt, KeysOrderAndTypesAreTheReferences) {
  const YAML::Node reference = yolo::load_yaml(read_text("tests/data/micro_coco128_opt.yaml"), "micro_coco128_opt.yaml");
  yolo::TrainOptions o;
  o.data = "coco128.yaml";
  o.device = "cpu";
  yolo::Hyp hyp;
  const std::string text = yolo::python_yaml_dump(yolo::opt_yaml_values(o, {&hyp, "/data/coco128.yaml", "runs/train/exp", ""}));
  const YAML::Node ours = yolo::load_yaml(text, "opt.yaml");
  auto want = keys_and_kinds(reference), got = keys_and_kinds(ours);
  ASSERT_GE(got.size(), want.size()) << text;
  got.resize(want.size());  // Kestrel's own keys follow the reference's
  EXPECT_EQ(got, want) << text;
  EXPECT_EQ(keys_and_kinds(ours["hyp"]), keys_and_kinds(reference["hyp"])) << text;
  EXPECT_NE(text.find("\nfreeze:\n- 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nbucket: ''\n"), std::string::npos) << text;
  // hyp.yaml: the reference's keys in its order, floats.
  const YAML::Node h = yolo::load_yaml(yolo::python_yaml_dump(yolo::reference_hyp(hyp)), "hyp.yaml");
  EXPECT_EQ(keys_and_kinds(h), keys_and_kinds(reference["hyp"]));
  // PyYAML's spellings.
  EXPECT_EQ(yolo::python_yaml_dump({{"a", json::Value(1e-05)}, {"b", json::Value("0")}, {"c", json::Value("a: b")},
                                    {"d", json::Value("true")}, {"e", json::Value(100000.0)}}),
            "a: 1.0e-05\nb: '0'\nc: 'a: b'\nd: 'true'\ne: 100000.0\n");
}

TEST(ReferenceFiles, LastPtIsTheEpochsCheckpointAndTheEndStripsBoth) {
  const fs::path dir = scratch("run");
  const std::string data = tiny_dataset(dir / "data");
  yolo::TrainOptions first = tiny_run(dir / "runs", data);
  first.interrupt_after = 3;  // epoch 1's first batch (2 batches an epoch)
  ASSERT_EQ(yolo::train(first), 130);
  const fs::path run = dir / "runs" / "exp", w = run / "weights";
  expect_no_lock(run);
  // last.pt is epoch 0's (the reference saves at epochs' ends); last.safetensors went on into epoch 1.
  const SafetensorsFile pt = yolo::read_checkpoint_file((w / "last.pt").string());
  const SafetensorsFile st = yolo::read_checkpoint_file((w / "epoch0.safetensors").string());
  EXPECT_EQ(pt.metadata().at("epoch"), "0");
  EXPECT_EQ(pt.metadata().at("ema_updates"), st.metadata().at("ema_updates"));
  EXPECT_EQ(json::parse(pt.metadata().at("best_fitness")).as_real(), json::parse(st.metadata().at("best_fitness")).as_real());
  EXPECT_EQ(json::dump(json::parse(pt.metadata().at("optimizer"))), json::dump(json::parse(st.metadata().at("optimizer"))));
  EXPECT_EQ(json::parse(pt.metadata().at("hyp")).find("lr0")->as_real(), 0.01);
  int weights = 0, buffers = 0;
  for (const std::string& name : st.names()) {
    if (name.rfind("grad.", 0) == 0 || name.ends_with("num_batches_tracked")) continue;
    ASSERT_TRUE(pt.contains(name)) << name;
    if (name.rfind("optimizer.", 0) == 0) {
      EXPECT_EQ(floats(pt, name), floats(st, name)) << name;  // float32 in both
      ++buffers;
    } else {
      EXPECT_EQ(floats(pt, name), rounded_half(floats(st, name))) << name;
      ++weights;
    }
  }
  EXPECT_GT(weights, 300);
  EXPECT_EQ(buffers, 177);
  EXPECT_TRUE(fs::exists(w / "best.pt"));
  EXPECT_TRUE(fs::exists(w / "epoch0.pt"));

  // The reference continues it (live), from a copy of the run as Kestrel left it.
  kestrel::testing::Reference ref;
  const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml", "cv2", "pandas"}, "train.py");
  const fs::path copy = dir / "copy";
  if (missing.empty()) {
    fs::create_directories(copy);
    fs::copy(dir / "runs", copy / "runs", fs::copy_options::recursive);
    // opt.yaml names the run's own directory: the copy's, as a user moving a run would edit it.
    std::string opt = read_text(copy / "runs/exp/opt.yaml");
    opt = std::regex_replace(opt, std::regex((dir / "runs").string()), (copy / "runs").string());
    std::ofstream(copy / "runs/exp/opt.yaml") << opt;
  }

  // Kestrel finishes its own run: both .pt stripped to the EMA in float16, as best.safetensors.
  yolo::TrainOptions again = first;
  again.interrupt_after = 0;
  again.resume = (w / "last.safetensors").string();
  yolo::TrainResults results;
  ASSERT_EQ(yolo::train(again, &results), 0);
  expect_no_lock(run);
  for (const char* name : {"last", "best"}) {
    const fs::path path = w / (std::string(name) + ".pt");
    const yolo::PtCheckpoint ckpt = yolo::parse_pt_checkpoint(yolo::read_file_bytes(path.string()), path.string());
    EXPECT_EQ(ckpt.root->find("epoch")->integer, -1) << path;
    EXPECT_TRUE(ckpt.root->find("optimizer")->is(pickle::Value::Kind::None)) << path;
    EXPECT_TRUE(ckpt.root->find("ema")->is(pickle::Value::Kind::None)) << path;
    const SafetensorsFile stripped_pt = yolo::read_weights_file(path.string());
    const SafetensorsFile stripped = yolo::read_weights_file((w / (std::string(name) + ".safetensors")).string());
    for (const std::string& n : stripped.names())
      if (!n.ends_with("num_batches_tracked")) EXPECT_EQ(floats(stripped_pt, n), floats(stripped, n)) << path << " " << n;
  }

  if (!missing.empty()) {
    std::cout << "[  SKIPPED ] the reference's train.py --resume and val.py: " << missing << "\n";
    fs::remove_all(dir);
    return;
  }
  const kestrel::testing::CliResult resumed = kestrel::testing::run_reference_python(
      ref, "tests/scripts/reference_resume.py " + (copy / "runs/exp/weights/last.pt").string());
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("checkpoint epoch 0 updates"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("Resuming training from"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("from epoch 1 to 2 total epochs"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("reference resume done"), std::string::npos) << resumed.out;

  // The reference's val.py on Kestrel's stripped best.pt: Kestrel's final validation's numbers
  // (its batch: twice the training batch, as train.py's).
  const kestrel::testing::CliResult val = kestrel::testing::run_reference_python(
      ref, "tests/scripts/reference_fixture.py val " + (w / "best.pt").string() + " " + data + " 64 8 0.001 " +
               (dir / "val").string());
  ASSERT_EQ(val.code, 0) << val.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(val.out, m, std::regex(R"(full precision: P (\S+) R (\S+) mAP50 (\S+) mAP50-95 (\S+))")))
      << val.out;
  const double ref_values[] = {std::stod(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4])};
  const double ours[] = {results.precision, results.recall, results.map50, results.map};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(ours[i], ref_values[i], 1e-3 + 1e-3 * std::abs(ref_values[i])) << i << "\n" << val.out;
  fs::remove_all(dir);
}
