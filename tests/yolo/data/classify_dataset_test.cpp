// The ImageFolder scan (class order, the walk's order, the extension filter, links followed), the
// layout's errors, and --data's resolution: a folder, a name under the datasets folder, a yaml's
// `path`, and a release name fetched through KESTREL_DOWNLOAD_MIRROR (a file:// mirror here).
#include "yolo/data/classify_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "tests/support/testing.h"
#include "tests/support/zip_writer.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::yolo::data;
using kestrel::testing::error_of;

namespace {

class ClassifyDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / (std::string("kestrel_classify_dataset_") + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An empty file (the scan never opens images).
  fs::path touch(const fs::path& rel) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p).put('x');
    return p;
  }
  std::vector<std::string> names_of(const ClassifySplit& s, const fs::path& under) {
    std::vector<std::string> out;
    for (const ClassifySample& x : s.samples)
      out.push_back(fs::path(x.path).lexically_relative(under).string() + ":" + std::to_string(x.label));
    return out;
  }

  fs::path dir_;
};

// Run from another folder for one test, restored after.
class CurrentDirectory {
 public:
  explicit CurrentDirectory(const fs::path& to) : was_(fs::current_path()) { fs::current_path(to); }
  ~CurrentDirectory() { fs::current_path(was_); }

 private:
  fs::path was_;
};

TEST_F(ClassifyDatasetTest, ClassesSortedAndFilesInSortedWalkOrder) {
  // Folders come in the order of their path strings, as Python's sorted(os.walk(...)):
  // "sub" < "sub b" < "sub/deeper" (a space sorts before '/'), not depth first.
  for (const char* f : {"train/zebra/b.jpg", "train/zebra/a.jpg", "train/apple/z.jpg", "train/apple/sub/y.jpg",
                        "train/apple/sub b/x.jpg", "train/apple/sub/deeper/w.jpg", "train/Mango/10.png",
                        "train/Mango/2.png"})
    touch(f);
  const ClassifySplit s = scan_class_folders((dir_ / "train").string());
  EXPECT_EQ(s.classes, (std::vector<std::string>{"Mango", "apple", "zebra"}));  // code-point order
  EXPECT_EQ(names_of(s, dir_ / "train"),
            (std::vector<std::string>{"Mango/10.png:0", "Mango/2.png:0", "apple/z.jpg:1", "apple/sub/y.jpg:1",
                                      "apple/sub b/x.jpg:1", "apple/sub/deeper/w.jpg:1", "zebra/a.jpg:2",
                                      "zebra/b.jpg:2"}));
}

TEST_F(ClassifyDatasetTest, OnlyImageFolderExtensionsAnyCase) {
  for (const char* f : {"train/a/1.JPEG", "train/a/2.Tiff", "train/a/3.webp", "train/a/4.txt", "train/a/5.gif",
                        "train/a/6", "train/a/7.jpg.txt", "train/a/8.pgm", "train/a/.hidden.jpg"})
    touch(f);
  const ClassifySplit s = scan_class_folders((dir_ / "train").string());
  EXPECT_EQ(names_of(s, dir_ / "train"),
            (std::vector<std::string>{"a/.hidden.jpg:0", "a/1.JPEG:0", "a/2.Tiff:0", "a/3.webp:0", "a/8.pgm:0"}));
  EXPECT_TRUE(is_classify_image_path("x/Y.PNG"));
  EXPECT_FALSE(is_classify_image_path("x/y.gif"));
}

TEST_F(ClassifyDatasetTest, LinksAreFollowedAndLoopsRefused) {
  touch("elsewhere/p.jpg");
  touch("train/a/q.jpg");
  fs::create_directory_symlink(dir_ / "elsewhere", dir_ / "train/a/linked");
  fs::create_directory_symlink(dir_ / "elsewhere", dir_ / "train/b");  // a class folder that is a link
  EXPECT_EQ(names_of(scan_class_folders((dir_ / "train").string()), dir_ / "train"),
            (std::vector<std::string>{"a/q.jpg:0", "a/linked/p.jpg:0", "b/p.jpg:1"}));
  fs::create_directory_symlink(dir_ / "train/a", dir_ / "train/a/loop");
  const std::string e = error_of([&] { scan_class_folders((dir_ / "train").string()); });
  EXPECT_NE(e.find("a/loop"), std::string::npos) << e;
  EXPECT_NE(e.find("remove the link"), std::string::npos) << e;
}

