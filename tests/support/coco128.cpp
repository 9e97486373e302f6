#include "tests/support/coco128.h"

#include <fstream>

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

}  // namespace kestrel::testing
