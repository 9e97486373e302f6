// `kestrel detect` as the reference's detect.py: a folder holding unreadable files (each named in
// a warning and skipped, the others still detected, a summary counting the skipped ones), and each
// of detect.py's flags and source forms, checked through the files a run writes.
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/video_io.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::run_kestrel;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_detect_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

cv::Mat picture() {
  cv::Mat m(48, 64, CV_8UC3);
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x) m.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 4, y * 5, 90);
  return m;
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DetectCommand, UnreadableFilesInAFolderAreSkippedAndCounted) {
  const fs::path dir = scratch("skip");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run_kestrel("model --cfg models/yolov5n.yaml --nc 2 --save " + weights).code, 0);
  const fs::path images = dir / "images";
  fs::create_directories(images);
  kestrel::yolo::data::write_jpeg((images / "a_good.jpg").string(), picture());
  write_bytes(images / "b_text.jpg", "not an image");
  write_bytes(images / "c_empty.png", "");
  kestrel::yolo::data::write_png((images / "d_good.png").string(), picture());
  const std::string detect = "detect --weights " + weights + " --cfg models/yolov5n.yaml --nc 2 --img-size 64" +
                             " --device cpu --project " + (dir / "runs").string() + " --source ";

  const CliResult r = run_kestrel(detect + images.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "WARNING: skipping " + (images / "b_text.jpg").string() + ": ")) << r.out;
  EXPECT_TRUE(mentions(r.out, "WARNING: skipping " + (images / "c_empty.png").string() + ": ")) << r.out;
  EXPECT_TRUE(mentions(r.out, "image 1/4 " + (images / "a_good.jpg").string())) << r.out;
  EXPECT_TRUE(mentions(r.out, "image 4/4 " + (images / "d_good.png").string())) << r.out;
  EXPECT_TRUE(mentions(r.out, "2 files skipped")) << r.out;
  EXPECT_TRUE(fs::exists(dir / "runs/exp/a_good.jpg"));
  EXPECT_TRUE(fs::exists(dir / "runs/exp/d_good.png"));

  // Nothing readable at all is an error (exit 1), not an empty success.
  fs::remove(images / "a_good.jpg");
  fs::remove(images / "d_good.png");
  const CliResult none = run_kestrel(detect + images.string());
  EXPECT_EQ(none.code, 1) << none.out;
  EXPECT_TRUE(mentions(none.out, "could be read (2 files skipped)")) << none.out;
  fs::remove_all(dir);
}

// Weights without class names of their own: as the reference, whose --data defaults to
// coco128.yaml, an 80-class model is labelled with COCO's names; other counts keep numbers.
TEST(DetectCommand, EightyClassWeightsWithoutNamesGetCocosNames) {
  const fs::path dir = scratch("coco_names");
  const std::string weights = (dir / "w.safetensors").string();
  ASSERT_EQ(run_kestrel("model --cfg models/yolov5n.yaml --save " + weights).code, 0);
  kestrel::yolo::data::write_jpeg((dir / "a.jpg").string(), picture());
  const CliResult r = run_kestrel("detect --weights " + weights + " --cfg models/yolov5n.yaml --img-size 64 "
                                  "--conf-thres 0.0001 --device cpu --nosave --source " + (dir / "a.jpg").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("64x64 ");  // "image 1/1 ...: 64x64 3 persons, 1 kite, ..."
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string counts = r.out.substr(at + 6, r.out.find('\n', at) - at - 6);
  std::istringstream words(counts);
  std::string count, name;
  ASSERT_TRUE(words >> count >> name) << counts;
  EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(name[0]))) << "a class number, not a name: " << counts;
  fs::remove_all(dir);
}

// --- detect.py's flags and sources -----------------------------------------------------------
// A randomly initialised yolov5n (2 classes) at a tiny confidence threshold: every image has
// plenty of detections of both classes, so each flag's effect shows in the files it writes.

namespace {

class DetectFlags : public ::testing::Test {
 protected:
  static fs::path dir;

