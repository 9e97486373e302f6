// --weights' one door: a reference .pt and the safetensors Kestrel saves from it read alike; every
// other kind of file is named, with what to give instead.
#include "yolo/model/weights_file.h"

#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"
#include "tests/support/zip_writer.h"
#include "yolo/model/model.h"
#include "yolo/model/model_config.h"
#include "yolo/model/weights.h"

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
    EXPECT_TRUE(kestrel::testing::all_close(safetensors_tensor(g, name), safetensors_tensor(f, "model." + name), 0, 0)) << name;
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
  EXPECT_NE(yaml.find("'w.bin' is a model yaml: give it with --cfg"), std::string::npos) << yaml;
  const std::string data = error_for("path: ../datasets/coco128\ntrain: images/train2017\nnames:\n  0: person\n");
  EXPECT_NE(data.find("is a dataset yaml: give it with --data"), std::string::npos) << data;
  const std::string text = error_for("just some notes\n");
  EXPECT_NE(text.find("is a text file (a model yaml goes to --cfg"), std::string::npos) << text;
  const std::string other = error_for("\x01\x02\x03\x04\xff\xff\xff\xff\xff\xff\xff\xff"s);
  EXPECT_NE(other.find("header length field"), std::string::npos) << other;
  EXPECT_NE(other.find("--weights takes Kestrel's .safetensors, an ultralytics YOLOv5 v7.0 .pt"), std::string::npos)
      << other;
}

// The other runtimes' exports that the reference's export.py writes: each named, with the way back
// to something Kestrel runs.
TEST(WeightsFile, NamesOtherRuntimesExports) {
  const std::string torchscript = error_for(kestrel::testing::make_zip(
      {{"yolov5s/data.pkl", "\x80\x02}q\x00."}, {"yolov5s/constants.pkl", "\x80\x02)."}, {"yolov5s/code/__torch__/models/yolo.py", "def forward"}}));
  EXPECT_NE(torchscript.find("'w.bin' is a TorchScript export (the reference's export.py --include torchscript); pass "
                             "the .pt it was exported from"), std::string::npos) << torchscript;
  // torch.jit.save's archives hold compressed entries the strict reader refuses: still named.
  kestrel::testing::ZipInput code{"yolov5s/code/__torch__/models/yolo.py", std::string(2000, 'x')};
  code.deflate = true;
  const std::string compressed_ts = error_for(kestrel::testing::make_zip({{"yolov5s/data.pkl", "\x80\x02}q\x00."}, code}));
  EXPECT_NE(compressed_ts.find("is a TorchScript export"), std::string::npos) << compressed_ts;
  // A .pt re-zipped with compression, or encrypted, says so, not "cut short ... download it again".
  kestrel::testing::ZipInput deflated{"m/data.pkl", std::string("\x80\x02}q\x00.") + std::string(500, ' ')};
  deflated.deflate = true;
  const std::string rezipped = error_for(kestrel::testing::make_zip({deflated}));
  EXPECT_NE(rezipped.find("that is not as torch.save writes it: "), std::string::npos) << rezipped;
  EXPECT_NE(rezipped.find("is compressed"), std::string::npos) << rezipped;
  EXPECT_EQ(rezipped.find("cut short"), std::string::npos) << rezipped;
  kestrel::testing::ZipInput locked{"m/data.pkl", "\x80\x02}q\x00."};
  locked.flags = 1;
  const std::string encrypted = error_for(kestrel::testing::make_zip({locked}));
  EXPECT_NE(encrypted.find("is encrypted"), std::string::npos) << encrypted;
  EXPECT_EQ(encrypted.find("cut short"), std::string::npos) << encrypted;
  const std::string tflite = error_for("\x1c\x00\x00\x00TFL3\x00\x00\x00\x00\x00\x00"s);
  EXPECT_NE(tflite.find("is a TensorFlow Lite model"), std::string::npos) << tflite;
  EXPECT_NE(tflite.find("pass the .pt it was exported from, or an ONNX export of it"), std::string::npos) << tflite;
  const std::string engine = error_for("\x2a\x00\x00\x00{\"stride\": 32, \"names\": {\"0\": \"person\"}}ftrt0000"s);
  EXPECT_NE(engine.find("is a TensorRT engine"), std::string::npos) << engine;
  const std::string openvino = error_for("<?xml version=\"1.0\"?>\n<net name=\"torch_jit\" version=\"11\">\n");
  EXPECT_NE(openvino.find("is an OpenVINO model"), std::string::npos) << openvino;
  const std::string pb = kestrel::testing::error_of([] { yolo::parse_weights_file("\x0a\x0c\x0a\x05images"s, "yolov5s.pb"); });
  EXPECT_NE(pb.find("'yolov5s.pb' is a TensorFlow GraphDef"), std::string::npos) << pb;
  const std::string onnx = error_for("\x08\x07\x12\x07pytorch\x1a\x03onnx0000"s);
  EXPECT_NE(onnx.find("`kestrel val` and `kestrel detect` run it"), std::string::npos) << onnx;

  const fs::path dir = fs::temp_directory_path() / "kestrel_weights_file_kinds";
  fs::remove_all(dir);
  fs::create_directories(dir / "yolov5s_saved_model");
  std::ofstream(dir / "yolov5s_saved_model" / "saved_model.pb") << "x";
  const std::string saved = error_of([&] { yolo::read_weights_file((dir / "yolov5s_saved_model").string()); });
  EXPECT_NE(saved.find("is a TensorFlow SavedModel folder"), std::string::npos) << saved;
  fs::create_directories(dir / "yolov5s_openvino_model");
  std::ofstream(dir / "yolov5s_openvino_model" / "yolov5s.xml") << "<?xml";
  const std::string ov = error_of([&] { yolo::weights_format((dir / "yolov5s_openvino_model").string()); });
  EXPECT_NE(ov.find("is an OpenVINO model folder"), std::string::npos) << ov;
  const std::string folder = error_of([&] { yolo::read_weights_file(dir.string()); });
  EXPECT_NE(folder.find("is a folder, not a weights file; give a file in it"), std::string::npos) << folder;
  fs::remove_all(dir);
}

