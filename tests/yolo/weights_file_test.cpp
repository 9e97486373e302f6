// --weights' one door: a reference .pt and the safetensors Kestrel saves from it read alike; every
// other kind of file is named, with what to give instead.
#include "yolo/weights_file.h"

#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"
#include "yolo/model.h"
#include "yolo/model_config.h"
#include "yolo/weights.h"

namespace fs = std::filesystem;

namespace {

using namespace std::string_literals;
using kestrel::testing::error_of;
namespace yolo = kestrel::yolo;

std::string error_for(const std::string& bytes) {
  return error_of([&] { yolo::parse_weights_file(bytes, "w.bin"); });
}

TEST(WeightsFile, APtAndItsSafetensorsReadAlike) {
  const std::string pt = "tests/data/yolov5n_synthetic.pt";
  const kestrel::SafetensorsFile f = yolo::read_weights_file(pt);
  yolo::DetectionModel model(yolo::parse_model_config(f.metadata().at("model_yaml"), pt), 4, 0);
  yolo::load_inference_weights(model, pt);
  const fs::path st = fs::temp_directory_path() / "kestrel_weights_file_test.safetensors";
  yolo::save_weights(model, st.string(), kestrel::DType::F16);
  const kestrel::SafetensorsFile g = yolo::read_weights_file(st.string());
  ASSERT_EQ(g.names().size(), f.names().size());
  for (const std::string& name : g.names())
    EXPECT_TRUE(kestrel::testing::all_close(g.get(name), f.get("model." + name), 0, 0)) << name;
  EXPECT_TRUE(yolo::is_pt_weights(f));
  EXPECT_FALSE(yolo::is_pt_weights(g));
  fs::remove(st);
}

TEST(WeightsFile, NamesOtherKindsOfFiles) {
  const std::string legacy = error_for("\x80\x02\x8a\x0a" "0123456789."s);
  EXPECT_NE(legacy.find("'w.bin' is a PyTorch file in the legacy (pre-1.6) torch.save format"), std::string::npos) << legacy;
  EXPECT_NE(error_for("\x89PNG\r\n\x1a\n0000000000000000"s).find("is an image"), std::string::npos);
  EXPECT_NE(error_for("\x08\x07\x12\x07pytorch\x1a\x03onnx0000"s).find("is an ONNX model"), std::string::npos);
  const std::string yaml = error_for("nc: 80\ndepth_multiple: 0.33\nwidth_multiple: 0.25\n");
  EXPECT_NE(yaml.find("is a text file (a model yaml goes to --cfg"), std::string::npos) << yaml;
  const std::string other = error_for("\x01\x02\x03\x04\xff\xff\xff\xff\xff\xff\xff\xff"s);
  EXPECT_NE(other.find("header length field"), std::string::npos) << other;
  EXPECT_NE(other.find("--weights takes Kestrel's .safetensors or an ultralytics YOLOv5 v7.0 .pt"), std::string::npos);
}

TEST(WeightsFile, NamesAMissingFile) {
  const std::string e = error_of([] { yolo::read_weights_file("no/such/weights.pt"); });
  EXPECT_NE(e.find("weights 'no/such/weights.pt': cannot open it"), std::string::npos) << e;
}

}  // namespace
