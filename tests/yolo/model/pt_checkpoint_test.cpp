// The reference's own checkpoints (tests/data/make_pt_checkpoints.py: a stripped yolov5n and a
// tiny model's training checkpoint, saved by YOLOv5 v7.0 on PyTorch 1.13) read without Python:
// every tensor's name, dtype, shape and bytes (CRC-32) as the reference's state_dict holds them
// (tests/data/pt_checkpoints.json), the model yaml, class count and names, and a model built from
// that yaml takes the weights. Hostile pickles inside a .pt are refused naming their global.
#include "yolo/model/pt_checkpoint.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include "io/pickle.h"
#include "io/zip_archive.h"
#include "tests/support/testing.h"
#include "tests/support/zip_writer.h"
#include "yolo/model/model.h"
#include "yolo/model/model_config.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

namespace {

using namespace std::string_literals;
using kestrel::SafetensorsFile;
using kestrel::testing::error_of;
namespace json = kestrel::json;
namespace yolo = kestrel::yolo;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const json::Value& manifest(const std::string& file) {
  static const json::Value all = json::parse(read_all("tests/data/pt_checkpoints.json"));
  return *all.find(file);
}

class ReferenceCheckpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceCheckpoint, EveryTensorMatchesTheReferencesStateDict) {
  const json::Value& m = manifest(GetParam());
  const SafetensorsFile f = yolo::read_weights_file("tests/data/" + GetParam());
  const json::Object& tensors = m.find("tensors")->as_object();
  EXPECT_EQ(f.names().size(), tensors.size());
  for (const auto& [name, expect] : tensors) {
    ASSERT_TRUE(f.contains(name)) << name;
    const kestrel::SafetensorsEntry& e = f.entry(name);
    EXPECT_EQ(e.dtype, expect.find("dtype")->as_string()) << name;
    kestrel::Shape shape;
    for (const json::Value& d : expect.find("shape")->as_array()) shape.push_back(d.as_integer());
    EXPECT_EQ(e.shape, shape) << name;
    const kestrel::Tensor t = safetensors_tensor(f, name);
    const std::string_view bytes(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    EXPECT_EQ(kestrel::crc32(bytes), static_cast<uint32_t>(expect.find("crc32")->as_integer())) << name;
  }
}

TEST_P(ReferenceCheckpoint, CarriesItsModelYamlClassesAndNames) {
  const json::Value& m = manifest(GetParam());
  const SafetensorsFile f = yolo::read_weights_file("tests/data/" + GetParam());
  EXPECT_EQ(json::dump(json::parse(f.metadata().at("model_yaml"))), json::dump(*m.find("model_yaml")));
  EXPECT_EQ(f.metadata().at("nc"), std::to_string(m.find("nc")->as_integer()));
  EXPECT_EQ(f.metadata().at("names"), json::dump(*m.find("names")));
  EXPECT_EQ(f.metadata().at("source"), GetParam());
  // The yaml file each was built from (make_pt_checkpoints.py), which names the model's summary.
  const std::string yaml_file = f.metadata().at("model_yaml_file");
  EXPECT_EQ(yaml_file, GetParam() == "tiny_train.pt" ? "tiny.yaml" : "yolov5n.yaml");
}

TEST_P(ReferenceCheckpoint, AModelBuiltFromItsYamlTakesItsWeights) {
  const SafetensorsFile f = yolo::read_weights_file("tests/data/" + GetParam());
  const yolo::ModelConfig config = yolo::parse_model_config(f.metadata().at("model_yaml"), GetParam());
  yolo::DetectionModel model(config, std::stoi(f.metadata().at("nc")), 0);
  EXPECT_EQ(yolo::inference_prefix(f), f.contains("ema.model.0.conv.weight") ? "ema." : "model.");
  EXPECT_EQ(yolo::load_inference_weights(model, "tests/data/" + GetParam()), yolo::inference_prefix(f));
  for (const auto& e : model.state_entries()) {  // the anchors too: AutoAnchor's, in stride units
    if (e.name.find("anchors") != std::string::npos) {
      EXPECT_TRUE(kestrel::testing::all_close(*e.slot, safetensors_tensor(f, yolo::inference_prefix(f) + e.name), 0, 0));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, ReferenceCheckpoint,
                         ::testing::Values("yolov5n_synthetic.pt", "yolov5n_coco80.pt", "tiny_train.pt"),
                         [](const auto& info) {
                           return std::string(info.param == std::string("tiny_train.pt")      ? "Training"
                                              : info.param == std::string("yolov5n_coco80.pt") ? "Coco80"
                                                                                               : "Stripped");
                         });

TEST(PtCheckpoint, ATrainingCheckpointHasModelAndEma) {
  const yolo::PtCheckpoint c = yolo::parse_pt_checkpoint(read_all("tests/data/tiny_train.pt"), "tiny_train.pt");
  ASSERT_NE(c.ema, nullptr);
  EXPECT_NE(c.model, c.ema);
  const yolo::PtCheckpoint s = yolo::parse_pt_checkpoint(read_all("tests/data/yolov5n_synthetic.pt"), "s.pt");
  EXPECT_EQ(s.ema, nullptr);  // strip_optimizer sets it to None
}

// A .pt whose data.pkl calls `global` with one string argument, as a malicious checkpoint would.
std::string hostile_pt(const std::string& module, const std::string& name) {
  const std::string pickle = "\x80\x02}X\x05\x00\x00\x00modelc"s + module + "\n" + name +
                             "\nX\x02\x00\x00\x00id\x85Rs.";
  return kestrel::testing::make_zip({{"evil/data.pkl", pickle}, {"evil/version", "3\n"}});
}

TEST(PtCheckpoint, RefusesCheckpointsNamingAnyOtherGlobal) {
  for (const auto& global : std::vector<std::pair<std::string, std::string>>{
           {"os", "system"}, {"posix", "system"}, {"builtins", "eval"}, {"__builtin__", "eval"},
           {"builtins", "exec"}, {"subprocess", "check_output"}, {"torch", "load"},
           {"models.yolo", "Unknown"}, {"numpy", "load"}}) {
    const std::string& module = global.first;  // named, not bound: clang 14's lambdas cannot capture bindings
    const std::string& name = global.second;
    const std::string e = error_of([&] { yolo::parse_weights_file(hostile_pt(module, name), "evil.pt"); });
    EXPECT_NE(e.find("evil.pt"), std::string::npos) << e;
    EXPECT_NE(e.find("names the global '" + module + "." + name + "'"), std::string::npos) << e;
  }
  EXPECT_TRUE(yolo::is_yolov5_global("torch.nn.modules.conv.Conv2d"));
  EXPECT_TRUE(yolo::is_yolov5_global("models.common.C3"));
  EXPECT_FALSE(yolo::is_yolov5_global("models.common.DetectMultiBackend"));
}

TEST(PtCheckpoint, RefusesAPickleThatIsNoYolov5Checkpoint) {
  const std::string list = kestrel::testing::make_zip({{"a/data.pkl", "\x80\x02]."s}});
  EXPECT_NE(error_of([&] { yolo::parse_weights_file(list, "a.pt"); }).find("the checkpoint is a list"),
            std::string::npos);
  const std::string no_model = kestrel::testing::make_zip({{"a/data.pkl", "\x80\x02}."s}});
  EXPECT_NE(error_of([&] { yolo::parse_weights_file(no_model, "a.pt"); }).find("its 'model' entry is missing"),
            std::string::npos);
}

TEST(PtCheckpoint, PlainValuesBecomeJson) {
  const std::string body = "\x80\x02}(X\x01\x00\x00\x00" "aK\x01X\x01\x00\x00\x00" "b]N\x88\x87X\x01\x00\x00\x00" "aK\x02u."s;
  const auto doc = kestrel::pickle::parse(body, [](const std::string&) { return false; }, "t");
  EXPECT_EQ(json::dump(yolo::to_json(doc, doc.root(), "t")), R"({"a":2,"b":[[],null,true]})");
}

}  // namespace

namespace {

// Protocol 2 pieces: a BINUNICODE string, LONG_BINPUT / LONG_BINGET of memo slot i.
std::string text(const std::string& s) {
  std::string n(4, '\0');
  const uint32_t size = static_cast<uint32_t>(s.size());
  std::memcpy(n.data(), &size, 4);
  return "X" + n + s;
}
std::string memo(char op, uint32_t i) {
  std::string n(4, '\0');
  std::memcpy(n.data(), &i, 4);
  return op + n;
}

// A module record of class `cls` whose _modules are `children` (name, memo slot), put in memo slot
// `slot` and popped.
std::string module_record(const std::string& cls, const std::vector<std::pair<std::string, uint32_t>>& children,
                          uint32_t slot) {
  std::string out = "c" + cls + "\n)R}(" + text("_parameters") + "}" + text("_buffers") + "}" + text("_modules") + "}";
  if (!children.empty()) {
    out += "(";
    for (const auto& [name, child] : children) out += text(name) + memo('j', child);
    out += "u";
  }
  return out + "ub" + memo('r', slot) + "0";
}

}  // namespace

// A module tree whose every module holds the same child twice, 29 levels deep (8 KB more than a
// checkpoint): walked as a tree it is 2^29 visits, which ran for seconds per level added (issue
// 42). The walk is held to a budget per object the file holds, and refused in milliseconds.
TEST(PtCheckpoint, SharedChildrenNestedDeepAreRefusedNotWalked) {
  constexpr uint32_t kLevels = 29;
  std::string pkl = "\x80\x02" + module_record("torch.nn.modules.container\nSequential", {}, 0);
  for (uint32_t i = 1; i < kLevels; ++i)
    pkl += module_record("torch.nn.modules.container\nSequential", {{"a", i - 1}, {"b", i - 1}}, i);
  pkl += module_record("models.yolo\nDetectionModel", {{"a", kLevels - 1}, {"b", kLevels - 1}}, kLevels);
  pkl += "}(" + text("model") + memo('j', kLevels) + "u.";
  const std::string zip = kestrel::testing::make_zip({{"shared/data.pkl", pkl}});
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { yolo::pt_weights(yolo::parse_pt_checkpoint(zip, "shared.pt")); });
  EXPECT_NE(e.find("shared.pt: the model's module tree expands past"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// 40 levels of L = [L, L] in a value read as JSON (a checkpoint's yaml): 2^40 copies, 5 GB in 20 s
// before std::bad_alloc (issue 42). Refused by the same budget, naming what was read.
TEST(PtCheckpoint, SharedListsNestedDeepAreRefusedNotCopied) {
  std::string pkl = "\x80\x02]" + memo('r', 0) + "0";
  for (uint32_t i = 1; i <= 40; ++i) pkl += "](" + memo('j', i - 1) + memo('j', i - 1) + "e" + memo('r', i) + "0";
  pkl += memo('j', 40) + ".";
  const kestrel::pickle::Document doc = kestrel::pickle::parse(pkl, [](const std::string&) { return true; }, "lists.pkl");
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { yolo::to_json(doc, doc.root(), "lists.pt: the model's yaml"); });
  EXPECT_NE(e.find("lists.pt: the model's yaml expands past"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // A list shared a few times, as the memo legitimately does, still converts.
  const std::string small = "\x80\x02](" + text("x") + "e" + memo('r', 0) + "0](" + memo('j', 0) + memo('j', 0) + "e.";
  const kestrel::pickle::Document two = kestrel::pickle::parse(small, [](const std::string&) { return true; }, "two.pkl");
  EXPECT_EQ(json::dump(yolo::to_json(two, two.root(), "two")), R"([["x"],["x"]])");
}
