// Dataset yaml forms (folders, .txt lists, lists of those; names as list or map), path
// resolution, the errors that name the yaml and key (a repeated key too), image listing (broken
// symlinks kept for the scan to report), a split with no usable image naming why, and coco128
// when present.
#include "yolo/data/dataset_config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("kestrel_dscfg_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& rel) const { return (path / rel).string(); }
};

// Runs the rest of a scope from `dir`.
struct WorkingDirectory {
  fs::path previous = fs::current_path();
  explicit WorkingDirectory(const fs::path& dir) { fs::current_path(dir); }
  ~WorkingDirectory() { fs::current_path(previous); }
};

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

void image(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  write_jpeg(path, cv::Mat(16, 16, CV_8UC3, cv::Scalar(1, 2, 3)));
}

// The message of the kestrel::Error that f throws ("" if none).
using kestrel::testing::error_of;

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DatasetConfig, FolderFormRelativePathAndNamesList) {
  TempDir t("folders");
  write(t / "cfg/data.yaml",
        "path: ../ds  # relative to this file\ntrain: images/train\nval: [images/val, images/extra]\n"
        "test:\nnames: [cat, dog]\n");
  fs::create_directories(t / "ds/images/val");
  fs::create_directories(t / "ds/images/extra");
  const DatasetConfig c = load_dataset_config(t / "cfg/data.yaml");
  EXPECT_EQ(c.root, t / "ds");
  EXPECT_EQ(c.train, std::vector<std::string>{t / "ds/images/train"});
  EXPECT_EQ(c.val, (std::vector<std::string>{t / "ds/images/val", t / "ds/images/extra"}));
  EXPECT_TRUE(c.test.empty());
  EXPECT_EQ(c.nc, 2);
  EXPECT_EQ(c.names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(&c.split("val"), &c.val);
  EXPECT_TRUE(mentions(error_of([&] { c.split("holdout"); }), "train, val or test"));
}

TEST(DatasetConfig, DefaultsAbsolutePathsAndNamesMap) {
  TempDir t("defaults");
  // No `path`: the yaml's folder. Absolute entries stay; "../x" falls back to "x" under path
  // when the joined path does not exist, as the reference does.
  image(t / "images/a.jpg");
  write(t / "data.yaml", "train: " + (t / "elsewhere/train") + "\nval: ../images\ntest: images\nnc: 3\n"
                         "names:\n  2: bird\n  0: cat\n  1: dog\n");
  const DatasetConfig c = load_dataset_config(t / "data.yaml");
  EXPECT_EQ(c.root, t.path.string());
  EXPECT_EQ(c.train, std::vector<std::string>{t / "elsewhere/train"});
  EXPECT_EQ(c.val, std::vector<std::string>{t / "images"});
  EXPECT_EQ(c.test, std::vector<std::string>{t / "images"});
  EXPECT_EQ(c.names, (std::vector<std::string>{"cat", "dog", "bird"}));

  write(t / "nc_only.yaml", "train: a\nval: b\nnc: 2\n");
  fs::create_directories(t / "b");
  EXPECT_EQ(load_dataset_config(t / "nc_only.yaml").names, (std::vector<std::string>{"class0", "class1"}));
}

// The stock coco128.yaml's `path: ../datasets/coco128` is relative to the folder the reference
// runs from: Kestrel reads it from the current directory first, then from the yaml's folder, and
// names both places when neither holds the dataset.
TEST(DatasetConfig, RelativePathFromTheCurrentDirectoryThenTheYamlsFolder) {
  TempDir t("cwd");
  fs::create_directories(t / "yolov5");
  const WorkingDirectory in_checkout(t / "yolov5");
  write(t / "yolov5/data/coco.yaml", "path: ../datasets/coco\ntrain: images/train\nval: images/val\n"
                                     "names: [a]\n");
  fs::create_directories(t / "datasets/coco/images/val");       // beside the run folder
  fs::create_directories(t / "yolov5/datasets/coco/images/val");  // beside the yaml's folder
  EXPECT_EQ(load_dataset_config("data/coco.yaml").root, t / "datasets/coco");
  fs::remove_all(t / "datasets");
  const DatasetConfig beside_yaml = load_dataset_config("data/coco.yaml");
  EXPECT_EQ(beside_yaml.root, t / "yolov5/datasets/coco");
  EXPECT_EQ(beside_yaml.val, std::vector<std::string>{t / "yolov5/datasets/coco/images/val"});
  fs::remove_all(t / "yolov5/datasets");
  const std::string e = error_of([&] { load_dataset_config("data/coco.yaml"); });
  EXPECT_TRUE(mentions(e, "data/coco.yaml: dataset not found under `path: ../datasets/coco`")) << e;
  EXPECT_TRUE(mentions(e, t / "datasets/coco (from the current directory")) << e;
  EXPECT_TRUE(mentions(e, t / "yolov5/datasets/coco (from the yaml's folder) has no " +
                              (t / "yolov5/datasets/coco/images/val"))) << e;
}

TEST(DatasetConfig, ErrorsNameTheYamlAndTheKey) {
  TempDir t("errors");
  const struct {
    const char* text;
    const char* expect;
  } cases[] = {
      {"val: v\nnames: [a]\n", "missing `train`"},
      {"train: t\nnames: [a]\n", "missing `val`"},
      {"train: t\nval: v\n", "missing `names`"},
      {"train: t\nval: v\nnc: 3\nnames: [a, b]\n", "`nc` is 3 but `names` has 2 entries"},
      {"train: t\nval: v\nnames: {0: a, 2: b}\n", "`names` keys must be the class indices"},
      {"train: t\nval: v\nnames: {x: a}\n", "`names` must be a list of names or a map"},
      {"train: t\nval: v\nnc: many\nnames: [a]\n", "`nc` must be an integer"},
      {"train: t\nval: v\nnc: 0\n", "`nc` must be in [1, 100000], got 0"},
      {"train: t\nval: v\nnc: 2000000000\n", "`nc` must be in [1, 100000], got 2000000000"},
      {"train: {a: 1}\nval: v\nnames: [a]\n", "`train` must be a path or a list of paths"},
      {"[1, 2]\n", "is a map"},
      {"train: [unclosed\n", "not valid YAML"},
      {"train: t\nval: v\nnames: [a]\ntrain: u\n", "key 'train' is given twice (lines 1 and 4)"},
  };
  for (const auto& c : cases) {
    write(t / "bad.yaml", c.text);
    const std::string e = error_of([&] { load_dataset_config(t / "bad.yaml"); });
    EXPECT_TRUE(mentions(e, t / "bad.yaml") && mentions(e, c.expect)) << c.text << " -> " << e;
  }
  EXPECT_TRUE(mentions(error_of([&] { load_dataset_config(t / "absent.yaml"); }), "cannot read dataset yaml"));
}

// A missing dataset's error says what its `download` entry would fetch and where it goes, and
// lists the addresses a download script names without running it. The shipped yamls (coco128,
// coco, VOC) parse, with the reference's class counts, and give that advice where their images
// are absent.
TEST(DatasetConfig, MissingDatasetNamesItsDownload) {
  const fs::path shipped = fs::current_path() / "data";  // tests run from the source folder
  TempDir t("download");
  const WorkingDirectory cwd(t.path);
  write(t / "zip.yaml", "path: ../datasets/tiny\ntrain: images\nval: images\nnames: [a]\n"
                        "download: https://example.invalid/tiny.zip\n");
  std::string e = error_of([&] { load_dataset_config(t / "zip.yaml"); });
  EXPECT_TRUE(mentions(e, "`download` is https://example.invalid/tiny.zip: fetch it and unpack it into " +
                              (t.path.parent_path() / "datasets").string()))
      << e;
  write(t / "script.yaml", "path: ds\ntrain: images\nval: images\nnames: [a]\ndownload: |\n"
                           "  import os\n  urls = ['https://example.invalid/a.zip',  # first\n"
                           "          'http://example.invalid/b.zip']\n  os.system('curl ' + urls[0])\n");
  e = error_of([&] { load_dataset_config(t / "script.yaml"); });
  EXPECT_TRUE(mentions(e, "is a script, which Kestrel never runs") &&
              mentions(e, "\n  https://example.invalid/a.zip\n  http://example.invalid/b.zip"))
      << e;
  e = error_of([&] { load_dataset_config((shipped / "coco128.yaml").string()); });
  EXPECT_TRUE(mentions(e, "https://ultralytics.com/assets/coco128.zip")) << e;
  e = error_of([&] { load_dataset_config((shipped / "coco.yaml").string()); });
  EXPECT_TRUE(mentions(e, "http://images.cocodataset.org/zips/train2017.zip")) << e;
  e = error_of([&] { load_dataset_config((shipped / "VOC.yaml").string()); });
  EXPECT_TRUE(mentions(e, "VOCtrainval_11-May-2012.zip")) << e;
  for (const auto& [name, nc] : {std::pair{"coco128.yaml", 80}, {"coco.yaml", 80}, {"VOC.yaml", 20}}) {
    const fs::path root = t.path / "datasets" / fs::path(name).stem();
    for (const char* split : {"images/train2017", "images/test2007", "images/train2012", "images/val2012",
                              "images/train2007", "images/val2007"})
      fs::create_directories(root / split);
    for (const char* list : {"train2017.txt", "val2017.txt", "test-dev2017.txt"}) write((root / list).string(), "");
    const fs::path here = t.path / "run";
    fs::create_directories(here);
    const WorkingDirectory in_run(here);  // `path: ../datasets/...` from the current directory
    const DatasetConfig c = load_dataset_config((shipped / name).string());
    EXPECT_EQ(c.nc, nc) << name;
    EXPECT_EQ(c.root, root.lexically_normal().string()) << name;
  }
}

// The download the reference's check_dataset would make itself: a missing dataset whose `download`
// is one .zip address, to be unpacked above `path` as read from the current directory (into the
// current directory for a yaml without `path`); none for a present dataset or a script.
TEST(DatasetConfig, PendingDownloadIsAZipAddressForAMissingDataset) {
  TempDir t("pending");
  const fs::path here = t.path / "run";
  fs::create_directories(here);
  const WorkingDirectory cwd(here);
  write(t / "zip.yaml", "path: ../datasets/tiny\ntrain: images\nval: images/val\nnames: [a]\n"
                        "download: https://example.invalid/tiny.zip\n");
  auto d = kestrel::yolo::data::pending_dataset_download(t / "zip.yaml");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->url, "https://example.invalid/tiny.zip");
  EXPECT_EQ(d->unpack_dir, (t.path / "datasets").string());
  EXPECT_EQ(d->root, (t.path / "datasets/tiny").string());
  EXPECT_EQ(d->missing, (t.path / "datasets/tiny/images/val").string());
  write(t / "bare.yaml", "train: images\nval: images\nnames: [a]\ndownload: https://example.invalid/b.zip\n");
  d = kestrel::yolo::data::pending_dataset_download(t / "bare.yaml");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->unpack_dir, here.string());
  write(t / "tar.yaml", "path: ../datasets/tiny\ntrain: images\nval: images\nnames: [a]\n"
                        "download: https://example.invalid/tiny.tar.gz\n");
  EXPECT_FALSE(kestrel::yolo::data::pending_dataset_download(t / "tar.yaml"));
  write(t / "script.yaml", "path: ../datasets/tiny\ntrain: images\nval: images\nnames: [a]\n"
                           "download: |\n  import os\n  os.system('curl https://example.invalid/tiny.zip')\n");
  EXPECT_FALSE(kestrel::yolo::data::pending_dataset_download(t / "script.yaml"));
  fs::create_directories(t.path / "datasets/tiny/images/val");
  EXPECT_FALSE(kestrel::yolo::data::pending_dataset_download(t / "zip.yaml"));
}