TEST_F(ClassifyDatasetTest, TrainIndexesTheEvaluationSplit) {
  for (const char* f : {"train/a/1.jpg", "train/b/1.jpg", "train/c/1.jpg", "val/a/2.jpg", "val/c/2.png"}) touch(f);
  const ClassifyDataset d = load_classify_dataset(dir_.string());
  EXPECT_EQ(d.root, dir_.string());
  EXPECT_EQ(d.test_name, "val");
  EXPECT_EQ(d.classes, (std::vector<std::string>{"a", "b", "c"}));
  // val has no b: c keeps train's index 2 (ImageFolder on val alone would make it 1).
  EXPECT_EQ(names_of(d.test, dir_ / "val"), (std::vector<std::string>{"a/2.jpg:0", "c/2.png:2"}));
  EXPECT_EQ(d.test.classes, d.classes);
  touch("test/b/3.jpg");  // test/ wins over val/ when it exists
  const ClassifyDataset t = load_classify_dataset(dir_.string());
  EXPECT_EQ(t.test_name, "test");
  EXPECT_EQ(names_of(t.test, dir_ / "test"), (std::vector<std::string>{"b/3.jpg:1"}));
}

TEST_F(ClassifyDatasetTest, LayoutErrorsSayWhatIsExpected) {
  const std::string layout = "<root>/train/<class>/*.jpg and <root>/val/<class>/*.jpg";
  std::string e = error_of([&] { load_classify_dataset((dir_ / "nowhere").string()); });
  EXPECT_NE(e.find("nowhere is not a folder"), std::string::npos) << e;
  touch("val/a/1.jpg");
  e = error_of([&] { load_classify_dataset(dir_.string()); });
  EXPECT_NE(e.find("has no train/ folder"), std::string::npos) << e;
  EXPECT_NE(e.find(layout), std::string::npos) << e;
  fs::remove_all(dir_ / "val");
  touch("train/a/1.jpg");
  e = error_of([&] { load_classify_dataset(dir_.string()); });
  EXPECT_NE(e.find("has no val/ (or test/) folder"), std::string::npos) << e;
  EXPECT_NE(e.find(layout), std::string::npos) << e;
  touch("val/zebra/1.jpg");
  e = error_of([&] { load_classify_dataset(dir_.string()); });
  EXPECT_NE(e.find((dir_ / "val/zebra").string() + " is a class the train split does not have"), std::string::npos)
      << e;
}

TEST_F(ClassifyDatasetTest, EmptyClassesAndEmptySplitsAreErrors) {
  touch("train/a/1.jpg");
  touch("train/b/notes.txt");
  fs::create_directories(dir_ / "train/c/sub");
  std::string e = error_of([&] { scan_class_folders((dir_ / "train").string()); });
  EXPECT_NE(e.find("no image file in the class folder(s) b, c"), std::string::npos) << e;
  fs::create_directories(dir_ / "val");
  touch("val/stray.jpg");  // files directly in the split folder belong to no class
  e = error_of([&] { scan_class_folders((dir_ / "val").string()); });
  EXPECT_NE(e.find("has no class folder"), std::string::npos) << e;
}

TEST_F(ClassifyDatasetTest, FormatsKestrelCannotDecodeAreRefusedUpFront) {
  for (const char* f : {"train/a/1.jpg", "train/a/2.bmp", "train/a/3.webp", "val/a/4.png", "val/a/5.TIF"}) touch(f);
  const std::string e = error_of([&] { load_classify_dataset(dir_.string()); });
  EXPECT_NE(e.find("3 image(s) in a format Kestrel does not decode"), std::string::npos) << e;
  EXPECT_NE(e.find("2.bmp"), std::string::npos) << e;
  EXPECT_NE(e.find("convert them or remove them"), std::string::npos) << e;
}