  static void SetUpTestSuite() {
    // Tiny images: one compute thread each is fastest, and results do not depend on the count.
    ::setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0);
    dir = scratch("flags");
    ASSERT_EQ(run_kestrel("model --cfg models/yolov5n.yaml --nc 2 --save " + (dir / "w.safetensors").string()).code, 0);
    fs::create_directories(dir / "images");
    kestrel::yolo::data::write_png((dir / "images/a.png").string(), picture());
    kestrel::yolo::data::write_png((dir / "images/b.png").string(), picture()(cv::Rect(0, 0, 40, 48)).clone());
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }

  // Runs detect into runs/<name> once; later calls with that name return the first result.
  static CliResult detect(const std::string& name, const std::string& flags,
                          const std::string& source = (dir / "images/a.png").string(),
                          const std::string& size = "64") {
    static std::map<std::string, CliResult> done;
    if (auto it = done.find(name); it != done.end()) return it->second;
    return done[name] = run_kestrel("detect --weights " + (dir / "w.safetensors").string() +
                                    " --cfg models/yolov5n.yaml --nc 2 --img-size " + size +
                                    " --device cpu --conf-thres 0.00001 --exist-ok --project " +
                                    (dir / "runs").string() + " --name " + name + " --source " + source +
                                    " " + flags);
  }
  static fs::path run_dir(const std::string& name) { return dir / "runs" / name; }

  // The rows of a --save-txt file, as numbers.
  static std::vector<std::vector<double>> rows(const fs::path& txt) {
    std::vector<std::vector<double>> out;
    std::ifstream in(txt);
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      out.emplace_back();
      for (double v; fields >> v;) out.back().push_back(v);
    }
    return out;
  }
};

fs::path DetectFlags::dir;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_F(DetectFlags, ClassesMaxDetAndSaveConfShapeTheLabels) {
  ASSERT_EQ(detect("all", "--save-txt --save-conf").code, 0);
  const auto all = rows(run_dir("all") / "labels/a.txt");
  ASSERT_GT(all.size(), 3u);
  std::set<double> classes;
  for (const auto& r : all) {
    EXPECT_EQ(r.size(), 6u);  // class, x, y, w, h, conf
    classes.insert(r[0]);
  }
  EXPECT_EQ(classes, (std::set<double>{0, 1}));
  // The reference writes from the lowest confidence up.
  EXPECT_LE(all.front()[5], all.back()[5]);

  ASSERT_EQ(detect("one", "--save-txt --classes 1").code, 0);
  const auto one = rows(run_dir("one") / "labels/a.txt");
  ASSERT_FALSE(one.empty());
  for (const auto& r : one) {
    EXPECT_EQ(r.size(), 5u);
    EXPECT_EQ(r[0], 1);
  }
  ASSERT_EQ(detect("few", "--save-txt --max-det 3").code, 0);
  EXPECT_EQ(rows(run_dir("few") / "labels/a.txt").size(), 3u);
}

TEST_F(DetectFlags, AgnosticNmsSuppressesAcrossClasses) {
  // Boxes of one class suppress those of the other too: fewer survive. (NMS runs on the
  // letterboxed boxes, before they are clipped to the image, so the txt's boxes cannot show it.)
  ASSERT_EQ(detect("all", "--save-txt --save-conf").code, 0);
  ASSERT_EQ(detect("agnostic", "--save-txt --agnostic-nms").code, 0);
  EXPECT_LT(rows(run_dir("agnostic") / "labels/a.txt").size(), rows(run_dir("all") / "labels/a.txt").size());
}

TEST_F(DetectFlags, SaveCropAndNosave) {
  const CliResult r = detect("crops", "--save-txt --save-crop --nosave");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(run_dir("crops") / "a.png"));
  const size_t detections = rows(run_dir("crops") / "labels/a.txt").size();
  size_t crops = 0;
  for (const auto& e : fs::recursive_directory_iterator(run_dir("crops") / "crops"))
    crops += e.is_regular_file() && e.path().filename().string().rfind("a", 0) == 0;
  EXPECT_EQ(crops, detections);
  EXPECT_TRUE(fs::exists(run_dir("crops") / "crops/0/a.jpg") || fs::exists(run_dir("crops") / "crops/1/a.jpg"));
  EXPECT_TRUE(mentions(r.out, "Results saved to " + run_dir("crops").string())) << r.out;
  EXPECT_TRUE(mentions(r.out, "1 labels saved to " + run_dir("crops").string() + "/labels")) << r.out;

  const CliResult nothing = detect("nothing", "--nosave");
  ASSERT_EQ(nothing.code, 0) << nothing.out;
  EXPECT_FALSE(fs::exists(run_dir("nothing") / "a.png"));
  EXPECT_FALSE(mentions(nothing.out, "Results saved")) << nothing.out;
}