TEST(ListImages, FoldersAreSearchedRecursivelyListsResolvedAgainstTheirFolder) {
  TempDir t("list");
  image(t / "ds/images/train/b.jpg");
  image(t / "ds/images/train/sub/a.JPG");
  image(t / "ds/images/train/.hidden/x.jpg");
  write(t / "ds/images/train/notes.txt", "not an image");
  image(t / "ds/images/val/c.png");
  image(t / "other/d.jpg");
  write(t / "ds/val.txt", "./images/val/c.png\n\n  images/train/b.jpg  \n" + (t / "other/d.jpg") +
                              "\nREADME.md\n./images/val/c.png\n");
  const std::vector<std::string> folder = list_images({t / "ds/images/train"}, "x");
  EXPECT_EQ(folder, (std::vector<std::string>{t / "ds/images/train/b.jpg", t / "ds/images/train/sub/a.JPG"}));
  const std::vector<std::string> listed = list_images({t / "ds/val.txt"}, "x");
  EXPECT_EQ(listed, (std::vector<std::string>{t / "ds/images/train/b.jpg", t / "ds/images/val/c.png",
                                              t / "other/d.jpg"}));
  const std::vector<std::string> both = list_images({t / "ds/images/train", t / "ds/images/val"}, "x");
  EXPECT_EQ(both.size(), 3u);

  EXPECT_TRUE(mentions(error_of([&] { list_images({t / "nowhere"}, "data.yaml: `val`"); }),
                       "data.yaml: `val`: " + (t / "nowhere") + " does not exist"));
  fs::create_directories(t / "empty");
  EXPECT_TRUE(mentions(error_of([&] { list_images({t / "empty"}, "data.yaml: `val`"); }), "no images found"));
  EXPECT_TRUE(is_image_path("x/y.TIFF") && is_image_path("a.webp") && is_image_path("a.jpeg"));
  EXPECT_FALSE(is_image_path("a.gif") || is_image_path("a.txt") || is_image_path("jpg"));
}