TEST(WeightsFile, NamesEmptyAndCutShortFiles) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_weights_file_short";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "empty.pt").close();
  const std::string empty = error_of([&] { yolo::read_weights_file((dir / "empty.pt").string()); });
  EXPECT_NE(empty.find("is empty (0 bytes): a download or copy that did not finish"), std::string::npos) << empty;
  EXPECT_NE(error_of([&] { yolo::weights_format((dir / "empty.pt").string()); }).find("is empty (0 bytes)"),
            std::string::npos);

  // The first half of a real .pt, and of a safetensors file whose header is cut.
  const std::string pt = yolo::read_file_bytes("tests/data/yolov5n_synthetic.pt");
  const std::string half_pt = error_for(pt.substr(0, pt.size() / 2));
  EXPECT_NE(half_pt.find("is a zip archive (as .pt files are) that cannot be read, most likely cut short"),
            std::string::npos) << half_pt;
  const std::string st = yolo::read_file_bytes("tests/data/yolov5n_coco128_320.safetensors");
  const std::string cut = error_for(st.substr(0, 100));
  EXPECT_NE(cut.find("is a safetensors file cut short: its header alone needs"), std::string::npos) << cut;
  EXPECT_NE(cut.find("the file has 100"), std::string::npos) << cut;
  fs::remove_all(dir);
}

TEST(WeightsFile, TellsTheFormatsApart) {
  EXPECT_EQ(yolo::weights_format("tests/data/yolov5n_synthetic.pt"), yolo::WeightsFormat::kPt);
  EXPECT_EQ(yolo::weights_format("tests/data/yolov5n_coco128_320.safetensors"), yolo::WeightsFormat::kSafetensors);
  EXPECT_TRUE(yolo::looks_like_onnx("\x08\x07\x12\x07pytorch"s));
  EXPECT_TRUE(yolo::looks_like_onnx("\x08\x08\x3a\x90\x01"s));  // ir_version 8, then the graph
  EXPECT_FALSE(yolo::looks_like_onnx("\x08\x07\x07\x07pytorch"s));
  EXPECT_FALSE(yolo::looks_like_onnx("{\"a\": 1}"));
}

TEST(WeightsFile, NamesAMissingFile) {
  const std::string e = error_of([] { yolo::read_weights_file("no/such/weights.pt"); });
  EXPECT_NE(e.find("weights 'no/such/weights.pt': cannot open it"), std::string::npos) << e;
}

}  // namespace
