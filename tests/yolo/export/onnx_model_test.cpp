// .onnx weights in OpenCV DNN (val and detect's ONNX path): the metadata a reference or Kestrel
// export carries (stride, Python's text of the class names), the input's fixed and dynamic axes,
// predictions against Kestrel's own model on the same images (1e-3 absolute, as the export's own
// test: float32 pixels up to ~1e3 summed in another order), and a whole validation run through
// each, square batches of one as the reference validates non-PyTorch weights.
#include "yolo/export/onnx_model.h"

#include <filesystem>
#include <fstream>

#include "engine/autograd.h"
#include "tests/support/testing.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/synthetic.h"
#include "yolo/eval/validator.h"
#include "yolo/export/onnx_export.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

const char* kWeights = "tests/data/yolov5n_coco128_320.safetensors";

std::shared_ptr<DetectionModel> trained_model() {
  auto m = std::make_shared<DetectionModel>(load_model_config("models/yolov5n.yaml"), 80, 0);
  load_inference_weights(*m, kWeights);
  m->train(false);
  return m;
}

std::string export_to(const DetectionModel& m, const OnnxExportOptions& o, const std::string& file) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_onnx_model_test";
  fs::create_directories(dir);
  const std::string path = (dir / file).string();
  save_onnx_model(build_onnx_model(m, o), path);
  return path;
}

double max_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  const std::vector<float> x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]));
  return worst;
}

}  // namespace

TEST(OnnxModel, ReadsPythonNames) {
  EXPECT_EQ(parse_python_names("{0: 'person', 1: 'traffic light'}"), (std::vector<std::string>{"person", "traffic light"}));
  EXPECT_EQ(parse_python_names("['a', \"b's\", 'c\\\\d', 'e\\'f']"), (std::vector<std::string>{"a", "b's", "c\\d", "e'f"}));
  EXPECT_EQ(parse_python_names(python_names_dict({"x'y", "tab\there", "\"q\""})),
            (std::vector<std::string>{"x'y", "tab\there", "\"q\""}));
  EXPECT_TRUE(parse_python_names("{}").empty());
  for (const char* bad : {"{1: 'a'}", "{0: a}", "person", "{0: 'a'", "['a'"})
    EXPECT_NE(kestrel::testing::error_of([&] { parse_python_names(bad); }).find("are not Python's text"), std::string::npos)
        << bad;
}

TEST(OnnxModel, FixedExportPredictsAsTheModel) {
  auto m = trained_model();
  OnnxExportOptions o;
  o.height = 160;
  o.width = 224;
  o.names = std::vector<std::string>(80, "thing");
  o.names[0] = "person";
  const std::string path = export_to(*m, o, "fixed.onnx");
  EXPECT_EQ(weights_format(path), WeightsFormat::kOnnx);
  OnnxModel onnx(path);
  EXPECT_EQ(onnx.stride(), 32);
  ASSERT_EQ(onnx.names().size(), 80u);
  EXPECT_EQ(onnx.names()[0], "person");
  EXPECT_EQ(onnx.nc(), 80);
  EXPECT_EQ(onnx.batch(), 1);
  EXPECT_EQ(onnx.height(), 160);
  EXPECT_EQ(onnx.width(), 224);
  EXPECT_FALSE(onnx.float16_input());
  autograd::NoGradGuard no_grad;
  const Tensor x = kestrel::testing::random_tensor({1, 160, 224, 3}, 5, DType::F32, 0.0, 1.0);
  EXPECT_LT(max_difference(onnx.predict(x), m->predict(x).boxes), 1e-3);
  EXPECT_NE(kestrel::testing::error_of([&] { onnx.predict(kestrel::testing::random_tensor({2, 160, 224, 3}, 6, DType::F32)); })
                .find("takes batches of 1 images, not 2"),
            std::string::npos);
}

TEST(OnnxModel, FixedBatchRunsSmallerBatchesPadded) {
  auto m = trained_model();
  OnnxExportOptions o;
  o.batch = 3;
  o.height = o.width = 96;
  OnnxModel onnx(export_to(*m, o, "batch3.onnx"));
  autograd::NoGradGuard no_grad;
  const Tensor x = kestrel::testing::random_tensor({2, 96, 96, 3}, 7, DType::F32, 0.0, 1.0);
  EXPECT_LT(max_difference(onnx.predict(x), m->predict(x).boxes), 1e-3);
}

TEST(OnnxModel, DynamicExportTakesAnySize) {
  auto m = trained_model();
  OnnxExportOptions o;
  o.dynamic = true;
  o.height = o.width = 128;
  OnnxModel onnx(export_to(*m, o, "dynamic.onnx"));
  EXPECT_FALSE(onnx.batch() || onnx.height() || onnx.width());
  autograd::NoGradGuard no_grad;
  const Tensor x = kestrel::testing::random_tensor({2, 96, 160, 3}, 8, DType::F32, 0.0, 1.0);
  EXPECT_LT(max_difference(onnx.predict(x), m->predict(x).boxes), 1e-3);
}

TEST(OnnxModel, RefusesWhatIsNoDetector) {
  const fs::path dir = fs::temp_directory_path() / "kestrel_onnx_model_test";
  fs::create_directories(dir);
  const std::string cut = (dir / "cut.onnx").string();
  {
    auto m = trained_model();
    OnnxExportOptions o;
    o.height = o.width = 64;
    const std::string whole = export_to(*m, o, "whole.onnx");
    const std::string bytes = read_file_bytes(whole);
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  }
  const std::string e = kestrel::testing::error_of([&] { OnnxModel{cut}; });
  EXPECT_NE(e.find("is not a readable ONNX model (cut short or damaged?)"), std::string::npos) << e;
}

// A validation through the ONNX graph equals one through the model it was exported from: the
// same square letterboxed batches of one, the same predictions to ~1e-4 pixels.
TEST(OnnxModel, ValidatesAsTheModel) {
  auto m = trained_model();
  OnnxExportOptions o;
  o.height = o.width = 128;
  OnnxModel onnx(export_to(*m, o, "val.onnx"));
  const data::DatasetConfig dcfg = data::load_dataset_config(data::ensure_synthetic_dataset(data::default_synthetic_dir()));
  data::DatasetSplit split = data::load_split(dcfg, "val", dcfg.nc, /*single_cls=*/true, true, 0, true);
  split.records.resize(24);
  ValOptions vo;
  vo.img_size = 128;
  vo.batch_size = 1;
  vo.rect = false;
  vo.single_cls = true;
  vo.workers = 1;
  Validator from_model(split.records, {"object"}, 80, vo, Device::cpu(), 32);
  Validator from_onnx(split.records, {"object"}, 80, vo, Device::cpu(), 32);
  const ValResult a = from_model.run(*m);
  const ValResult b = from_onnx.run([&](const Tensor& x) { return onnx.predict(x); });
  std::printf("model: %s\nonnx:  %s\n", a.table.c_str(), b.table.c_str());
  EXPECT_EQ(a.images, 24);
  EXPECT_EQ(a.instances, b.instances);
  EXPECT_GT(a.metrics.mr, 0.0);  // something is found, so the comparison means something
  EXPECT_NEAR(a.metrics.mp, b.metrics.mp, 1e-4);
  EXPECT_NEAR(a.metrics.mr, b.metrics.mr, 1e-4);
  EXPECT_NEAR(a.metrics.map50, b.metrics.map50, 1e-4);
  EXPECT_NEAR(a.metrics.map, b.metrics.map, 1e-4);
}
