#include "yolo/data/image_codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <system_error>

#include "base/error.h"
#include "io/atomic_file.h"

namespace kestrel::yolo::data {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

ImageFormat sniff(const std::vector<uint8_t>& b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::Jpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), kPngSignature, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

uint16_t read16(const uint8_t* p, bool little) {
  return little ? static_cast<uint16_t>(p[0] | p[1] << 8) : static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint32_t read32(const uint8_t* p, bool little) {
  return little ? (p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24)
                : (static_cast<uint32_t>(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]);
}

struct TjHandle {
  tjhandle h;
  explicit TjHandle(bool compress) : h(compress ? tjInitCompress() : tjInitDecompress()) {}
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

bool orientation_swaps_sides(int o) { return o >= 5 && o <= 8; }

cv::Mat new_image(int rows, int cols, int type, PixelBuffer* into) {
  return into ? into->image(rows, cols, type) : cv::Mat(rows, cols, type);
}

// libpng's simplified API: errors come back as return values (no longjmp through our frames).
cv::Mat decode_png(const std::vector<uint8_t>& bytes, const std::string& path, bool header_only,
                   ImageInfo* info, PixelBuffer* into = nullptr) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  KESTREL_CHECK(png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()),
                "corrupt PNG '", path, "': ", image.message);
  if (info) {
    info->width = static_cast<int>(image.width);
    info->height = static_cast<int>(image.height);
  }
  if (header_only) {
    png_image_free(&image);
    return {};
  }
  image.format = PNG_FORMAT_BGR;  // grey, palette, 16-bit and alpha all come out as 8-bit BGR
  cv::Mat out = new_image(static_cast<int>(image.height), static_cast<int>(image.width), CV_8UC3, into);
  KESTREL_CHECK(png_image_finish_read(&image, nullptr, out.data, 0, nullptr), "corrupt PNG '",
                path, "': ", image.message);
  return out;
}

// Whether entropy-coded data follows the first start-of-scan header. A file that ends there (or
// whose next marker is the end of image) holds no pixel at all: libjpeg-turbo would "recover" it
// as an all-grey picture, and PIL, whose restore the reference relies on, refuses it as
// truncated. Marker chains this walk cannot follow are left to the decoder to judge.
bool jpeg_has_scan_data(const std::vector<uint8_t>& b) {
  size_t p = 2;  // after SOI
  while (p + 1 < b.size() && b[p] == 0xFF) {
    const uint8_t marker = b[p + 1];
    if (marker == 0xFF) {  // fill byte before a marker
      ++p;
      continue;
    }
    if (marker == 0xD9) return false;  // end of image before any scan
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // markers without a length
      p += 2;
      continue;
    }
    if (p + 4 > b.size()) return true;
    const size_t data = p + 2 + (static_cast<size_t>(b[p + 2]) << 8 | b[p + 3]);
    if (marker == 0xDA)  // data, unless only the end-of-image marker (or its first byte) is left
      return data < b.size() && !(b[data] == 0xFF && (data + 1 == b.size() || b[data + 1] == 0xD9));
    p = data;
  }
  return true;
}

// OpenCV's imread (the reference's loader) converts 4-channel JPEGs with the Adobe convention,
// in which libjpeg hands out inverted inks (255 = none): each of R, G, B is
// k - ((255 - ink) * k >> 8), with its integer shift rather than a division by 255.
void cmyk_to_bgr(const cv::Mat& cmyk, cv::Mat& bgr) {
  for (int y = 0; y < cmyk.rows; ++y) {
    const uint8_t* in = cmyk.ptr<uint8_t>(y);
    uint8_t* out = bgr.ptr<uint8_t>(y);
    for (int x = 0; x < cmyk.cols; ++x, in += 4, out += 3) {
      const int k = in[3];
      for (int c = 0; c < 3; ++c) out[2 - c] = static_cast<uint8_t>(k - ((255 - in[c]) * k >> 8));
    }
  }
}

