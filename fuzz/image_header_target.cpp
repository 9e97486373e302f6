// An image is refused with kestrel::Error from its header, or probed to a size within PIL's
// pixel limit; small ones are then decoded in full and must come out at the probed size.
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz/targets.h"
#include "yolo/data/image_codec.h"

namespace kestrel::fuzz {
namespace {

// Decoding larger images would spend the fuzzer's time in libjpeg-turbo and libpng, which are
// fuzzed upstream; the headers, the EXIF walk and the size agreement are ours.
constexpr int64_t kMaxDecodedPixels = 1 << 16;

}  // namespace

void image_header(std::string_view input) {
  using namespace yolo::data;
  const std::vector<uint8_t> bytes(input.begin(), input.end());
  ImageInfo info;
  try {
    info = probe_image(bytes, "fuzz.img");
  } catch (const Error&) {
    return;
  }
  require(info.format != ImageFormat::Unknown, "an unknown format was probed");
  require(info.exif_orientation >= 1 && info.exif_orientation <= 8, "an orientation outside 1..8");
  const int64_t pixels = static_cast<int64_t>(info.width) * info.height;
  require(info.width >= 0 && info.height >= 0 && pixels <= kMaxImagePixels,
          "a size beyond the pixel limit was probed");
  if (pixels > kMaxDecodedPixels) return;
  cv::Mat image;
  std::string warning;
  try {
    image = decode_image(bytes, "fuzz.img", &warning);
  } catch (const Error&) {
    return;
  }
  require(image.cols == info.width && image.rows == info.height && image.type() == CV_8UC3,
          "the decoded image differs from the probed size");
}

}  // namespace kestrel::fuzz
