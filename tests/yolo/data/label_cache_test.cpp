// The label cache: round trip, staleness (changed, added or removed files, another class limit,
// another format version), damage (flipped byte, truncation, garbage) detected and rebuilt, and
// a cache that cannot be written only warns.
#include "yolo/data/label_cache.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tests/support/testing.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/image_codec.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
namespace fs = std::filesystem;

namespace {

// A dataset of 4 images in images/train (one without labels) and its yaml.
struct Dataset {
  fs::path root;
  explicit Dataset(const std::string& name)
      : root(fs::temp_directory_path() / ("kestrel_cache_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(root);
    fs::create_directories(root / "images" / "train");
    fs::create_directories(root / "labels" / "train");
    for (int i = 0; i < 4; ++i) {
      write_jpeg(image(i), cv::Mat(24 + i, 32, CV_8UC3, cv::Scalar(20 * i, 100, 200)));
      if (i != 3) write(label(i), "0 0.5 0.5 0.25 0.25\n1 0.2 0.3 0.1 0.1\n");
    }
    write((root / "data.yaml").string(), "path: .\ntrain: images/train\nval: images/train\nnames: [a, b]\n");
  }
  ~Dataset() { fs::remove_all(root); }
  std::string image(int i) const { return (root / "images" / "train" / (std::to_string(i) + ".jpg")).string(); }
  std::string label(int i) const { return (root / "labels" / "train" / (std::to_string(i) + ".txt")).string(); }
  std::string cache() const { return (root / "labels" / "train.kestrel.cache").string(); }
  std::vector<std::string> images() const { return {image(0), image(1), image(2), image(3)}; }
  DatasetConfig config() const { return load_dataset_config((root / "data.yaml").string()); }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool any_mentions(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(LabelCache, PathFollowsTheReference) {
  Dataset d("path");
  EXPECT_EQ(label_cache_path({(d.root / "images" / "train").string()}, d.images()), d.cache());
  const std::string list = (d.root / "train.txt").string();
  Dataset::write(list, "./images/train/0.jpg\n");
  EXPECT_EQ(label_cache_path({list}, {d.image(0)}), (d.root / "train.kestrel.cache").string());
}

TEST(LabelCache, RoundTripKeepsRecordsCountsAndWarnings) {
  Dataset d("roundtrip");
  ThreadPool pool(2);
  ScanResult scan = scan_images(d.images(), 2, pool);
  scan.warnings.push_back("WARNING: something to remember");
  const uint64_t hash = label_files_hash(d.images(), 2);
  ASSERT_EQ(write_label_cache(d.cache(), hash, scan), "");
  const CacheRead back = read_label_cache(d.cache(), hash, 2);
  ASSERT_EQ(back.state, CacheState::Loaded) << back.problem;
  EXPECT_EQ(back.scan.counts, scan.counts);
  EXPECT_EQ(back.scan.warnings, scan.warnings);
  ASSERT_EQ(back.scan.records.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(back.scan.records[i].image_path, scan.records[i].image_path);
    EXPECT_EQ(back.scan.records[i].width, 32);
    EXPECT_EQ(back.scan.records[i].height, 24 + static_cast<int>(i));
    EXPECT_EQ(back.scan.records[i].boxes, scan.records[i].boxes);
  }
  EXPECT_EQ(read_label_cache(d.cache() + ".absent", hash, 2).state, CacheState::Missing);
  EXPECT_EQ(read_label_cache(d.cache(), hash + 1, 2).state, CacheState::Stale);
}

TEST(LabelCache, HashSeesEveryChangeToTheFiles) {
  Dataset d("hash");
  const uint64_t h0 = label_files_hash(d.images(), 2);
  EXPECT_EQ(label_files_hash(d.images(), 2), h0);
  EXPECT_NE(label_files_hash(d.images(), 3), h0);  // checked against another nc
  EXPECT_NE(label_files_hash({d.image(0), d.image(1), d.image(2)}, 2), h0);

  Dataset::write(d.label(3), "0 0.5 0.5 0.5 0.5\n");  // a background gains labels
  const uint64_t h1 = label_files_hash(d.images(), 2);
  EXPECT_NE(h1, h0);
  // Same size, new content: only the modification time tells.
  Dataset::write(d.label(3), "1 0.5 0.5 0.5 0.5\n");
  fs::last_write_time(d.label(3), fs::last_write_time(d.label(3)) + std::chrono::seconds(5));
  EXPECT_NE(label_files_hash(d.images(), 2), h1);
}

TEST(LabelCache, DamageIsDetectedNeverTrusted) {
  Dataset d("damage");
  ThreadPool pool(1);
  const ScanResult scan = scan_images(d.images(), 2, pool);
  const uint64_t hash = label_files_hash(d.images(), 2);
  ASSERT_EQ(write_label_cache(d.cache(), hash, scan), "");
  const std::string good = read_all(d.cache());

  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;  // inside the payload: a box value or a path byte
  Dataset::write(d.cache(), flipped);
  CacheRead r = read_label_cache(d.cache(), hash, 2);
  EXPECT_EQ(r.state, CacheState::Corrupt);
  EXPECT_NE(r.problem.find("checksum"), std::string::npos) << r.problem;
  EXPECT_TRUE(r.scan.records.empty());

  Dataset::write(d.cache(), good.substr(0, good.size() - 9));
  EXPECT_EQ(read_label_cache(d.cache(), hash, 2).state, CacheState::Corrupt);
  Dataset::write(d.cache(), "\x93NUMPY garbage from another program");
  EXPECT_EQ(read_label_cache(d.cache(), hash, 2).state, CacheState::Corrupt);

  std::string other_version = good;
  other_version[8] = static_cast<char>(kLabelCacheVersion + 1);  // the version follows the magic
  Dataset::write(d.cache(), other_version);
  EXPECT_EQ(read_label_cache(d.cache(), hash, 2).state, CacheState::Stale);
}

// A checksum only tells damage from chance: contents no scan produces (here from a crafted file)
// are refused all the same, so the loader never sees a class past nc or a box off its image.
TEST(LabelCache, ImpossibleContentsAreNeverTrusted) {
  ScanResult scan;
  scan.counts = {1, 0, 0, 0, 1};
  scan.records.push_back({"/d/images/a.jpg", 40, 30, {{1, 0.5f, 0.5f, 0.2f, 0.2f}}});
  ASSERT_EQ(decode_label_cache(encode_label_cache(7, scan), 7, 2).state, CacheState::Loaded);
  const auto refusal = [](const ScanResult& s) {
    const CacheRead r = decode_label_cache(encode_label_cache(7, s), 7, 2);
    EXPECT_EQ(r.state, CacheState::Corrupt);
    EXPECT_TRUE(r.scan.records.empty());
    return r.problem;
  };
  ScanResult bad = scan;
  bad.records[0].boxes[0].cls = 5;
  EXPECT_NE(refusal(bad).find("'/d/images/a.jpg': class 5 outside [0, 2)"), std::string::npos);
  bad = scan;
  bad.records[0].boxes[0].w = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(refusal(bad).find("is not normalised"), std::string::npos);
  bad = scan;
  bad.records[0].width = 5;
  EXPECT_NE(refusal(bad).find("image size 5x30"), std::string::npos);
  bad = scan;
  bad.counts.found = -1;
  EXPECT_NE(refusal(bad).find("a count outside"), std::string::npos);
  EXPECT_EQ(decode_label_cache(encode_label_cache(7, scan), 7, 1).state, CacheState::Corrupt);
  EXPECT_EQ(decode_label_cache(encode_label_cache(7, scan), 7, 0).state, CacheState::Loaded);
}

TEST(LoadSplit, UsesTheCacheUntilAFileChanges) {
  Dataset d("loadsplit");
  const DatasetConfig cfg = d.config();
  const DatasetSplit first = load_split(cfg, "train", 2, false, true, 2);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.cache_path, d.cache());
  EXPECT_TRUE(fs::exists(d.cache()));
  EXPECT_EQ(first.counts, (ScanCounts{3, 1, 0, 0, 4}));
  EXPECT_EQ(first.summary, "Scanning '" + (d.root / "labels" / "train").string() +
                               "'... 3 images, 1 backgrounds, 0 corrupt");

  const DatasetSplit second = load_split(cfg, "train", 2, false, true, 2);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.counts, first.counts);
  ASSERT_EQ(second.records.size(), 4u);
  EXPECT_EQ(second.records[0].boxes, first.records[0].boxes);

  // A label file grows a row: the cache is stale and the new row is read.
  Dataset::write(d.label(0), "0 0.5 0.5 0.25 0.25\n1 0.2 0.3 0.1 0.1\n1 0.7 0.7 0.1 0.1\n");
  const DatasetSplit third = load_split(cfg, "train", 2, false, true, 2);
  EXPECT_FALSE(third.from_cache);
  EXPECT_EQ(third.records[0].boxes.size(), 3u);
  EXPECT_TRUE(load_split(cfg, "train", 2, false, true, 2).from_cache);

  // Single-class runs check classes differently, so they have their own cache contents.
  const DatasetSplit single = load_split(cfg, "train", 1, true, true, 2);
  EXPECT_FALSE(single.from_cache);
  for (const ImageRecord& r : single.records)
    for (const LabelBox& b : r.boxes) EXPECT_EQ(b.cls, 0);
}

TEST(LoadSplit, DamagedCacheIsRebuiltWithAWarning) {
  Dataset d("rebuild");
  const DatasetConfig cfg = d.config();
  load_split(cfg, "train", 2, false, true, 1);
  std::string bytes = read_all(d.cache());
  bytes[bytes.size() - 3] ^= 0x01;  // the checksum itself
  Dataset::write(d.cache(), bytes);
  const DatasetSplit s = load_split(cfg, "train", 2, false, true, 1);
  EXPECT_FALSE(s.from_cache);
  EXPECT_TRUE(any_mentions(s.warnings, "label cache " + d.cache() + " is damaged"));
  EXPECT_EQ(s.records.size(), 4u);
  EXPECT_TRUE(load_split(cfg, "train", 2, false, true, 1).from_cache);  // rewritten whole
}

TEST(LoadSplit, UnwritableCacheOnlyWarns) {
  Dataset d("readonly");
  // A folder where the cache file should go makes the final rename fail even for root (tests may
  // run as root, for whom a read-only folder is no obstacle).
  fs::create_directories(d.cache());
  const DatasetSplit s = load_split(d.config(), "train", 2, false, true, 1);
  EXPECT_EQ(s.records.size(), 4u);
  EXPECT_TRUE(any_mentions(s.warnings, "is not writeable")) << (s.warnings.empty() ? "" : s.warnings[0]);
  EXPECT_FALSE(any_mentions(s.warnings, "damaged"));
  EXPECT_TRUE(kestrel::testing::temporaries_of(d.cache()).empty());  // cleaned up

  fs::remove_all(d.cache());
  const DatasetSplit off = load_split(d.config(), "train", 2, false, false, 1);
  EXPECT_FALSE(fs::exists(d.cache()));  // use_cache = false neither reads nor writes
  EXPECT_TRUE(off.warnings.empty());
}