cv::Mat decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& path,
                    const ImageInfo& info, std::string* warning, PixelBuffer* into) {
  KESTREL_CHECK(jpeg_has_scan_data(bytes), "corrupt JPEG '", path,
                "': the file ends right after its start-of-scan header, with no image data ",
                "to restore; replace the file or remove it from the dataset");
  TjHandle tj(false);
  int header_w = 0, header_h = 0, subsampling = 0, colorspace = 0;
  KESTREL_CHECK(tjDecompressHeader3(tj.h, bytes.data(), bytes.size(), &header_w, &header_h,
                                    &subsampling, &colorspace) == 0,
                "corrupt JPEG '", path, "': ", tjGetErrorStr2(tj.h));
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const bool swapped = orientation_swaps_sides(info.exif_orientation);
  const int w = swapped ? info.height : info.width, h = swapped ? info.width : info.height;
  cv::Mat image = new_image(h, w, CV_8UC3, into);
  cv::Mat decoded = cmyk ? cv::Mat(h, w, CV_8UC4) : image;
  const int rc = tjDecompress2(tj.h, bytes.data(), bytes.size(), decoded.data, w, 0, h,
                               cmyk ? TJPF_CMYK : TJPF_BGR, TJFLAG_ACCURATEDCT);
  // libjpeg-turbo reports damage it recovers from (premature end of data, stray bytes) as a
  // warning: what could not be decoded is grey and the image is usable.
  const bool recovered = rc != 0 && tjGetErrorCode(tj.h) == TJERR_WARNING;
  KESTREL_CHECK(rc == 0 || recovered, "corrupt JPEG '", path, "': ", tjGetErrorStr2(tj.h));
  if (recovered && warning) *warning = tjGetErrorStr2(tj.h);
  if (cmyk) cmyk_to_bgr(decoded, image);
  return apply_exif_orientation(image, info.exif_orientation);
}

std::string out_of_memory(const std::string& path, const ImageInfo& info) {
  return str("not enough memory to decode '", path, "' (", info.width, "x", info.height,
             " pixels); free memory, use fewer --workers, or downscale the image");
}

// Why a file could not be opened: the system's reason, and where a symbolic link points (a
// dangling link or a loop otherwise reads as a file that is there but will not open).
std::string open_failure(const std::string& path, int err) {
  std::string why = err != 0 ? std::generic_category().message(err) : "it cannot be opened";
  std::error_code ec;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec)))
    why += str(" (a symbolic link to '", std::filesystem::read_symlink(path, ec).string(), "')");
  return why;
}

}  // namespace

cv::Mat PixelBuffer::image(int rows, int cols, int type) {
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols) * CV_ELEM_SIZE(type);
  if (bytes > kMaxKeptBytes) return cv::Mat(rows, cols, type);
  if (bytes > capacity_) {
    data_.reset();  // the old block goes first: at most one block per buffer at any time
    capacity_ = 0;
    data_.reset(new uint8_t[bytes]);
    capacity_ = bytes;
    ++allocations_;
  }
  return cv::Mat(rows, cols, type, data_.get());
}

void PixelBuffer::swap(PixelBuffer& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(capacity_, other.capacity_);
  std::swap(allocations_, other.allocations_);
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::vector<uint8_t> bytes;
  read_file_bytes(path, bytes);
  return bytes;
}

void read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes) {
  errno = 0;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  KESTREL_CHECK(in, "cannot read '", path, "': ", open_failure(path, errno),
                "; check the path and permissions");
  const std::streamsize n = in.tellg();
  try {
    bytes.resize(static_cast<size_t>(std::max<std::streamsize>(n, 0)));
  } catch (const std::bad_alloc&) {
    KESTREL_FAIL("not enough memory to read '", path, "' (", n, " bytes)");
  }
  in.seekg(0);
  if (n > 0) in.read(reinterpret_cast<char*>(bytes.data()), n);
  KESTREL_CHECK(in.good() || n == 0, "reading '", path, "' failed");
}

