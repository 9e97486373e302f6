#include "yolo/data/detect_sources.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "yolo/data/dataset_config.h"

namespace kestrel::yolo::data {
namespace fs = std::filesystem;
namespace {

std::string lower_suffix(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return "";
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool is_url(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* scheme : {"rtsp://", "rtmp://", "http://", "https://"})
    if (l.rfind(scheme, 0) == 0) return true;
  return false;
}

bool has_wildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool hidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

// Entries of `dir` (sorted names), skipping hidden ones unless the pattern asks for them.
std::vector<fs::path> entries(const fs::path& dir, bool include_hidden) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (include_hidden || !hidden(it->path().filename().string())) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

void glob_below(const fs::path& dir, const std::vector<std::string>& parts, size_t k,
                std::vector<std::string>& out) {
  std::error_code ec;
  if (k == parts.size()) {
    if (fs::exists(dir, ec)) out.push_back(dir.string());
    return;
  }
  const std::string& part = parts[k];
  if (part == "**") {
    glob_below(dir, parts, k + 1, out);  // zero folders
    for (const fs::path& e : entries(dir, false))
      if (fs::is_directory(e, ec)) glob_below(e, parts, k, out);
    return;
  }
  if (!has_wildcard(part)) {
    const fs::path next = dir / part;
    if (k + 1 == parts.size() || fs::is_directory(next, ec)) glob_below(next, parts, k + 1, out);
    return;
  }
  for (const fs::path& e : entries(dir, hidden(part))) {
    if (fnmatch(part.c_str(), e.filename().c_str(), 0) != 0) continue;
    if (k + 1 == parts.size() || fs::is_directory(e, ec)) glob_below(e, parts, k + 1, out);
  }
}

void add_file(const std::string& path, std::vector<std::string>& files) {
  files.push_back(fs::absolute(path).lexically_normal().string());
}

void expand_one(const std::string& source, const fs::path& base, int depth,
                std::vector<std::string>& files, std::vector<std::string>& streams) {
  if (is_stream_source(source)) {
    streams.push_back(source);
    return;
  }
  if (is_url(source)) {
    KESTREL_CHECK(is_video_path(source), "--source '", source, "': downloading images is not "
                  "supported; download the file first and pass its path");
    streams.push_back(source);  // a video URL: videoio opens it as a stream of known length
    return;
  }
  const fs::path p = fs::path(source).is_absolute() ? fs::path(source) : base / source;
  std::error_code ec;
  if (has_wildcard(source)) {
    for (const std::string& m : glob_paths(p.string())) add_file(m, files);
  } else if (fs::is_directory(p, ec)) {
    for (const fs::path& e : entries(p, false))  // the reference's glob(dir/*.*)
      if (e.filename().string().find('.') != std::string::npos) add_file(e.string(), files);
  } else if (fs::is_regular_file(p, ec) && lower_suffix(p.string()) == "txt") {
    std::ifstream in(p);
    KESTREL_CHECK(in, "--source: cannot read the list ", p.string());
    KESTREL_CHECK(depth < 8, "--source: ", p.string(), " is listed inside lists 8 deep; does a "
                  "list name itself?");
    for (std::string word; in >> word;) expand_one(word, p.parent_path(), depth + 1, files, streams);
  } else {
    KESTREL_CHECK(fs::is_regular_file(p, ec), "--source '", source, "': ", p.string(),
                  " does not exist; give an image, a video, a folder, a glob, a .txt list, a "
                  "stream URL or a webcam index");
    add_file(p.string(), files);
  }
}

}  // namespace

bool is_video_path(const std::string& path) {
  static constexpr const char* kVideo[] = {"asf", "avi", "gif", "m4v", "mkv", "mov",
                                           "mp4", "mpeg", "mpg", "ts", "wmv"};
  const std::string ext = lower_suffix(path);
  return std::find(std::begin(kVideo), std::end(kVideo), ext) != std::end(kVideo);
}

bool is_stream_source(const std::string& source) {
  if (!source.empty() && std::all_of(source.begin(), source.end(), [](unsigned char c) { return std::isdigit(c); }))
    return true;
  return is_url(source) && !is_video_path(source) && !is_image_path(source);
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  const fs::path p(pattern);
  std::vector<std::string> parts;
  for (const fs::path& part : p.relative_path()) parts.push_back(part.string());
  std::vector<std::string> out;
  glob_below(p.is_absolute() ? p.root_path() : fs::path("."), parts, 0, out);
  for (std::string& s : out)
    if (!p.is_absolute() && s.rfind("./", 0) == 0) s.erase(0, 2);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<SourceItem> expand_sources(const std::string& source) {
  KESTREL_CHECK(!source.empty(), "--source is empty; give an image, a folder, a glob or a list");
  std::vector<std::string> files, streams;
  expand_one(source, fs::current_path(), 0, files, streams);
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  std::vector<SourceItem> out;
  for (const std::string& f : files)
    if (is_image_path(f)) out.push_back({f, SourceKind::kImage});
  for (const std::string& f : files)
    if (is_video_path(f)) out.push_back({f, SourceKind::kVideo});
  for (const std::string& s : streams)
    out.push_back({s, is_video_path(s) ? SourceKind::kVideo : SourceKind::kStream});
  KESTREL_CHECK(!out.empty(), "--source '", source, "': no images or videos found. Supported: "
                "images bmp dng jpeg jpg mpo png tif tiff webp pfm; videos asf avi gif m4v mkv "
                "mov mp4 mpeg mpg ts wmv");
  return out;
}

}  // namespace kestrel::yolo::data
