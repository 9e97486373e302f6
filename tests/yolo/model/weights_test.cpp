// Model weights in safetensors: reference names and layouts, fp32/fp16 round trips, strict-load
// mismatch reports, and transfer between models of different class counts.
#include "yolo/model/weights.h"

#include <cmath>
#include <filesystem>

#include "engine/autograd.h"
#include "engine/safetensors_tensors.h"
#include "tests/support/testing.h"
#include "yolo/model/model.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kestrel_weights_" + name)).string();
}

DetectionModel nano(std::optional<int> nc = std::nullopt, uint64_t seed = 0) {
  return DetectionModel(load_model_config("models/yolov5n.yaml"), nc, seed);
}

}  // namespace

TEST(Weights, FileUsesTheReferenceNamesAndLayouts) {
  DetectionModel m = nano();
  const std::string path = temp_path("names.safetensors");
  save_weights(m, path);
  SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.entry("model.0.conv.weight").shape, (Shape{16, 3, 6, 6}));  // OIHW
  EXPECT_EQ(f.entry("model.0.conv.weight").dtype, "F32");
  EXPECT_EQ(f.entry("model.0.bn.num_batches_tracked").dtype, "I64");
  EXPECT_EQ(f.entry("model.2.m.0.cv1.conv.weight").shape, (Shape{16, 16, 1, 1}));
  EXPECT_EQ(f.entry("model.24.m.0.bias").shape, (Shape{255}));
  EXPECT_EQ(f.entry("model.24.anchors").shape, (Shape{3, 3, 2}));
  EXPECT_TRUE(f.contains("model.9.cv2.bn.running_var"));
  // One entry per parameter and buffer of the reference's state_dict.
  EXPECT_EQ(f.names().size(), m.state_entries().size());
  // OIHW element (o=1, i=2, h=3, w=4) is OHWI element (1, 3, 4, 2) in memory.
  std::vector<double> file = safetensors_tensor(f, "model.0.conv.weight").to_double_vector();
  std::vector<double> mem = m.state_entries()[0].slot->to_double_vector();
  EXPECT_EQ(file[((1 * 3 + 2) * 6 + 3) * 6 + 4], mem[((1 * 6 + 3) * 6 + 4) * 3 + 2]);
  std::filesystem::remove(path);
}

TEST(Weights, RoundTripRestoresEveryTensor) {
  DetectionModel a = nano(std::nullopt, 1), b = nano(std::nullopt, 2);
  const std::string path = temp_path("roundtrip.safetensors");
  save_weights(a, path);
  load_weights(b, path);
  auto ea = a.state_entries(), eb = b.state_entries();
  for (size_t i = 0; i < ea.size(); ++i)
    EXPECT_EQ(ea[i].slot->to_double_vector(), eb[i].slot->to_double_vector()) << ea[i].name;
  std::filesystem::remove(path);
}

TEST(Weights, HalfPrecisionFileLoadsWithinRounding) {
  DetectionModel a = nano(std::nullopt, 1), b = nano(std::nullopt, 2);
  const std::string path = temp_path("half.safetensors");
  save_weights(a, path, DType::F16);
  EXPECT_EQ(load_safetensors(path).entry("model.0.conv.weight").dtype, "F16");
  load_weights(b, path);
  Tensor wa = a.state_entries()[0].slot->detach(), wb = b.state_entries()[0].slot->detach();
  EXPECT_TRUE(kestrel::testing::all_close(wb, wa, 1e-4, 1.0 / 1024));  // fp16: 11-bit mantissa
  std::filesystem::remove(path);
}

