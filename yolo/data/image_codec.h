// Image files in and out, without OpenCV's imgcodecs (whose dependency closure, GDAL and all,
// is ~200 MB and would not fit the relocatable bundle): JPEG through libjpeg-turbo, PNG through
// libpng. Decoded images are 8-bit BGR cv::Mat (OpenCV core is the container), with the EXIF
// orientation applied as the reference's cv2.imread does.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kestrel::yolo::data {

enum class ImageFormat { Jpeg, Png, Unknown };

struct ImageInfo {
  ImageFormat format = ImageFormat::Unknown;
  int width = 0, height = 0;  // after the EXIF orientation
  int exif_orientation = 1;   // 1..8
};

// PIL's Image.MAX_IMAGE_PIXELS, the reference's decompression-bomb guard: an image declaring
// more pixels is refused from its header, before any pixel memory is allocated.
constexpr int64_t kMaxImagePixels = 89'478'485;

// Reads a whole file; throws kestrel::Error naming the path when it cannot.
std::vector<uint8_t> read_file_bytes(const std::string& path);
// The same into `bytes`, whose capacity is kept (resized to the file's length).
void read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes);

// Header-level checks and size, without decoding pixels. Throws kestrel::Error (naming `path`)
// for empty files, unsupported formats, unreadable headers and more than kMaxImagePixels.
ImageInfo probe_image(const std::vector<uint8_t>& bytes, const std::string& path);

// Memory a loader thread keeps for the images it decodes or resizes: it grows to the largest
// image asked of it and is never shrunk, so that a steady stream of images of similar sizes makes
// no new pages (glibc otherwise hands large freed blocks back to the kernel, and each fresh image
// faults its pages in again). An image above kMaxKeptBytes gets memory of its own instead, so a
// thread keeps at most that much per buffer.
class PixelBuffer {
 public:
  static constexpr size_t kMaxKeptBytes = size_t{32} << 20;

  // A rows x cols image of `type` over this buffer's memory (valid until the next call, which may
  // reuse or replace it), or a cv::Mat owning its memory when it needs more than kMaxKeptBytes.
  cv::Mat image(int rows, int cols, int type);
  size_t capacity() const { return capacity_; }
  // How often the buffer took new memory (its first use included).
  int64_t allocations() const { return allocations_; }
  void swap(PixelBuffer& other) noexcept;

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
  int64_t allocations_ = 0;
};

// Full decode to BGR, orientation applied. Throws kestrel::Error naming `path` on corrupt data
// and when the pixels do not fit in memory. Damage the decoder recovers from is no error: a JPEG
// cut short (or missing its end marker) decodes what it holds, the rest grey, as the reference
// restores it; the decoder's message then goes to *warning (when given), else it stays empty.
// A JPEG that ends at its start-of-scan header holds nothing to restore and is refused. Bytes
// after a JPEG's end-of-image marker are ignored. CMYK JPEGs come out as OpenCV converts them.
// With `into`, the pixels go to that buffer's memory (the result is a view of it) unless the
// EXIF orientation or a CMYK conversion makes another image.
cv::Mat decode_image(const std::vector<uint8_t>& bytes, const std::string& path,
                     std::string* warning = nullptr, PixelBuffer* into = nullptr);
cv::Mat read_image(const std::string& path, std::string* warning = nullptr);
// The same into reused memory: the file's bytes go to *file (its capacity kept).
cv::Mat read_image(const std::string& path, std::vector<uint8_t>& file, PixelBuffer& into);

// BGR 8-bit, 3 channels. JPEG quality 1..100; chroma at half resolution (4:2:0, as OpenCV writes)
// unless full_chroma (4:4:4, as PIL's subsampling=0). Written atomically (io/atomic_file.h).
void write_jpeg(const std::string& path, const cv::Mat& bgr, int quality = 95,
                bool full_chroma = false);
void write_png(const std::string& path, const cv::Mat& bgr);
// An annotated image under `path`'s name: PNG for .png, JPEG (quality 95) for .jpg/.jpeg, and
// other formats as JPEG with the extension replaced by .jpg. Returns the path written.
std::string write_image(const std::string& path, const cv::Mat& bgr);

// Whether a JPEG's marker chain is whole: from its start-of-image marker, every segment's length
// stays inside the file, at least one scan holds entropy-coded data, and the chain reaches the
// end-of-image marker (bytes after it are ignored, as the decoder ignores them). Reads only the
// markers, no pixel: a file for which this holds and probe_image succeeds decodes without the
// truncation a cut download leaves; the label scan decodes in full only the files for which it
// does not hold. Damage inside the entropy-coded data (flipped bits) is not seen here; the
// decoder recovers it as grey blocks.
bool jpeg_structure_intact(const std::vector<uint8_t>& bytes);

// The EXIF orientation (1..8) found in a JPEG's APP1 segment, 1 when absent or unreadable.
int jpeg_exif_orientation(const std::vector<uint8_t>& bytes);
// Applies an EXIF orientation to an image as viewers do (6: rotate 90° clockwise, ...).
cv::Mat apply_exif_orientation(const cv::Mat& image, int orientation);

}  // namespace kestrel::yolo::data
