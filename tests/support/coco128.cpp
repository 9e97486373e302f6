#include "tests/support/coco128.h"

#include <algorithm>
#include <fstream>
#include <vector>

namespace kestrel::testing {

std::string scratch_coco128(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir / "images");
  fs::create_directories(dir / "labels");
  fs::create_directory_symlink(kCoco128 / "images/train2017", dir / "images/train2017");
  fs::copy(kCoco128 / "labels/train2017", dir / "labels/train2017", fs::copy_options::recursive);
  std::ifstream in(kCoco128 / "coco128.yaml");
  std::ofstream out(dir / "coco128.yaml");
  for (std::string line; std::getline(in, line);)
    out << (line.rfind("path:", 0) == 0 ? "path: " + dir.string() : line) << "\n";
  return (dir / "coco128.yaml").string();
}

std::string scratch_coco128_seg(const std::filesystem::path& dir, int images) {
  namespace fs = std::filesystem;
  const fs::path labels = kCoco128Seg / "labels/train2017";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(labels))
    if (e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  files.resize(std::min<size_t>(files.size(), static_cast<size_t>(images)));
  fs::create_directories(dir / "images/train2017");
  fs::create_directories(dir / "labels/train2017");
  for (const fs::path& f : files) {
    const std::string image = f.stem().string() + ".jpg";
    fs::create_symlink(kCoco128Seg / "images/train2017" / image, dir / "images/train2017" / image);
    fs::copy_file(f, dir / "labels/train2017" / f.filename());
  }
  std::ifstream in(kCoco128Seg / "coco128-seg.yaml");
  std::ofstream out(dir / "seg.yaml");
  for (std::string line; std::getline(in, line);)
    out << (line.rfind("path:", 0) == 0 ? "path: " + dir.string() : line) << "\n";
  return (dir / "seg.yaml").string();
}

}  // namespace kestrel::testing
