// The exported graphs through Python's `onnx` package, the reference's own checker: the full
// check_model and strict shape inference (tests/yolo/export/check_onnx.py). Skipped, saying so,
// where no Python with `onnx` is installed (Debian: python3-onnx).
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tests/support/testing.h"
#include "yolo/export/onnx_export.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

// The first interpreter that imports onnx: the one on PATH, then the system's (a pyenv or venv
// python3 on PATH need not see Debian's python3-onnx).
std::string python_with_onnx() {
  for (const char* python : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(python) + " -c 'import onnx' >/dev/null 2>&1").c_str()) == 0) return python;
  return "";
}

std::string run(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  *status = p ? pclose(p) : -1;
  return out;
}

}  // namespace

TEST(OnnxPythonCheck, FixedAndDynamicGraphsPassOnnxChecks) {
  const std::string python = python_with_onnx();
  if (python.empty()) GTEST_SKIP() << "no python3 with the onnx package (apt-get install python3-onnx): skipped";
  const DetectionModel m(load_model_config("models/yolov5s.yaml"), std::nullopt, 0);
  const fs::path dir = fs::temp_directory_path() / "kestrel_onnx_python_check_test";
  fs::create_directories(dir);
  struct Case {
    OnnxExportOptions options;
    std::string file, dims;
  };
  OnnxExportOptions fixed, dynamic, half;
  fixed.height = 320, fixed.width = 256, fixed.batch = 2;
  dynamic.dynamic = true, dynamic.opset = 17;
  half.half = true, half.height = half.width = 256;
  for (const Case& c : {Case{fixed, "fixed.onnx", "2,5040,85"}, Case{dynamic, "dynamic.onnx", "batch,anchors,85"},
                        Case{half, "half.onnx", "1,4032,85"}}) {
    const std::string path = (dir / c.file).string();
    save_onnx_model(build_onnx_model(m, c.options), path);
    int status = 0;
    const std::string out = run(python + " tests/yolo/export/check_onnx.py " + path + " " + c.dims, &status);
    EXPECT_EQ(status, 0) << out;
    std::printf("%s", out.c_str());
  }
}
