// Shipped files found as the reference's check_file finds its own: an existing path as given,
// else by name under a root's models/ and data/ (recursively), from any working directory.
#include "yolo/common/shipped_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "base/error.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("kestrel_shipped_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() { fs::remove_all(path); }
};

struct WorkingDirectory {
  fs::path previous = fs::current_path();
  explicit WorkingDirectory(const fs::path& dir) { fs::current_path(dir); }
  ~WorkingDirectory() { fs::current_path(previous); }
};

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x: 1\n";
}

using kestrel::testing::error_of;

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(ShippedFiles, RootsOfTheBuildTreeTheBundleAndTheInstall) {
  const std::vector<fs::path> roots = shipped_roots("/opt/kestrel/bin/kestrel");
  EXPECT_EQ(roots, (std::vector<fs::path>{"/opt/kestrel/bin", "/opt/kestrel", "/opt/kestrel/share/kestrel"}));
}

TEST(ShippedFiles, FoundByNameFromAnyDirectory) {
  Scratch s;
  const fs::path bundle = s.path / "bundle";
  touch(bundle / "models/yolov5n.yaml");
  touch(bundle / "models/hub/yolov5-p2.yaml");
  touch(bundle / "data/hyps/hyp.scratch-low.yaml");
  const std::vector<fs::path> roots = {s.path / "bundle/bin", bundle};
  fs::create_directories(s.path / "elsewhere");
  const WorkingDirectory cwd(s.path / "elsewhere");
  EXPECT_EQ(find_shipped_file("yolov5n.yaml", roots, "--cfg"), (bundle / "models/yolov5n.yaml").string());
  EXPECT_EQ(find_shipped_file("models/yolov5n.yaml", roots, "--cfg"), (bundle / "models/yolov5n.yaml").string());
  EXPECT_EQ(find_shipped_file("yolov5-p2.yaml", roots, "--cfg"), (bundle / "models/hub/yolov5-p2.yaml").string());
  EXPECT_EQ(find_shipped_file("hyp.scratch-low.yaml", roots, "--hyp"),
            (bundle / "data/hyps/hyp.scratch-low.yaml").string());
  // A file that exists here is used as given, even where a shipped one has its name.
  touch(s.path / "elsewhere/yolov5n.yaml");
  EXPECT_EQ(find_shipped_file("yolov5n.yaml", roots, "--cfg"), "yolov5n.yaml");
}

TEST(ShippedFiles, MissingOrAmbiguousNamesAreExplained) {
  Scratch s;
  touch(s.path / "models/yolov5n.yaml");
  touch(s.path / "models/yolov5s.yaml");
  touch(s.path / "models/a/same.yaml");
  touch(s.path / "data/same.yaml");
  const std::vector<fs::path> roots = {s.path};
  fs::create_directories(s.path / "elsewhere");
  const WorkingDirectory cwd(s.path / "elsewhere");
  std::string e = error_of([&] { find_shipped_file("yolov5q.yaml", roots, "--cfg"); });
  EXPECT_TRUE(mentions(e, "--cfg 'yolov5q.yaml': no such file (tried '" + (s.path / "elsewhere/yolov5q.yaml").string()))
      << e;
  EXPECT_TRUE(mentions(e, (s.path / "models").string() + "/**")) << e;
  EXPECT_TRUE(mentions(e, "the shipped models are same.yaml, yolov5n.yaml, yolov5s.yaml")) << e;
  // --data and --hyp list what they take, not the models.
  touch(s.path / "data/coco128.yaml");
  touch(s.path / "data/hyps/hyp.scratch-low.yaml");
  e = error_of([&] { find_shipped_file("coco12.yaml", roots, "--data"); });
  EXPECT_TRUE(mentions(e, "the shipped datasets are coco128.yaml, same.yaml")) << e;
  e = error_of([&] { find_shipped_file("hyp.low.yaml", roots, "--hyp"); });
  EXPECT_TRUE(mentions(e, "the shipped hyperparameter files are hyp.scratch-low.yaml")) << e;
  e = error_of([&] { find_shipped_file("same.yaml", roots, "--cfg"); });
  EXPECT_TRUE(mentions(e, "matches several shipped files")) << e;
  EXPECT_TRUE(mentions(e, (s.path / "data/same.yaml").string())) << e;
  EXPECT_TRUE(mentions(error_of([&] { find_shipped_file("", roots, "--hyp"); }), "--hyp is empty"));
}