bool jpeg_structure_intact(const std::vector<uint8_t>& b) {
  if (sniff(b) != ImageFormat::Jpeg) return false;
  const size_t n = b.size();
  size_t p = 2;  // after SOI
  bool scan_data = false;
  while (p + 1 < n) {
    if (b[p] != 0xFF) return false;  // a marker must follow each segment
    const uint8_t marker = b[p + 1];
    if (marker == 0xFF) {  // fill byte before a marker
      ++p;
      continue;
    }
    if (marker == 0xD9) return scan_data;
    if (marker == 0x00 || marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7))
      return false;  // outside entropy-coded data none of these belongs between segments
    if (p + 4 > n) return false;
    const size_t length = static_cast<size_t>(b[p + 2]) << 8 | b[p + 3];
    if (length < 2 || p + 2 + length > n) return false;
    p += 2 + length;
    if (marker != 0xDA) continue;
    // Entropy-coded data: it runs to the next 0xFF that is neither a stuffed zero nor a restart
    // marker (fill bytes 0xFF 0xFF may precede a marker).
    const size_t start = p;
    for (;;) {
      const void* ff = std::memchr(b.data() + p, 0xFF, n - p);
      if (!ff) return false;  // cut inside the data
      p = static_cast<size_t>(static_cast<const uint8_t*>(ff) - b.data());
      size_t q = p + 1;
      while (q < n && b[q] == 0xFF) ++q;
      if (q >= n) return false;
      if (b[q] == 0x00 || (b[q] >= 0xD0 && b[q] <= 0xD7)) {
        p = q + 1;
        continue;
      }
      if (p > start) scan_data = true;
      p = q - 1;  // the marker's 0xFF
      break;
    }
  }
  return false;  // no end-of-image marker
}

int jpeg_exif_orientation(const std::vector<uint8_t>& b) {
  size_t p = 2;  // after SOI
  while (p + 4 <= b.size() && b[p] == 0xFF) {
    const uint8_t marker = b[p + 1];
    if (marker == 0xDA || marker == 0xD9) break;  // image data starts: no EXIF before it
    const size_t len = static_cast<size_t>(b[p + 2]) << 8 | b[p + 3];
    if (len < 2 || p + 2 + len > b.size()) break;
    const uint8_t* seg = b.data() + p + 4;
    const size_t seg_len = len - 2;
    if (marker == 0xE1 && seg_len >= 14 && std::memcmp(seg, "Exif\0\0", 6) == 0) {
      const uint8_t* tiff = seg + 6;
      const size_t tiff_len = seg_len - 6;
      const bool little = tiff[0] == 'I' && tiff[1] == 'I';
      if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
      // In size_t: an offset near 2^32 must not wrap past the check (fuzz/corpus/image_header/
      // regress-exif-ifd-offset-wraps.jpg read 4 GB beyond the segment).
      const size_t ifd = read32(tiff + 4, little);
      if (ifd > tiff_len || tiff_len - ifd < 2) return 1;
      const uint16_t entries = read16(tiff + ifd, little);
      for (uint16_t e = 0; e < entries; ++e) {
        const size_t at = ifd + 2 + 12 * static_cast<size_t>(e);
        if (at + 12 > tiff_len) return 1;
        if (read16(tiff + at, little) == 0x0112) {
          const uint16_t v = read16(tiff + at + 8, little);
          return v >= 1 && v <= 8 ? v : 1;
        }
      }
      return 1;
    }
    p += 2 + len;
  }
  return 1;
}

cv::Mat apply_exif_orientation(const cv::Mat& image, int o) {
  cv::Mat out;
  switch (o) {
    case 2: cv::flip(image, out, 1); break;
    case 3: cv::rotate(image, out, cv::ROTATE_180); break;
    case 4: cv::flip(image, out, 0); break;
    case 5: cv::transpose(image, out); break;
    case 6: cv::rotate(image, out, cv::ROTATE_90_CLOCKWISE); break;
    case 7: cv::transpose(image, out); cv::rotate(out, out, cv::ROTATE_180); break;
    case 8: cv::rotate(image, out, cv::ROTATE_90_COUNTERCLOCKWISE); break;
    default: out = image;
  }
  return out;
}

