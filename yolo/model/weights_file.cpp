#include "yolo/model/weights_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "io/http_download.h"
#include "io/zip_archive.h"
#include "yolo/model/pt_checkpoint.h"
#include "yolo/model/release_weights.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

constexpr const char* kWhatToGive =
    "--weights takes Kestrel's .safetensors, an ultralytics YOLOv5 v7.0 .pt (release weights, "
    "a training checkpoint or a stripped best.pt), or for val and detect an .onnx";
constexpr const char* kFromThePt =
    "; Kestrel runs .safetensors, .pt and .onnx: pass the .pt it was exported from, or an ONNX export of it "
    "(`kestrel export` or the reference's `export.py --include onnx`)";

bool starts_with(std::string_view bytes, std::string_view magic) { return bytes.substr(0, magic.size()) == magic; }

std::string lower_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

bool looks_like_text(std::string_view bytes) {
  const std::string_view head = bytes.substr(0, 256);
  if (head.empty()) return false;
  for (unsigned char c : head)
    if (c < 0x09 || (c > 0x0d && c < 0x20 && c != 0x1b)) return false;
  return true;
}

bool has_line_starting(std::string_view text, std::string_view key) {
  for (size_t at = 0; at < text.size();) {
    if (text.substr(at, key.size()) == key) return true;
    const size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) break;
    at = nl + 1;
  }
  return false;
}

uint64_t little_endian_u64(std::string_view b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(b[i]);
  return v;
}

// The exports of the reference's export.py that Kestrel cannot run, by their magic or, where they
// have none (protobuf files), their name.
std::string describe_export(std::string_view bytes, const std::string& path) {
  const std::string ext = lower_extension(path);
  if (bytes.size() >= 8 && bytes.substr(4, 4) == "TFL3")
    return "a TensorFlow Lite model (the reference's export.py --include tflite or edgetpu)";
  if (ext == ".tflite") return "a TensorFlow Lite model, by its name";
  if (ext == ".pb") return "a TensorFlow GraphDef (the reference's export.py --include pb), by its name";
  if (ext == ".mlmodel") return "a CoreML model (the reference's export.py --include coreml)";
  if (ext == ".engine" || ext == ".trt" || ext == ".plan" ||
      (bytes.size() > 5 && bytes[4] == '{' && bytes.substr(4, 64).find("\"stride\"") != std::string_view::npos))
    return "a TensorRT engine (the reference's export.py --include engine)";
  if (ext == ".pdmodel" || ext == ".pdiparams") return "a PaddlePaddle model (the reference's export.py --include paddle)";
  if (starts_with(bytes, "<?xml") && bytes.substr(0, 512).find("<net ") != std::string_view::npos)
    return "an OpenVINO model (the reference's export.py --include openvino)";
  if (ext == ".bin" && fs::exists(fs::path(path).replace_extension(".xml")))
    return "an OpenVINO model's weights";
  if (starts_with(bytes, "\x89HDF\r\n\x1a\n")) return "an HDF5 file (a Keras .h5 model?)";
  return "";
}

// What a file that is no format Kestrel runs looks like, and what to do, or "" when it is
// unrecognisable.
std::string describe_other(std::string_view bytes, const std::string& path) {
  if (bytes.empty()) return "empty (0 bytes): a download or copy that did not finish; fetch or copy it again";
  if (const std::string e = describe_export(bytes, path); !e.empty()) return e + kFromThePt;
  if (bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x80 && static_cast<uint8_t>(bytes[1]) <= 5)
    return "a PyTorch file in the legacy (pre-1.6) torch.save format, a raw pickle; re-save it "
           "with a current PyTorch (torch.save(torch.load(f), f)), which writes the zip format "
           "Kestrel reads";
  if (starts_with(bytes, "\x89PNG") || starts_with(bytes, "\xff\xd8\xff")) return std::string("an image, not weights; ") + kWhatToGive;
  if (starts_with(bytes, "\x1f\x8b") || starts_with(bytes, "7z\xbc\xaf")) return "a compressed archive; unpack it first";
  if (looks_like_web_page(bytes))
    return "a web page, not weights (a download that fetched an error or sign-in page?); fetch the file itself";
  if (bytes.size() >= 9 && bytes[8] == '{' && little_endian_u64(bytes) > bytes.size() - 8 &&
      little_endian_u64(bytes) < (uint64_t{1} << 32))
    return "a safetensors file cut short: its header alone needs " + std::to_string(little_endian_u64(bytes) + 8) +
           " bytes and the file has " + std::to_string(bytes.size()) + "; copy or download it again";
  if (looks_like_text(bytes)) {
    if (has_line_starting(bytes, "backbone:") || has_line_starting(bytes, "head:") ||
        has_line_starting(bytes, "depth_multiple:"))
      return "a model yaml: give it with --cfg, and the weights with --weights";
    if (has_line_starting(bytes, "names:") || has_line_starting(bytes, "train:"))
      return "a dataset yaml: give it with --data";
    return std::string("a text file (a model yaml goes to --cfg, a dataset yaml to --data); ") + kWhatToGive;
  }
  return "";
}

