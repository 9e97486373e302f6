// The CLI's download helpers: sizes and the progress line in tqdm's byte layout, the mirror's
// addresses, and the settings read from the environment (a bad timeout refused by name).
#include "yolo/common/download.h"

#include <cstdlib>

#include "tests/support/testing.h"

namespace {

using kestrel::testing::error_of;
using kestrel::yolo::DownloadSettings;

TEST(Download, SizesScaleInBinaryStepsWithThreeDigits) {
  EXPECT_EQ(kestrel::yolo::format_size(0), "0.00");
  EXPECT_EQ(kestrel::yolo::format_size(812), "812");
  EXPECT_EQ(kestrel::yolo::format_size(1000), "0.98k");
  EXPECT_EQ(kestrel::yolo::format_size(3.87 * 1024 * 1024), "3.87M");
  EXPECT_EQ(kestrel::yolo::format_size(14.1 * 1024 * 1024), "14.1M");
  EXPECT_EQ(kestrel::yolo::format_size(181.0 * 1024 * 1024 * 1024), "181G");
}

TEST(Download, TheProgressLineShowsBytesTimesAndRate) {
  const uint64_t mb = 1024 * 1024;
  EXPECT_EQ(kestrel::yolo::format_download_bar(2 * mb, 4 * mb, 2.0), " 50%|█████     | 2.00M/4.00M 00:02<00:02, 1.00MB/s");
  EXPECT_EQ(kestrel::yolo::format_download_bar(4 * mb, 4 * mb, 4.0), "100%|██████████| 4.00M/4.00M 00:04<00:00, 1.00MB/s");
  EXPECT_EQ(kestrel::yolo::format_download_bar(0, 4 * mb, 0.0), "  0%|          | 0.00/4.00M 00:00<?");
  // No Content-Length: bytes, time and rate only.
  EXPECT_EQ(kestrel::yolo::format_download_bar(3 * mb, 0, 3.0), "3.00MB 00:03, 1.00MB/s");
}

TEST(Download, AMirrorServesFilesByName) {
  DownloadSettings s;
  const std::string url = "https://github.com/ultralytics/yolov5/releases/download/v7.0/yolov5s.pt";
  EXPECT_EQ(kestrel::yolo::mirrored_url(url, s), url);
  s.mirror = "http://127.0.0.1:8000/mirror";
  EXPECT_EQ(kestrel::yolo::mirrored_url(url, s), "http://127.0.0.1:8000/mirror/yolov5s.pt");
  EXPECT_EQ(kestrel::yolo::mirrored_url("https://ultralytics.com/assets/coco128.zip?raw=1", s),
            "http://127.0.0.1:8000/mirror/coco128.zip");
  EXPECT_EQ(kestrel::yolo::url_file_name("https://a.b/c/d.zip#frag"), "d.zip");
}

TEST(Download, SettingsComeFromTheEnvironment) {
  ::setenv("KESTREL_DOWNLOAD_MIRROR", "http://127.0.0.1:9/m//", 1);
  ::setenv("KESTREL_DOWNLOAD_TIMEOUT", "2.5", 1);
  DownloadSettings s = kestrel::yolo::download_settings();
  EXPECT_EQ(s.mirror, "http://127.0.0.1:9/m");
  EXPECT_EQ(s.stall_seconds, 2.5);
  ::setenv("KESTREL_DOWNLOAD_TIMEOUT", "soon", 1);
  const std::string e = error_of([] { kestrel::yolo::download_settings(); });
  EXPECT_NE(e.find("KESTREL_DOWNLOAD_TIMEOUT='soon'"), std::string::npos) << e;
  ::unsetenv("KESTREL_DOWNLOAD_MIRROR");
  ::unsetenv("KESTREL_DOWNLOAD_TIMEOUT");
  s = kestrel::yolo::download_settings();
  EXPECT_EQ(s.mirror, "");
  EXPECT_EQ(s.stall_seconds, 30);
}

}  // namespace