ImageInfo probe_image(const std::vector<uint8_t>& bytes, const std::string& path) {
  KESTREL_CHECK(!bytes.empty(), "'", path, "' is an empty file");
  ImageInfo info;
  info.format = sniff(bytes);
  if (info.format == ImageFormat::Jpeg) {
    TjHandle tj(false);
    int w = 0, h = 0, sub = 0, cs = 0;
    KESTREL_CHECK(tjDecompressHeader3(tj.h, bytes.data(), bytes.size(), &w, &h, &sub, &cs) == 0,
                  "corrupt JPEG '", path, "': ", tjGetErrorStr2(tj.h));
    info.exif_orientation = jpeg_exif_orientation(bytes);
    info.width = orientation_swaps_sides(info.exif_orientation) ? h : w;
    info.height = orientation_swaps_sides(info.exif_orientation) ? w : h;
  } else if (info.format == ImageFormat::Png) {
    decode_png(bytes, path, true, &info);
  } else {
    KESTREL_FAIL("'", path, "' is not a JPEG or PNG image; Kestrel reads those two formats ",
                 "(convert others, e.g. with `convert in.tif out.png`)");
  }
  const int64_t pixels = static_cast<int64_t>(info.width) * info.height;
  KESTREL_CHECK(pixels <= kMaxImagePixels, "corrupt image '", path, "': its header declares ",
                info.width, "x", info.height, " = ", pixels, " pixels, above the limit of ",
                kMaxImagePixels, " (PIL's decompression-bomb guard, as the reference); ",
                "downscale the image or remove it from the dataset");
  return info;
}

cv::Mat decode_image(const std::vector<uint8_t>& bytes, const std::string& path,
                     std::string* warning, PixelBuffer* into) {
  if (warning) warning->clear();
  const ImageInfo info = probe_image(bytes, path);
  try {
    if (info.format == ImageFormat::Png) return decode_png(bytes, path, false, nullptr, into);
    return decode_jpeg(bytes, path, info, warning, into);
  } catch (const std::bad_alloc&) {
    KESTREL_FAIL(out_of_memory(path, info));
  } catch (const cv::Exception& e) {
    if (e.code == cv::Error::StsNoMem) KESTREL_FAIL(out_of_memory(path, info));  // cv::Mat's
    throw;
  }
}

cv::Mat read_image(const std::string& path, std::string* warning) {
  return decode_image(read_file_bytes(path), path, warning);
}

cv::Mat read_image(const std::string& path, std::vector<uint8_t>& file, PixelBuffer& into) {
  read_file_bytes(path, file);
  return decode_image(file, path, nullptr, &into);
}

void write_jpeg(const std::string& path, const cv::Mat& bgr, int quality, bool full_chroma) {
  KESTREL_CHECK(bgr.type() == CV_8UC3 && !bgr.empty(), "write_jpeg: '", path,
                "' needs a non-empty 8-bit 3-channel image");
  cv::Mat img = bgr.isContinuous() ? bgr : bgr.clone();
  TjHandle tj(true);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj.h, img.data, img.cols, 0, img.rows, TJPF_BGR, &out, &size,
                             full_chroma ? TJSAMP_444 : TJSAMP_420, quality, TJFLAG_ACCURATEDCT);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(out, tjFree);
  KESTREL_CHECK(rc == 0, "JPEG encoding of '", path, "' failed: ", tjGetErrorStr2(tj.h));
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(out), size));
}

void write_png(const std::string& path, const cv::Mat& bgr) {
  KESTREL_CHECK(bgr.type() == CV_8UC3 && !bgr.empty(), "write_png: '", path,
                "' needs a non-empty 8-bit 3-channel image");
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(bgr.cols);
  image.height = static_cast<png_uint_32>(bgr.rows);
  image.format = PNG_FORMAT_BGR;
  png_alloc_size_t size = 0;
  cv::Mat img = bgr.isContinuous() ? bgr : bgr.clone();
  KESTREL_CHECK(png_image_write_get_memory_size(image, size, 0, img.data, 0, nullptr),
                "PNG encoding of '", path, "' failed: ", image.message);
  std::vector<uint8_t> buffer(size);
  KESTREL_CHECK(png_image_write_to_memory(&image, buffer.data(), &size, 0, img.data, 0, nullptr),
                "PNG encoding of '", path, "' failed: ", image.message);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(buffer.data()), size));
}

std::string write_image(const std::string& path, const cv::Mat& bgr) {
  std::filesystem::path p(path);
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".png") {
    write_png(path, bgr);
    return path;
  }
  if (ext != ".jpg" && ext != ".jpeg") p.replace_extension(".jpg");
  write_jpeg(p.string(), bgr, 95);
  return p.string();
}

}  // namespace kestrel::yolo::data