// A zip archive that is no torch.save checkpoint: a TorchScript export (known by its entry names,
// found in the raw bytes too, as its archives may hold entries the strict reader refuses), one
// re-made by another tool (compressed, encrypted, split: said as such), or one cut short.
std::string describe_zip(std::string_view bytes, const std::string& path) {
  constexpr const char* kTorchScript =
      "a TorchScript export (the reference's export.py --include torchscript); pass the .pt it was exported from";
  try {
    const ZipArchive zip = ZipArchive::parse(bytes, path);
    for (const ZipEntry& e : zip.entries())
      if (e.name.ends_with("/constants.pkl") || e.name.find("/code/") != std::string::npos) return kTorchScript;
  } catch (const Error& e) {
    if (bytes.find("/constants.pkl") != std::string_view::npos || bytes.find("/code/__torch__") != std::string_view::npos)
      return kTorchScript;
    const std::string why = e.what();
    for (const char* remade : {"is encrypted", "is compressed", "compression method", "spans several disks"})
      if (why.find(remade) != std::string::npos)
        return "a zip archive (as .pt files are) that is not as torch.save writes it: " + why;
    return "a zip archive (as .pt files are) that cannot be read, most likely cut short (" + why +
           "); copy or download it again";
  }
  return "";
}

std::string describe_folder(const std::string& path) {
  const fs::path dir(path);
  if (fs::exists(dir / "saved_model.pb"))
    return "a TensorFlow SavedModel folder (the reference's export.py --include saved_model)" + std::string(kFromThePt);
  if (fs::exists(dir / "model.json"))
    return "a TensorFlow.js model folder (the reference's export.py --include tfjs)" + std::string(kFromThePt);
  if (lower_extension(path) == ".mlpackage")
    return "a CoreML package (the reference's export.py --include coreml)" + std::string(kFromThePt);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string ext = lower_extension(entry.path().string());
    if (ext == ".xml") return "an OpenVINO model folder (the reference's export.py --include openvino)" + std::string(kFromThePt);
    if (ext == ".pdmodel") return "a PaddlePaddle model folder (the reference's export.py --include paddle)" + std::string(kFromThePt);
  }
  return "a folder, not a weights file; give a file in it (e.g. runs/train/exp/weights/best.pt)";
}

// The first bytes of `path`, or a refusal saying why there are none.
std::string read_head(const std::string& path, size_t n) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  KESTREL_CHECK(fs::exists(st), "weights '", path, "': cannot open it (no such file); check the path");
  if (fs::is_directory(st)) KESTREL_FAIL("weights '", path, "' is ", describe_folder(path));
  KESTREL_CHECK(fs::is_regular_file(st), "weights '", path, "': not a regular file; give a .pt, .safetensors or .onnx file");
  std::ifstream in(path, std::ios::binary);
  KESTREL_CHECK(in, "weights '", path, "': cannot open it (", std::strerror(errno), "); check the path and its permissions");
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

}  // namespace

bool looks_like_onnx(std::string_view b) {
  if (b.size() < 4 || b[0] != '\x08') return false;
  size_t i = 1;
  while (i < b.size() && i < 4 && (static_cast<uint8_t>(b[i]) & 0x80)) ++i;  // ir_version's varint
  if (i + 1 >= b.size() || i > 3) return false;
  // producer_name (2), producer_version (3), domain (4), model_version (5: a varint), doc_string
  // (6), graph (7), opset_import (8), metadata_props (14), training_info (20), functions (25).
  const auto tag = static_cast<uint8_t>(b[i + 1]);
  return tag == 0x12 || tag == 0x1a || tag == 0x22 || tag == 0x28 || tag == 0x32 || tag == 0x3a || tag == 0x42 ||
         tag == 0x72;
}

WeightsFormat weights_format(const std::string& path) {
  const std::string head = read_head(path, 4096);
  if (looks_like_zip(head)) return WeightsFormat::kPt;  // read_weights_file tells TorchScript apart
  if (looks_like_onnx(head)) return WeightsFormat::kOnnx;
  if (head.size() >= 9 && head[8] == '{') return WeightsFormat::kSafetensors;
  const std::string other = describe_other(head, path);
  KESTREL_CHECK(other.empty(), "'", path, "' is ", other);
  return WeightsFormat::kSafetensors;  // unrecognised: the safetensors reader says what is wrong
}

SafetensorsFile parse_weights_file(std::string bytes, const std::string& path) {
  if (looks_like_zip(bytes)) {
    const std::string zip = describe_zip(bytes, path);
    if (!zip.empty()) KESTREL_FAIL("'", path, "' is ", zip);
    return pt_weights(parse_pt_checkpoint(std::move(bytes), path));
  }
  if (looks_like_onnx(bytes))
    KESTREL_FAIL("'", path, "' is an ONNX model: `kestrel val` and `kestrel detect` run it (a -seg model's: "
                 "`kestrel segment val` and `segment predict`), but training and export start from the "
                 ".safetensors or .pt it was exported from");
  try {
    return parse_safetensors(bytes, path);
  } catch (const Error& e) {
    const std::string other = describe_other(bytes, path);
    if (!other.empty()) KESTREL_FAIL("'", path, "' is ", other);
    KESTREL_FAIL(e.what(), "; this is no weights file Kestrel knows: ", kWhatToGive);
  }
}

std::string read_file_bytes(const std::string& path) {
  read_head(path, 0);  // missing files, folders and other non-files, named
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
