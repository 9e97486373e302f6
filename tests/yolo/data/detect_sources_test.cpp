// detect --source as the reference's LoadImages reads it: files, folders (not recursive, hidden
// names skipped), globs with `**`, .txt lists (relative lines from the list's folder), streams
// and webcams; images before videos; errors that name the source.
#include "yolo/data/detect_sources.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

struct Tree {
  fs::path root = fs::temp_directory_path() / ("kestrel_sources_" + std::to_string(::getpid()));
  Tree() {
    fs::remove_all(root);
    for (const char* f : {"imgs/b.jpg", "imgs/a.PNG", "imgs/clip.mp4", "imgs/notes.md", "imgs/.hidden.jpg",
                          "imgs/noext", "imgs/sub/c.jpg", "imgs/sub/deep/d.bmp", "other/e.jpg"})
      touch(root / f);
  }
  ~Tree() { fs::remove_all(root); }
  static void touch(const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
  }
  std::string operator/(const std::string& rel) const { return (root / rel).string(); }
};

std::vector<std::string> paths(const std::vector<SourceItem>& items) {
  std::vector<std::string> out;
  for (const SourceItem& i : items) out.push_back(i.path);
  return out;
}

using kestrel::testing::error_of;

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DetectSources, AFolderListsItsOwnImagesThenVideos) {
  Tree t;
  const std::vector<SourceItem> items = expand_sources(t / "imgs");
  EXPECT_EQ(paths(items), (std::vector<std::string>{t / "imgs/a.PNG", t / "imgs/b.jpg", t / "imgs/clip.mp4"}));
  EXPECT_EQ(items[0].kind, SourceKind::kImage);
  EXPECT_EQ(items[2].kind, SourceKind::kVideo);
  // A single file, given relative to the working directory, comes back absolute.
  const fs::path previous = fs::current_path();
  fs::current_path(t.root);
  EXPECT_EQ(paths(expand_sources("imgs/b.jpg")), std::vector<std::string>{t / "imgs/b.jpg"});
  fs::current_path(previous);
}

TEST(DetectSources, GlobsAsPythonsRecursiveGlob) {
  Tree t;
  EXPECT_EQ(paths(expand_sources(t / "imgs/*.jpg")), std::vector<std::string>{t / "imgs/b.jpg"});
  EXPECT_EQ(paths(expand_sources(t / "imgs/**/*.jpg")),
            (std::vector<std::string>{t / "imgs/b.jpg", t / "imgs/sub/c.jpg"}));
  EXPECT_EQ(paths(expand_sources(t / "*/**/?.*")),
            (std::vector<std::string>{t / "imgs/a.PNG", t / "imgs/b.jpg", t / "imgs/sub/c.jpg",
                                      t / "imgs/sub/deep/d.bmp", t / "other/e.jpg"}));
  EXPECT_EQ(glob_paths(t / "imgs/.h*"), std::vector<std::string>{t / "imgs/.hidden.jpg"});
  EXPECT_EQ(glob_paths(t / "imgs/[ab].*"), (std::vector<std::string>{t / "imgs/a.PNG", t / "imgs/b.jpg"}));
}

TEST(DetectSources, TxtListsHoldAnySource) {
  Tree t;
  std::ofstream(t / "list.txt") << "other/e.jpg\n\n  imgs/sub/*.jpg \n" << (t / "imgs/clip.mp4") << "\nrtsp://cam/live\n0\n";
  const std::vector<SourceItem> items = expand_sources(t / "list.txt");
  EXPECT_EQ(paths(items), (std::vector<std::string>{t / "imgs/sub/c.jpg", t / "other/e.jpg", t / "imgs/clip.mp4",
                                                    "rtsp://cam/live", "0"}));
  EXPECT_EQ(items[3].kind, SourceKind::kStream);
  EXPECT_EQ(items[4].kind, SourceKind::kStream);
  std::ofstream(t / "self.txt") << "self.txt\n";
  EXPECT_TRUE(mentions(error_of([&] { expand_sources(t / "self.txt"); }), "does a list name itself"));
}

TEST(DetectSources, StreamsAndVideoUrls) {
  EXPECT_TRUE(is_stream_source("0"));
  EXPECT_TRUE(is_stream_source("rtsp://example.com/media"));
  EXPECT_TRUE(is_stream_source("HTTPS://example.com/live"));
  EXPECT_FALSE(is_stream_source("https://example.com/v.mp4"));
  EXPECT_FALSE(is_stream_source("clip.mp4"));
  EXPECT_TRUE(is_video_path("a/B.MKV"));
  EXPECT_FALSE(is_video_path("a.mp4/b"));
  const std::vector<SourceItem> url = expand_sources("http://example.com/v.mov");
  ASSERT_EQ(url.size(), 1u);
  EXPECT_EQ(url[0].kind, SourceKind::kVideo);
}

TEST(DetectSources, ErrorsNameTheSource) {
  Tree t;
  std::string e = error_of([&] { expand_sources(t / "missing.jpg"); });
  EXPECT_TRUE(mentions(e, t / "missing.jpg") && mentions(e, "does not exist")) << e;
  e = error_of([&] { expand_sources("https://example.com/a.jpg"); });
  EXPECT_TRUE(mentions(e, "downloading images is not supported")) << e;
  e = error_of([&] { expand_sources(t / "imgs/*.md"); });
  EXPECT_TRUE(mentions(e, "no images or videos found")) << e;
  EXPECT_TRUE(mentions(error_of([] { expand_sources(""); }), "--source is empty"));
}
