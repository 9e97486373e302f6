#include "yolo/weights_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "engine/zip_archive.h"
#include "kernels/error.h"
#include "yolo/pt_checkpoint.h"
#include "yolo/release_weights.h"

namespace kestrel::yolo {
namespace {

constexpr const char* kWhatToGive =
    "--weights takes Kestrel's .safetensors or an ultralytics YOLOv5 v7.0 .pt (release weights, "
    "a training checkpoint or a stripped best.pt)";

bool starts_with(std::string_view bytes, std::string_view magic) { return bytes.substr(0, magic.size()) == magic; }

bool looks_like_text(std::string_view bytes) {
  const std::string_view head = bytes.substr(0, 256);
  if (head.empty()) return false;
  for (unsigned char c : head)
    if (c < 0x09 || (c > 0x0d && c < 0x20 && c != 0x1b)) return false;
  return true;
}

// What a file that is neither format looks like, or "" when it is unrecognisable.
std::string describe_other(std::string_view bytes) {
  if (bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x80 && static_cast<uint8_t>(bytes[1]) <= 5)
    return "a PyTorch file in the legacy (pre-1.6) torch.save format, a raw pickle; re-save it "
           "with a current PyTorch (torch.save(torch.load(f), f)), which writes the zip format "
           "Kestrel reads";
  if (starts_with(bytes, "\x89PNG") || starts_with(bytes, "\xff\xd8\xff"))
    return "an image, not weights";
  if (starts_with(bytes, "\x08") && bytes.find("onnx") != std::string_view::npos)
    return "an ONNX model (what `kestrel export` writes for other runtimes); Kestrel itself "
           "starts from the .safetensors or .pt it was exported from";
  if (looks_like_text(bytes))
    return "a text file (a model yaml goes to --cfg, a dataset yaml to --data)";
  return "";
}

}  // namespace

SafetensorsFile parse_weights_file(std::string bytes, const std::string& path) {
  if (looks_like_zip(bytes)) return pt_weights(parse_pt_checkpoint(std::move(bytes), path));
  try {
    return parse_safetensors(bytes, path);
  } catch (const Error& e) {
    const std::string other = describe_other(bytes);
    if (!other.empty()) KESTREL_FAIL("'", path, "' is ", other, "; ", kWhatToGive);
    KESTREL_FAIL(e.what(), "; ", kWhatToGive);
  }
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  KESTREL_CHECK(in, "weights '", path, "': cannot open it (", std::strerror(errno), "); check the path");
  const std::streamoff size = in.tellg();
  KESTREL_CHECK(size >= 0, "weights '", path, "': not a regular file; give a .pt or .safetensors file");
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(bytes.data(), size);
  KESTREL_CHECK(in.gcount() == size, "weights '", path, "': read failed (the file shrank while read?)");
  return bytes;
}

SafetensorsFile read_weights_file(const std::string& path) {
  const std::string local = fetch_missing_weights(path);
  return parse_weights_file(read_file_bytes(local), local);
}

bool is_pt_weights(const SafetensorsFile& file) {
  auto format = file.metadata().find("format");
  return format != file.metadata().end() && format->second == kPtWeightsFormat;
}

}  // namespace kestrel::yolo
