#include "yolo/model/release_weights.h"

#include <filesystem>

#include "base/error.h"
#include "yolo/model/weights_file.h"

namespace kestrel::yolo {
namespace {

namespace fs = std::filesystem;

bool is_url(const std::string& s) { return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0; }

// "yolov5s" + suffix + ".pt" for a size letter n/s/m/l/x; the suffix is returned.
bool release_name(const std::string& name, std::string& suffix) {
  if (name.size() < 10 || name.rfind("yolov5", 0) != 0 || !name.ends_with(".pt")) return false;
  if (std::string("nsmlx").find(name[6]) == std::string::npos) return false;
  suffix = name.substr(7, name.size() - 10);
  return true;
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// Downloads `url` beside `path` (as <path>.unchecked), reads it as weights and only then gives it
// its name: a file under `path` has always passed the check, also when a kill came during it. A
// download that is no checkpoint is removed again.
void fetch_checked(const std::string& url, const std::string& path, const std::string& manual,
                   const DownloadSettings& settings, const Console& out) {
  const fs::path folder = fs::path(path).parent_path();
  std::error_code ec;
  if (!folder.empty()) fs::create_directories(folder, ec);
  KESTREL_CHECK(!ec, "cannot create ", folder.string(), " for --weights ", path, ": ", ec.message());
  const std::string unchecked = path + ".unchecked";
  download_with_progress(url, unchecked, manual, settings, out, path);
  try {
    parse_weights_file(read_file_bytes(unchecked), path);
  } catch (const Error& e) {
    fs::remove(unchecked, ec);
    KESTREL_FAIL("downloaded ", url, " for ", path, ", but it is not a checkpoint (", e.what(),
                 "), so it was removed again; ", manual);
  }
  fs::rename(unchecked, path, ec);
  KESTREL_CHECK(!ec, "cannot rename ", unchecked, " to ", path, ": ", ec.message());
}

}  // namespace

bool is_release_weights(const std::string& file_name) {
  std::string suffix;
  return release_name(file_name, suffix) && (suffix.empty() || suffix == "6");
}

std::string fetch_missing_weights(const std::string& weights, const DownloadSettings& settings, const Console& out,
                                  bool classify) {
  if (weights.empty() || exists(weights)) return weights;
  if (is_url(weights)) {  // as the reference: to its file name, here
    const std::string local = url_file_name(weights);
    KESTREL_CHECK(!local.empty(), "--weights ", weights, ": the URL names no file; give the address of a .pt");
    if (exists(local)) {
      out.line("Found ", weights, " locally at ", local);
      return local;
    }
    fetch_checked(mirrored_url(weights, settings), local, str("download it by hand and save it as ", local), settings, out);
    return local;
  }
  const std::string name = fs::path(weights).filename().string();
  std::string suffix;
  if (!release_name(name, suffix)) return weights;
  KESTREL_CHECK(suffix != "-cls" || classify, "--weights ", weights, ": ", name, " is the reference's classification ",
                "model: run it with `kestrel classify` (train --model, val and predict --weights)");
  KESTREL_CHECK(suffix != "-seg", "--weights ", weights, ": ", name, " is the reference's segmentation model; ",
                "Kestrel trains and runs the detection models (yolov5n/s/m/l/x.pt, the P6 models "
                "yolov5n6/s6/m6/l6/x6.pt) and the classifiers (yolov5n/s/m/l/x-cls.pt)");
  if (!suffix.empty() && suffix != "6" && suffix != "-cls") return weights;
  const std::string manual = str("download ", name, " by hand from ", kReleasePage, " and save it as ", weights,
                                 ", or set KESTREL_DOWNLOAD_MIRROR to a server that holds it");
  fetch_checked(mirrored_url(kReleaseAssets + name, settings), weights, manual, settings, out);
  return weights;
}

std::string fetch_missing_weights(const std::string& weights, bool classify) {
  if (weights.empty() || exists(weights)) return weights;
  return fetch_missing_weights(weights, download_settings(), Console(true), classify);
}

}  // namespace kestrel::yolo