TEST(LoadSplit, EndToEndSmallDataset) {
  TempDir t("e2e");
  image(t / "images/val/a.jpg");
  image(t / "images/val/b.jpg");
  write(t / "labels/val/a.txt", "2 0.5 0.5 0.5 0.5\n");
  write(t / "labels/val/b.txt", "5 0.5 0.5 0.5 0.5\n");  // class 5 >= nc: refused
  write(t / "data.yaml", "train: images/val\nval: images/val\nnames: [a, b, c]\n");
  const DatasetConfig cfg = load_dataset_config(t / "data.yaml");
  const DatasetSplit s = load_split(cfg, "val", cfg.nc, false, false, 1);
  EXPECT_EQ(s.counts, (ScanCounts{2, 0, 0, 1, 2}));
  ASSERT_EQ(s.records.size(), 1u);
  EXPECT_EQ(s.records[0].boxes[0].cls, 2);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_TRUE(mentions(s.warnings[0], t / "labels/val/b.txt")) << s.warnings[0];
  // --single-cls: class 5 is acceptable and every class becomes 0.
  const DatasetSplit single = load_split(cfg, "val", 1, true, false, 1);
  ASSERT_EQ(single.records.size(), 2u);
  EXPECT_EQ(single.records[0].boxes[0].cls, 0);
  EXPECT_EQ(single.records[1].boxes[0].cls, 0);
  const std::string none = error_of([&] { load_split(cfg, "test", 3, false, false, 1); });
  EXPECT_TRUE(mentions(none, "`test` is not set")) << none;
}

