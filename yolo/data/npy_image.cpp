#include "yolo/data/npy_image.h"

#include <cstring>
#include <filesystem>
#include <limits>
#include <opencv2/imgproc.hpp>
#include <regex>

#include "base/error.h"
#include "io/atomic_file.h"
#include "yolo/data/image_codec.h"

namespace kestrel::yolo::data {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, then the version's two bytes

std::string delete_advice(const std::string& path) {
  return str("; delete ", path, " (it is written again from its image)");
}

// The shape in an .npy header's dict, "(480, 640, 3)" -> {480, 640, 3}.
std::vector<int64_t> header_shape(const std::string& header, const std::string& path) {
  std::smatch m;
  KESTREL_CHECK(std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")), "'", path,
                "' is not an .npy array file (no shape in its header)", delete_advice(path));
  std::vector<int64_t> shape;
  const std::string dims = m[1];
  const std::regex number(R"(\d+)");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number); it != std::sregex_iterator(); ++it) {
    KESTREL_CHECK(it->str().size() <= 9, "'", path, "' declares an impossible shape (", dims, ")", delete_advice(path));
    shape.push_back(std::stoll(it->str()));
  }
  return shape;
}

}  // namespace

std::string npy_path_of(const std::string& image_path) {
  return fs::path(image_path).replace_extension(".npy").string();
}

void write_npy_image(const std::string& path, const cv::Mat& bgr) {
  KESTREL_CHECK(bgr.type() == CV_8UC3 && !bgr.empty(), "write_npy_image: '", path,
                "' needs a non-empty 8-bit 3-channel image");
  std::string header = str("{'descr': '|u1', 'fortran_order': False, 'shape': (", bgr.rows, ", ", bgr.cols, ", 3), }");
  const size_t unpadded = 10 + header.size() + 1;  // magic, version, length, dict, newline
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string bytes(kMagic, 6);
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  const size_t row = static_cast<size_t>(bgr.cols) * 3;
  for (int y = 0; y < bgr.rows; ++y) bytes.append(reinterpret_cast<const char*>(bgr.ptr<uint8_t>(y)), row);
  write_file_atomic(path, bytes);
}

cv::Mat read_npy_image(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  KESTREL_CHECK(bytes.size() >= 10 && std::memcmp(bytes.data(), kMagic, 6) == 0, "'", path,
                "' is not an .npy file", delete_advice(path));
  const int major = bytes[6];
  KESTREL_CHECK(major >= 1 && major <= 3, "'", path, "' is an .npy file of unknown version ", major, delete_advice(path));
  const size_t length_bytes = major == 1 ? 2 : 4;
  KESTREL_CHECK(bytes.size() >= 8 + length_bytes, "'", path, "' is cut short", delete_advice(path));
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= static_cast<size_t>(bytes[8 + i]) << (8 * i);
  const size_t data_at = 8 + length_bytes + header_len;
  KESTREL_CHECK(bytes.size() >= data_at, "'", path, "' is cut short in its header", delete_advice(path));
  const std::string header(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(length_bytes),
                           bytes.begin() + static_cast<std::ptrdiff_t>(data_at));
  KESTREL_CHECK(std::regex_search(header, std::regex(R"('descr'\s*:\s*'[|<>=]?u1')")), "'", path,
                "' does not hold 8-bit unsigned pixels (header ", header.substr(0, header.find('}') + 1), ")",
                delete_advice(path));
  KESTREL_CHECK(std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*False)")), "'", path,
                "' is in Fortran order; Kestrel reads the C order np.save writes", delete_advice(path));
  const std::vector<int64_t> shape = header_shape(header, path);
  KESTREL_CHECK((shape.size() == 3 && shape[2] == 3) || shape.size() == 2, "'", path,
                "' is not an image array (height, width, 3)", delete_advice(path));
  const int64_t h = shape[0], w = shape[1], c = shape.size() == 3 ? 3 : 1;
  KESTREL_CHECK(h > 0 && w > 0 && h * w <= kMaxImagePixels, "'", path, "' declares a ", w, "x", h, " image",
                delete_advice(path));
  KESTREL_CHECK(bytes.size() == data_at + static_cast<size_t>(h * w * c), "'", path, "' holds ", bytes.size() - data_at,
                " bytes of pixels, its shape needs ", h * w * c, delete_advice(path));
  cv::Mat image(static_cast<int>(h), static_cast<int>(w), c == 3 ? CV_8UC3 : CV_8UC1);
  std::memcpy(image.data, bytes.data() + data_at, static_cast<size_t>(h * w * c));
  if (c == 1) cv::cvtColor(image, image, cv::COLOR_GRAY2BGR);
  return image;
}

}  // namespace kestrel::yolo::data
