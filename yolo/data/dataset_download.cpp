#include "yolo/data/dataset_download.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "io/http_download.h"
#include "io/zip_extract.h"
#include "yolo/data/dataset_config.h"

namespace kestrel::yolo {
namespace {

namespace fs = std::filesystem;

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Whether a download is an HTML page (a server's error or sign-in page) by its first bytes.
bool served_a_web_page(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(512, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return looks_like_web_page(head);
}

}  // namespace

void fetch_missing_dataset(const std::string& yaml_path, const DownloadSettings& settings, const Console& out) {
  const std::optional<data::DatasetDownload> d = data::pending_dataset_download(yaml_path);
  if (!d) return;
  const auto start = std::chrono::steady_clock::now();
  out.line("Dataset not found, missing paths ", d->missing);
  const std::string name = url_file_name(d->url);
  const std::string manual = str("fetch ", d->url, " by hand and unpack it into ", d->unpack_dir, " (it holds ",
                                 fs::path(d->root).filename().string(), "/), or set KESTREL_DOWNLOAD_MIRROR to a ",
                                 "server that holds ", name);
  std::error_code ec;
  const bool new_folder = !fs::exists(d->unpack_dir, ec);
  fs::create_directories(d->unpack_dir, ec);
  KESTREL_CHECK(!ec, "cannot create ", d->unpack_dir, " for the dataset of ", yaml_path, ": ", ec.message());
  const std::string archive = (fs::path(d->unpack_dir) / name).string();
  std::vector<std::string> made;
  try {
    download_with_progress(mirrored_url(d->url, settings), archive, manual, settings, out);
    try {
      made = unzip_file(archive, d->unpack_dir);
    } catch (const Error& e) {
      if (served_a_web_page(archive))
        KESTREL_FAIL(d->url, " sent a web page, not a zip archive (an error or sign-in page?); ", manual);
      KESTREL_FAIL(e.what(), "; ", manual);
    }
  } catch (...) {
    fs::remove(archive, ec);
    if (new_folder) fs::remove(d->unpack_dir, ec);  // only if empty: a failure leaves nothing behind
    throw;
  }
  fs::remove(archive, ec);  // as the reference, which keeps only the unpacked dataset
  try {
    const data::DatasetConfig cfg = data::load_dataset_config(yaml_path);
    data::list_images(cfg.val, str(yaml_path, ": `val`"));
  } catch (const Error& e) {
    KESTREL_FAIL(d->url, " was unpacked into ", d->unpack_dir, " (making ", joined(made), "), but ", yaml_path,
                 " still finds no dataset: ", e.what());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char took[32];
  std::snprintf(took, sizeof took, "%.1f", seconds);
  out.line("Dataset download success (", took, "s), saved to ", d->unpack_dir);
}

void fetch_missing_dataset(const std::string& yaml_path) {
  fetch_missing_dataset(yaml_path, download_settings(), Console(true));
}

}  // namespace kestrel::yolo