// As the reference: training on images without a single label file is refused, naming where the
// labels were looked for; evaluation accepts such a split (every image a background).
TEST(LoadSplit, TrainSplitWithoutLabelsIsRefused) {
  TempDir t("nolabels");
  image(t / "images/train/a.jpg");
  image(t / "images/train/b.jpg");
  write(t / "data.yaml", "train: images/train\nval: images/train\nnames: [a]\n");
  const DatasetConfig cfg = load_dataset_config(t / "data.yaml");
  const std::string refused = error_of([&] { load_split(cfg, "train", 1, false, false, 1); });
  EXPECT_TRUE(mentions(refused, "no labels found in " + (t / "labels/train")) &&
              mentions(refused, "can not start training") && mentions(refused, t / "labels/train/a.txt"))
      << refused;
  EXPECT_EQ(load_split(cfg, "val", 1, false, false, 1).records.size(), 2u);
  EXPECT_EQ(load_split(cfg, "train", 1, false, false, 1, /*evaluation=*/true).records.size(), 2u);
  // One label file, even an empty one, is enough: the reference counts label files found.
  write(t / "labels/train/a.txt", "");
  EXPECT_EQ(load_split(cfg, "train", 1, false, false, 1).counts.found, 1);
}

// Nothing usable: the refusal says why per image, grouped by reason with counts and the first
// few images, not that labels are missing (they never were the problem).
TEST(LoadSplit, AllImagesRefusedNamesTheirReasons) {
  TempDir t("junk");
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    write(t / ("images/train/" + std::string(name) + ".jpg"), "not a picture");
    write(t / ("labels/train/" + std::string(name) + ".txt"), "0 0.5 0.5 0.5 0.5\n");
  }
  write_jpeg(t / "images/train/f.jpg", cv::Mat(9, 40, CV_8UC3, cv::Scalar(1, 2, 3)));
  write(t / "data.yaml", "train: images/train\nval: images/train\nnames: [a]\n");
  const DatasetConfig cfg = load_dataset_config(t / "data.yaml");
  const std::string refused = error_of([&] { load_split(cfg, "train", 1, false, false, 1); });
  EXPECT_TRUE(mentions(refused, "no usable images among 6") && mentions(refused, "6 corrupt") &&
              mentions(refused, "5 images: ignoring corrupt image: '<image>' is not a JPEG or PNG") &&
              mentions(refused, "(" + (t / "images/train/a.jpg") + ", " + (t / "images/train/b.jpg") + ", " +
                                    (t / "images/train/c.jpg") + " and 2 more)") &&
              mentions(refused, "1 image: ignoring corrupt image: image size 40x9 is below 10 pixels") &&
              mentions(refused, t / "images/train/f.jpg") && !mentions(refused, t / "images/train/d.jpg") &&
              !mentions(refused, "no labels found"))
      << refused;
}

