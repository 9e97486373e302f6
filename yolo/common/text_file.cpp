#include "yolo/common/text_file.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace kestrel::yolo {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  KESTREL_CHECK(in, "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kestrel::yolo