TEST_F(ClassifyDatasetTest, DataResolvesFoldersNamesAndYamls) {
  const yolo::Console quiet(false);
  const yolo::DownloadSettings settings;
  touch("datasets/tiny/train/a/1.jpg");
  fs::create_directories(dir_ / "run");
  CurrentDirectory cwd(dir_ / "run");
  const std::string tiny = (dir_ / "datasets/tiny").string();
  EXPECT_EQ(classify_datasets_dir(), (dir_ / "datasets").string());
  EXPECT_EQ(resolve_classify_data("../datasets/tiny", settings, quiet), tiny);  // a folder
  EXPECT_EQ(resolve_classify_data("tiny", settings, quiet), tiny);              // a name under ../datasets
  // A yaml's relative `path`: from the current directory first, then from the yaml's folder.
  fs::create_directories(dir_ / "cfg");
  kestrel::write_file_atomic((dir_ / "cfg/tiny.yaml").string(), "path: ../datasets/tiny\n");
  EXPECT_EQ(resolve_classify_data((dir_ / "cfg/tiny.yaml").string(), settings, quiet), tiny);
  kestrel::write_file_atomic((dir_ / "datasets/here.yaml").string(), "path: tiny\n");
  EXPECT_EQ(resolve_classify_data("../datasets/here.yaml", settings, quiet), tiny);
  kestrel::write_file_atomic((dir_ / "cfg/bad.yaml").string(), "path: nowhere\n");
  std::string e = error_of([&] { resolve_classify_data((dir_ / "cfg/bad.yaml").string(), settings, quiet); });
  EXPECT_NE(e.find("`path: nowhere` is not a folder"), std::string::npos) << e;
  e = error_of([&] { resolve_classify_data("some/where", settings, quiet); });
  EXPECT_NE(e.find("no dataset folder at " + (dir_ / "run/some/where").string() + " or " +
                   (dir_ / "datasets/some/where").string()),
            std::string::npos)
      << e;
  e = error_of([&] { resolve_classify_data("imagenet", settings, quiet); });
  EXPECT_NE(e.find("ImageNet is not a release download"), std::string::npos) << e;
}

TEST_F(ClassifyDatasetTest, ReleaseNamesAreFetchedThroughTheMirror) {
  const yolo::Console quiet(false);
  yolo::DownloadSettings settings;
  settings.mirror = "file://" + (dir_ / "mirror").string();
  settings.stall_seconds = 5;
  fs::create_directories(dir_ / "mirror");
  kestrel::write_file_atomic((dir_ / "mirror/tinycls.zip").string(),
                             kestrel::testing::make_zip({{"tinycls/train/a/1.jpg", "x", 0, 0, false, true},
                                                         {"tinycls/val/a/2.jpg", "y", 0, 0, false, true}}));
  fs::create_directories(dir_ / "run");
  CurrentDirectory cwd(dir_ / "run");
  EXPECT_EQ(classify_dataset_url("tinycls"), "https://github.com/ultralytics/yolov5/releases/download/v1.0/tinycls.zip");
  EXPECT_EQ(resolve_classify_data("tinycls", settings, quiet), (dir_ / "datasets/tinycls").string());
  EXPECT_TRUE(fs::exists(dir_ / "datasets/tinycls/val/a/2.jpg"));
  EXPECT_FALSE(fs::exists(dir_ / "datasets/tinycls.zip"));  // the archive is removed, as the reference
  const std::string e = error_of([&] { resolve_classify_data("nosuchset", settings, quiet); });
  EXPECT_NE(e.find("nosuchset.zip"), std::string::npos) << e;
  EXPECT_NE(e.find("give --data the folder holding"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "datasets/nosuchset.zip"));
}

}  // namespace