// A symbolic link that leads nowhere is listed, and the scan counts it corrupt saying why, as
// the reference's glob lists it and its check refuses it; a link to an image is an image.
TEST(LoadSplit, BrokenSymlinksAreCountedCorruptWithTheirReason) {
  TempDir t("links");
  image(t / "images/val/a.jpg");
  fs::create_symlink(t / "images/val/a.jpg", t / "images/val/alias.jpg");
  fs::create_symlink(t / "images/val/gone.jpg", t / "images/val/dangling.jpg");
  fs::create_symlink(t / "images/val/loop2.jpg", t / "images/val/loop1.jpg");
  fs::create_symlink(t / "images/val/loop1.jpg", t / "images/val/loop2.jpg");
  EXPECT_EQ(list_images({t / "images/val"}, "x").size(), 5u);
  write(t / "data.yaml", "train: images/val\nval: images/val\nnames: [a]\n");
  const DatasetConfig cfg = load_dataset_config(t / "data.yaml");
  const DatasetSplit s = load_split(cfg, "val", 1, false, false, 1);
  EXPECT_EQ(s.counts, (ScanCounts{0, 2, 0, 3, 5}));
  EXPECT_EQ(s.records.size(), 2u);
  std::string all;
  for (const std::string& w : s.warnings) all += w + "\n";
  EXPECT_TRUE(mentions(all, t / "images/val/dangling.jpg") && mentions(all, "No such file or directory") &&
              mentions(all, "a symbolic link to '" + (t / "images/val/gone.jpg") + "'"))
      << all;
  EXPECT_TRUE(mentions(all, t / "images/val/loop1.jpg") && mentions(all, t / "images/val/loop2.jpg") &&
              mentions(all, "Too many levels of symbolic links"))
      << all;
}

TEST(LoadSplit, Coco128WhenPresent) {
  const std::string yaml = "/work/shared/datasets/coco128/coco128.yaml";
  if (!fs::exists(yaml)) GTEST_SKIP() << "coco128 not found at " << yaml;
  const DatasetConfig cfg = load_dataset_config(yaml);
  EXPECT_EQ(cfg.nc, 80);
  EXPECT_EQ(cfg.names[79], "toothbrush");
  // Without the cache: the shared copy of the dataset is left untouched.
  const DatasetSplit s = load_split(cfg, "train", cfg.nc, false, false);
  EXPECT_EQ(s.records.size(), 128u);
  // 2 images have no label file (and 2 label files no image, which are never looked at).
  EXPECT_EQ(s.counts, (ScanCounts{126, 2, 0, 0, 128}));
  EXPECT_TRUE(mentions(s.summary, "labels/train2017'... 126 images, 2 backgrounds, 0 corrupt")) << s.summary;
  size_t boxes = 0;
  for (const ImageRecord& r : s.records) {
    boxes += r.boxes.size();
    EXPECT_GE(r.width, 10);
    EXPECT_GE(r.height, 10);
  }
  EXPECT_EQ(boxes, 929u);  // 941 label rows, 12 of them in the two label files without an image
  EXPECT_TRUE(s.warnings.empty()) << s.warnings.front();
}