TEST(Weights, StrictLoadListsEveryMismatch) {
  DetectionModel a = nano(3), b = nano();
  const std::string path = temp_path("mismatch.safetensors");
  save_weights(a, path);
  try {
    load_weights(b, path);
    FAIL() << "weights of a 3-class model loaded into an 80-class one";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("6 mismatches"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.24.m.0.weight: shape [24, 64, 1, 1] in the file, [255, 64, 1, 1]"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(path), std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST(Weights, MissingAndUnexpectedNamesAreReported) {
  DetectionModel m = nano();
  const std::string path = temp_path("names_bad.safetensors");
  save_weights(m, path);
  SafetensorsFile good = load_safetensors(path);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : good.names())
    if (name != "model.0.bn.running_mean") tensors.emplace_back(name, safetensors_tensor(good, name));
  tensors.emplace_back("model.99.extra", Tensor::zeros({2}));
  save_safetensors(path, tensors);
  try {
    load_weights(m, path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(2 mismatches)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing model.0.bn.running_mean"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("unexpected model.99.extra"), std::string::npos);
  }
  std::filesystem::remove(path);
}

// A checkpoint's EMA without its first tensor: the one missing name is reported (it was read under
// another prefix, and all 349 names were "mismatches", issue 42).
TEST(Weights, OneMissingTensorOfACheckpointIsNamed) {
  DetectionModel m = nano();
  const std::string path = temp_path("ema_missing.safetensors");
  save_weights(m, path);
  const SafetensorsFile plain = load_safetensors(path);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : plain.names())
    if (name != "model.0.conv.weight") tensors.emplace_back("ema." + name, safetensors_tensor(plain, name));
  save_safetensors(path, tensors);
  const std::string e = kestrel::testing::error_of([&] { load_inference_weights(m, path); });
  EXPECT_NE(e.find("(1 mismatches)"), std::string::npos) << e;
  EXPECT_NE(e.find("missing ema.model.0.conv.weight"), std::string::npos) << e;
  std::filesystem::remove(path);
}

TEST(Weights, TransferToAnotherClassCountSkipsTheHead) {
  DetectionModel source = nano(std::nullopt, 1), target = nano(3, 2);
  const std::string path = temp_path("transfer.safetensors");
  save_weights(source, path);
  TransferResult r = transfer_weights(target, path, {"anchor"});
  const int total = static_cast<int>(target.state_entries().size());
  EXPECT_EQ(r.total, total);
  EXPECT_EQ(r.transferred, total - 6 - 1);  // 3 head weights and 3 biases differ; anchors excluded
  EXPECT_EQ(source.state_entries()[0].slot->to_double_vector(),
            target.state_entries()[0].slot->to_double_vector());
  std::filesystem::remove(path);
}

// A diverged run's NaN/Inf is caught when the weights are loaded, naming the file and the tensor,
// by every loader, before the model is touched.
TEST(Weights, NonFiniteValuesAreRefusedNamingFileAndTensor) {
  DetectionModel m = nano(std::nullopt, 1);
  const std::string path = temp_path("nonfinite.safetensors");
  // The model's tensors as a file would hold them (dtype, names under prefix), one value replaced.
  auto write_damaged = [&](DType dtype, const std::string& prefix, const std::string& bad, double value) {
    save_weights(m, path, dtype);
    const SafetensorsFile file = load_safetensors(path);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : file.names()) {
      Tensor t = safetensors_tensor(file, name);
      if (name == bad) store_from_double(t.data_ptr(), t.dtype(), 7, value);
      tensors.emplace_back(prefix + name, t);
    }
    save_safetensors(path, tensors);
  };
  auto error_of = [](auto&& load) -> std::string {
    try {
      load();
    } catch (const Error& e) {
      return e.what();
    }
    return "loaded";
  };

  write_damaged(DType::F32, "", "model.3.conv.weight", std::nan(""));
  const std::string plain = error_of([&] { load_weights(m, path); });
  EXPECT_EQ(plain.rfind(path + ": tensor 'model.3.conv.weight' holds NaN/Inf values; the checkpoint is damaged", 0), 0u)
      << plain;
  EXPECT_NE(error_of([&] { transfer_weights(m, path); }).find("'model.3.conv.weight' holds NaN/Inf"), std::string::npos);
  for (const layers::StateEntry& e : m.state_entries()) {  // nothing was copied into the model
    if (e.name != "model.3.conv.weight") continue;
    for (double v : e.slot->to_double_vector()) ASSERT_TRUE(std::isfinite(v));
  }

  write_damaged(DType::F16, "", "model.24.m.0.bias", INFINITY);
  EXPECT_NE(error_of([&] { load_weights(m, path); }).find("'model.24.m.0.bias' holds NaN/Inf"), std::string::npos);

  // A checkpoint's EMA: inference loading names the tensor as the file does; check_finite looks
  // only under the prefix it is given.
  write_damaged(DType::F32, "ema.", "model.9.cv2.conv.weight", -INFINITY);
  EXPECT_NE(error_of([&] { load_inference_weights(m, path); }).find("'ema.model.9.cv2.conv.weight'"), std::string::npos);
  const SafetensorsFile ckpt = load_safetensors(path);
  EXPECT_THROW(check_finite(ckpt, path), Error);
  EXPECT_THROW(check_finite(ckpt, path, "ema."), Error);
  EXPECT_NO_THROW(check_finite(ckpt, path, "model."));
  std::filesystem::remove(path);
}
