// `kestrel export` end to end: writes W.onnx next to the weights, rounds the image size up to a
// stride multiple as the reference, and refuses bad input with the documented exit codes
// (--half on the CPU as the reference does).
#include <unistd.h>

#include <filesystem>

#include "tests/support/cli.h"
#include "tests/support/testing.h"

namespace fs = std::filesystem;

namespace {

using Result = kestrel::testing::CliResult;
Result run(const std::string& args) { return kestrel::testing::run_kestrel(args); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(ExportCommand, WritesTheOnnxFileNextToTheWeights) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_cli_test_export";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string weights = (dir / "best.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --save " + weights).code, 0);

  const std::string base = "export --weights " + weights + " --cfg models/yolov5n.yaml";
  Result fixed = run(base + " --include onnx --img-size 150");
  ASSERT_EQ(fixed.code, 0) << fixed.out;
  EXPECT_TRUE(contains(fixed.out, "--img-size 150 is not a multiple of the largest stride 32, using 160")) << fixed.out;
  EXPECT_TRUE(contains(fixed.out, "output shape (1, 1575, 85)")) << fixed.out;  // 3 x (20² + 10² + 5²)
  EXPECT_TRUE(contains(fixed.out, "saved as " + (dir / "best.onnx").string())) << fixed.out;
  ASSERT_TRUE(fs::exists(dir / "best.onnx"));
  const auto fixed_size = fs::file_size(dir / "best.onnx");
  EXPECT_GT(fixed_size, 7'000'000u);  // yolov5n's 1.9M float32 parameters

  Result dynamic = run(base + " --dynamic --batch-size 2 --img-size 128 --opset 13");
  ASSERT_EQ(dynamic.code, 0) << dynamic.out;
  EXPECT_TRUE(contains(dynamic.out, "opset 13, dynamic axes")) << dynamic.out;
}

// The reference's flags for other formats (TensorFlow, TF.js, TensorRT, CoreML, TorchScript) and
// ONNX's simplifier are accepted, each with a note, and the ONNX is written as without them.
TEST(ExportCommand, OtherFormatsFlagsAreNotedAndTheOnnxIsWritten) {
  const fs::path dir = fs::temp_directory_path() / ("kestrel_cli_test_export_notes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --save " + weights).code, 0);
  Result r = run("export --weights " + weights + " --cfg models/yolov5n.yaml --img 64 --data coco128.yaml "
                 "--inplace --keras --optimize --int8 --simplify --verbose --workspace 8 --nms --agnostic-nms "
                 "--topk-per-class 50 --topk-all 50 --iou-thres 0.5 --conf-thres 0.3");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* flag : {"data", "inplace", "keras", "optimize", "int8", "simplify", "verbose", "workspace", "nms",
                           "agnostic-nms", "topk-per-class", "topk-all", "iou-thres", "conf-thres"})
    EXPECT_TRUE(contains(r.out, std::string("--") + flag + ": ")) << flag << "\n" << r.out;
  EXPECT_TRUE(contains(r.out, "--keras: TensorFlow: use Keras; noted and ignored: Kestrel writes ONNX")) << r.out;
  EXPECT_TRUE(fs::exists(dir / "w.onnx"));
  fs::remove_all(dir);
}

TEST(ExportCommand, BadInputIsRefused) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_cli_test_export_bad";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --save " + weights).code, 0);

  EXPECT_EQ(run("export").code, 2);  // --weights missing
  Result format = run("export --weights " + weights + " --include tflite");
  EXPECT_EQ(format.code, 2);
  EXPECT_TRUE(contains(format.out, "Kestrel exports onnx only")) << format.out;
  Result half = run("export --weights " + weights + " --cfg models/yolov5n.yaml --half");
  EXPECT_EQ(half.code, 2);
  EXPECT_TRUE(contains(half.out, "needs a GPU: add --device 0")) << half.out;
  Result no_cfg = run("export --weights " + weights);
  EXPECT_EQ(no_cfg.code, 1);
  EXPECT_TRUE(contains(no_cfg.out, "give its model with --cfg")) << no_cfg.out;
  Result missing = run("export --weights " + (dir / "nope.safetensors").string() + " --cfg models/yolov5n.yaml");
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(contains(missing.out, "nope.safetensors")) << missing.out;
  Result opset = run("export --weights " + weights + " --cfg models/yolov5n.yaml --opset 99");
  EXPECT_EQ(opset.code, 1);
  EXPECT_TRUE(contains(opset.out, "opset 99 is not available")) << opset.out;
  EXPECT_FALSE(fs::exists(dir / "w.onnx"));
}

// A reference .pt exports with no --cfg: its model yaml and 4 class names come from the file.
TEST(ExportCommand, ExportsAReferencePt) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_cli_test_export_pt";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file("tests/data/yolov5n_synthetic.pt", dir / "best.pt");
  Result r = run("export --weights " + (dir / "best.pt").string() + " --img-size 64");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "output shape (1, 252, 9)")) << r.out;  // 3 x (8² + 4² + 2²), 4 classes + 5
  EXPECT_TRUE(fs::exists(dir / "best.onnx"));
  fs::remove_all(dir);
}

// A reference -seg .pt exports as the reference's: output0 (boxes, classes and 32 mask
// coefficients; 80 classes + 5 + 32) is the shape printed; output1 holds the prototypes.
TEST(ExportCommand, ExportsAReferenceSegmentationPt) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_cli_test_export_seg_pt";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file("tests/data/yolov5n_seg_seeded.pt", dir / "best.pt");
  Result r = run("export --weights " + (dir / "best.pt").string() + " --img-size 64");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "output shape (1, 252, 117)")) << r.out;
  EXPECT_TRUE(fs::exists(dir / "best.onnx"));
  fs::remove_all(dir);
}