TEST_F(DetectFlags, LabelAndLineFlagsChangeTheDrawing) {
  // "all" draws with the defaults (its --save-txt/--save-conf do not change the drawing).
  const std::map<std::string, std::string> runs = {{"all", "--save-txt --save-conf"},
                                                   {"hide_labels", "--hide-labels"},
                                                   {"hide_conf", "--hide-conf"},
                                                   {"thin", "--line-thickness 1"}};
  std::set<std::string> images;
  for (const auto& [name, flags] : runs) {
    ASSERT_EQ(detect(name, flags).code, 0) << flags;
    images.insert(read_bytes(run_dir(name) / "a.png"));
  }
  EXPECT_EQ(images.size(), runs.size()) << "some flag left the annotated image unchanged";
}

TEST_F(DetectFlags, ViewImgWithoutADisplayIsRefused) {
  const char* display = std::getenv("DISPLAY");
  const std::string saved = display ? display : "";
  ::unsetenv("DISPLAY");
  ::unsetenv("WAYLAND_DISPLAY");
  const CliResult r = detect("view", "--view-img");
  if (display) ::setenv("DISPLAY", saved.c_str(), 1);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(mentions(r.out, "--view-img: there is no display here")) << r.out;
}

TEST_F(DetectFlags, GlobsAndListsAsSources) {
  CliResult r = detect("glob", "", "'" + (dir / "images/*.png").string() + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "image 1/2 " + (dir / "images/a.png").string() + ": 64x64 ")) << r.out;
  EXPECT_TRUE(mentions(r.out, "image 2/2 " + (dir / "images/b.png").string() + ": 64x64 ")) << r.out;
  // A list, at a size given as height and width, rounded up to the stride: 64 x 96.
  std::ofstream(dir / "list.txt") << "images/b.png\n";
  r = detect("list", "", (dir / "list.txt").string(), "50 70");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "image 1/1 " + (dir / "images/b.png").string())) << r.out;
  EXPECT_TRUE(fs::exists(run_dir("list") / "b.png"));
  EXPECT_TRUE(mentions(r.out, "updating to 64 96")) << r.out;
  EXPECT_TRUE(mentions(r.out, "at shape (1, 3, 64, 96)")) << r.out;
}

TEST_F(DetectFlags, VideosWhereTheBuildReadsThem) {
  const fs::path clip = dir / "clip.mp4";
  if (!kestrel::yolo::data::video_io_available()) {
    std::ofstream(clip) << "not read";
    const CliResult r = detect("video", "", clip.string());
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(mentions(r.out, "is a video, and this kestrel was built without OpenCV videoio")) << r.out;
    return;
  }
  {
    kestrel::yolo::data::VideoWriter w(clip.string(), 10, 64, 48);
    for (int i = 0; i < 5; ++i) w.write(picture());
  }
  const CliResult r = detect("video", "--save-txt --vid-stride 2", clip.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(mentions(r.out, "video 1/1 (1/2) " + clip.string() + ": 64x64 ")) << r.out;
  EXPECT_TRUE(mentions(r.out, "video 1/1 (2/2) ")) << r.out;
  EXPECT_FALSE(mentions(r.out, "(3/2)")) << r.out;
  EXPECT_TRUE(fs::exists(run_dir("video") / "clip.mp4"));
  EXPECT_TRUE(fs::exists(run_dir("video") / "labels/clip_1.txt"));
  EXPECT_TRUE(fs::exists(run_dir("video") / "labels/clip_2.txt"));
  kestrel::yolo::data::VideoReader written((run_dir("video") / "clip.mp4").string());
  EXPECT_EQ(written.frames(), 2);
  EXPECT_EQ(written.width(), 64);
}
