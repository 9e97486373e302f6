#include "yolo/data/dataset_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "yolo/common/yaml_load.h"
#include "yolo/data/label_cache.h"
#include "yolo/data/seg_scan.h"

namespace kestrel::yolo::data {
namespace {

namespace fs = std::filesystem;

// Far beyond any real dataset (LVIS 1203 classes, ImageNet-21k 21841); a typo such as
// `nc: 2000000000` would otherwise make two billion default names before anything else.
constexpr int kMaxClasses = 100'000;

std::string normal(const fs::path& p) {
  std::string s = fs::absolute(p).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The reference joins relative entries to `path`, and retries without a leading "../" when the
// joined path does not exist (yaml files written for a yolov5/ checkout next to datasets/).
std::string resolve_entry(const fs::path& root, const std::string& entry) {
  const fs::path p(entry);
  if (p.is_absolute()) return normal(p);
  std::error_code ec;
  fs::path joined = root / p;
  if (!fs::exists(joined, ec) && entry.rfind("../", 0) == 0) joined = root / entry.substr(3);
  return normal(joined);
}

std::vector<std::string> read_sources(const YAML::Node& node, const fs::path& root,
                                      const std::string& where) {
  std::vector<std::string> out;
  if (!node || node.IsNull()) return out;
  try {
    if (node.IsSequence()) {
      for (const auto& item : node) out.push_back(resolve_entry(root, item.as<std::string>()));
    } else {
      out.push_back(resolve_entry(root, node.as<std::string>()));
    }
  } catch (const YAML::Exception&) {
    KESTREL_FAIL(where, " must be a path or a list of paths (image folders or .txt image lists)");
  }
  for (const std::string& s : out)
    KESTREL_CHECK(!s.empty(), where, " has an empty path; name an image folder or a .txt list");
  return out;
}

std::vector<std::string> read_names(const YAML::Node& node, const std::string& where) {
  std::vector<std::string> names;
  try {
    if (node.IsSequence()) {
      for (const auto& n : node) names.push_back(n.as<std::string>());
    } else if (node.IsMap()) {
      std::vector<std::pair<int, std::string>> items;
      for (const auto& kv : node) items.emplace_back(kv.first.as<int>(), kv.second.as<std::string>());
      std::sort(items.begin(), items.end());
      for (size_t i = 0; i < items.size(); ++i)
        KESTREL_CHECK(items[i].first == static_cast<int>(i), where,
                      " keys must be the class indices 0..", items.size() - 1,
                      " each once; index ", i, " is missing or repeated");
      for (auto& [index, name] : items) names.push_back(std::move(name));
    } else {
      KESTREL_FAIL(where, " must be a list of names or a map {index: name}");
    }
  } catch (const YAML::Exception&) {
    KESTREL_FAIL(where, " must be a list of names or a map {index: name} with integer keys");
  }
  return names;
}

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

void list_folder(const fs::path& dir, std::vector<std::string>& images) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it); it.increment(ec)) {
    if (hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    std::error_code target_ec, link_ec;
    const bool regular = it->is_regular_file(target_ec);
    // A symbolic link that leads nowhere (dangling, or a loop) stays listed, as the reference's
    // glob lists it: the scan then warns about it and counts it corrupt instead of losing it.
    const bool broken_link = !regular && target_ec && it->is_symlink(link_ec);
    if ((regular || broken_link) && is_image_path(it->path().string()))
      images.push_back(normal(it->path()));
  }
  KESTREL_CHECK(!ec, "cannot list image folder ", dir.string(), ": ", ec.message());
}

void list_file(const fs::path& list, std::vector<std::string>& images) {
  std::ifstream in(list);
  KESTREL_CHECK(in, "cannot read image list ", list.string());
  const fs::path base = list.parent_path();
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t\r\n\f\v");
    if (first == std::string::npos) continue;
    const auto last = line.find_last_not_of(" \t\r\n\f\v");
    const fs::path entry(line.substr(first, last - first + 1));
    if (!is_image_path(entry.string())) continue;
    images.push_back(normal(entry.is_absolute() ? entry : base / entry));
  }
}

// One http(s) address of a .zip: what the reference's check_dataset downloads and unpacks itself.
bool is_zip_url(const std::string& text) {
  const std::string path = text.substr(0, text.find_first_of("?#"));
  return text.find_first_of(" \t\n") == std::string::npos &&
         (text.rfind("http://", 0) == 0 || text.rfind("https://", 0) == 0) && path.ends_with(".zip");
}

// What to do when a yaml's dataset is missing, from its `download` entry: a zip URL to fetch and
// unpack, or the addresses a download script names (Kestrel runs no scripts; the reference's
// coco.yaml and VOC.yaml carry Python).
std::string download_advice(const YAML::Node& download, const std::string& parent) {
  if (!download || !download.IsScalar() || download.Scalar().empty()) return "";
  const std::string text = download.Scalar();
  const bool one_url = text.find_first_of(" \t\n") == std::string::npos && text.rfind("http", 0) == 0;
  if (one_url)
    return str("; the yaml's `download` is ", text, ": fetch it and unpack it into ", parent);
  std::string urls;
  for (size_t at = text.find("http"); at != std::string::npos; at = text.find("http", at + 1)) {
    const size_t end = text.find_first_of(" \t\n'\",)", at);
    const std::string url = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) urls += "\n  " + url;
  }
  return str("; its `download` is a script, which Kestrel never runs: fetch the dataset as it "
             "describes, into ", parent, urls.empty() ? "" : str(", from:", urls));
}

// Why every image of a split was refused, grouped by reason (each image's path taken out of its
// warning): how many images each reason covers and the first few of them, so that one cause (a
// wrong folder, an unsupported format) shows as one line however many images it hit. warnings[i]
// is images[i]'s refusal: a refused image leaves exactly one warning, in the images' order.
std::string refusal_digest(const std::vector<std::string>& images, const std::vector<std::string>& warnings) {
  constexpr size_t kShown = 3;
  struct Group {
    std::string reason;
    size_t count = 0;
    std::vector<std::string> examples;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < warnings.size(); ++i) {
    const std::string image = warnings.size() == images.size() ? images[i] : std::string();
    std::string reason = warnings[i];
    const std::string prefix = "WARNING: " + image + ": ";
    if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
    for (size_t at; !image.empty() && (at = reason.find(image)) != std::string::npos;)
      reason.replace(at, image.size(), "<image>");
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.reason == reason; });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{reason, 0, {}});
    if (++g->count <= kShown && !image.empty()) g->examples.push_back(image);
  }
  std::string digest;
  size_t rest = 0;
  for (size_t k = 0; k < groups.size(); ++k) {
    const Group& g = groups[k];
    if (k >= kShown) {
      rest += g.count;
      continue;
    }
    std::string examples;
    for (const std::string& e : g.examples) examples += (examples.empty() ? "" : ", ") + e;
    if (g.count > g.examples.size() && !g.examples.empty()) examples += str(" and ", g.count - g.examples.size(), " more");
    digest += str(k ? "; " : "", g.count, g.count == 1 ? " image: " : " images: ", g.reason,
                  examples.empty() ? "" : " (" + examples + ")");
  }
  if (rest) digest += str("; and ", rest, " images for ", groups.size() - kShown, " other reasons");
  return digest.empty() ? "no reason reported" : digest;
}

}  // namespace

// `names`, checked against `nc` where both are given; class0, class1, ... from `nc` alone.
static std::vector<std::string> class_names(const YAML::Node& root, const std::string& yaml_path) {
  int nc = -1;
  if (root["nc"] && !root["nc"].IsNull()) {
    try {
      nc = root["nc"].as<int>();
    } catch (const YAML::Exception&) {
      KESTREL_FAIL(yaml_path, ": `nc` must be an integer, got '", root["nc"].Scalar(), "'");
    }
    KESTREL_CHECK(nc >= 1 && nc <= kMaxClasses, yaml_path, ": `nc` must be in [1, ", kMaxClasses,
                  "], got ", nc);
  }
  std::vector<std::string> names;
  if (root["names"] && !root["names"].IsNull()) {
    names = read_names(root["names"], str(yaml_path, ": `names`"));
    KESTREL_CHECK(!names.empty(), yaml_path, ": `names` is empty");
    KESTREL_CHECK(nc < 0 || nc == static_cast<int>(names.size()), yaml_path, ": `nc` is ", nc,
                  " but `names` has ", names.size(), " entries; make them agree");
  } else {
    KESTREL_CHECK(nc > 0, yaml_path, ": missing `names` (and `nc`); list the class names");
    for (int i = 0; i < nc; ++i) names.push_back(str("class", i));
  }
  return names;
}

std::vector<std::string> load_dataset_names(const std::string& yaml_path) {
  std::ifstream in(yaml_path);
  KESTREL_CHECK(in, "cannot read dataset yaml ", yaml_path, "; give an existing file");
  std::stringstream text;
  text << in.rdbuf();
  const YAML::Node root = load_yaml(text.str(), yaml_path);
  KESTREL_CHECK(root.IsMap(), yaml_path, ": a dataset yaml is a map with path, train, val, nc, names");
  return class_names(root, yaml_path);
}

const std::vector<std::string>& DatasetConfig::split(const std::string& name) const {
  if (name == "train") return train;
  if (name == "val") return val;
  if (name == "test") return test;
  KESTREL_FAIL("dataset split must be train, val or test, got '", name, "'");
}

DatasetConfig load_dataset_config(const std::string& yaml_path) {
  std::ifstream in(yaml_path);
  KESTREL_CHECK(in, "cannot read dataset yaml ", yaml_path,
                "; give an existing file (or --data synthetic for the built-in dataset)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_dataset_config(text.str(), yaml_path);
}

namespace {

// The readings of `path`: the reference joins a relative one (a missing one reads as ".") to the
// folder it runs from, its checkout's root; Kestrel reads it from the current directory the same
// way, then from the yaml's own folder.
std::vector<std::pair<fs::path, const char*>> path_readings(const std::string& path_value, const std::string& yaml_path) {
  if (fs::path(path_value).is_absolute()) return {{fs::path(path_value), "as given"}};
  return {{fs::current_path() / path_value, "from the current directory, as the reference"},
          {fs::absolute(yaml_path).parent_path() / path_value, "from the yaml's folder"}};
}

// Where a dataset archive goes: the folder above `path` read from the current directory, as the
// reference's datasets/ lies above `path: ../datasets/coco128`; a yaml without `path` has its
// dataset in the current directory itself.
std::string unpack_folder(const std::string& path_value, const std::string& yaml_path) {
  const fs::path dataset = path_readings(path_value, yaml_path).front().first;
  return normal(path_value.empty() || path_value == "." ? dataset : dataset.parent_path());
}

// Everything but the dataset's place: the checked keys, and `path` as written ("" when absent).
DatasetConfig read_fields(const YAML::Node& root, const std::string& yaml_path, std::string& path_value) {
  KESTREL_CHECK(root.IsMap(), yaml_path, ": a dataset yaml is a map with path, train, val, nc, names");
  DatasetConfig cfg;
  cfg.yaml_path = yaml_path;
  if (root["path"] && !root["path"].IsNull()) {
    try {
      path_value = root["path"].as<std::string>();
    } catch (const YAML::Exception&) {
      KESTREL_FAIL(yaml_path, ": `path` must be a folder path");
    }
  }
  for (const char* key : {"train", "val"})
    KESTREL_CHECK(root[key] && !root[key].IsNull(), yaml_path, ": missing `", key,
                  "` (an image folder, a .txt list of images, or a list of those)");
  cfg.names = class_names(root, yaml_path);
  cfg.nc = static_cast<int>(cfg.names.size());
  return cfg;
}

// Sets the root and the splits from the first reading of `path` under which every `val` entry
// exists and returns true; false when none has them, with `tried` saying what each reading
// lacked and `first_missing` the entries missing under the first.
bool place_dataset(DatasetConfig& cfg, const YAML::Node& root, const std::string& path_value, std::string& tried,
                   std::string& first_missing) {
  const auto where = [&](const char* key) { return str(cfg.yaml_path, ": `", key, "`"); };
  std::vector<std::string> seen;
  for (const auto& [dir, how] : path_readings(path_value, cfg.yaml_path)) {
    cfg.root = normal(dir);
    if (std::find(seen.begin(), seen.end(), cfg.root) != seen.end()) continue;  // cwd is the yaml's
    seen.push_back(cfg.root);
    cfg.train = read_sources(root["train"], cfg.root, where("train"));
    cfg.val = read_sources(root["val"], cfg.root, where("val"));
    cfg.test = read_sources(root["test"], cfg.root, where("test"));
    KESTREL_CHECK(!cfg.train.empty() && !cfg.val.empty(), cfg.yaml_path,
                  ": `train` and `val` must each name at least one image folder or list");
    std::string missing;
    std::error_code ec;
    for (const std::string& v : cfg.val)
      if (!fs::exists(v, ec)) missing += (missing.empty() ? "" : ", ") + v;
    if (missing.empty()) return true;
    if (seen.size() == 1) first_missing = missing;
    tried += str("; ", cfg.root, " (", how, ") has no ", missing);
  }
  return false;
}

}  // namespace

DatasetConfig parse_dataset_config(const std::string& yaml_text, const std::string& yaml_path) {
  const YAML::Node root = load_yaml(yaml_text, yaml_path);
  std::string path_value, tried, first_missing;
  DatasetConfig cfg = read_fields(root, yaml_path, path_value);
  if (place_dataset(cfg, root, path_value, tried, first_missing)) return cfg;
  KESTREL_FAIL(yaml_path, ": dataset not found under `path: ", path_value.empty() ? "." : path_value,
               "`", tried, "; fix `path` in the yaml, or run from the folder it is relative to",
               download_advice(root["download"], unpack_folder(path_value, yaml_path)));
}

std::optional<DatasetDownload> pending_dataset_download(const std::string& yaml_path) {
  std::ifstream in(yaml_path);
  KESTREL_CHECK(in, "cannot read dataset yaml ", yaml_path, "; give an existing file");
  std::stringstream text;
  text << in.rdbuf();
  const YAML::Node root = load_yaml(text.str(), yaml_path);
  std::string path_value, tried, first_missing;
  DatasetConfig cfg = read_fields(root, yaml_path, path_value);
  if (place_dataset(cfg, root, path_value, tried, first_missing)) return std::nullopt;
  const YAML::Node download = root["download"];
  if (!download || !download.IsScalar() || !is_zip_url(download.Scalar())) return std::nullopt;
  return DatasetDownload{download.Scalar(), unpack_folder(path_value, yaml_path),
                         normal(path_readings(path_value, yaml_path).front().first), first_missing};
}

bool is_image_path(const std::string& path) {
  static constexpr const char* kSuffixes[] = {"bmp", "dng", "jpeg", "jpg", "mpo",
                                              "png", "tif", "tiff", "webp", "pfm"};
  std::string ext = fs::path(path).extension().string();
  if (ext.size() < 2) return false;
  ext.erase(0, 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::find_if(std::begin(kSuffixes), std::end(kSuffixes),
                      [&](const char* s) { return ext == s; }) != std::end(kSuffixes);
}

std::vector<std::string> list_images(const std::vector<std::string>& sources,
                                     const std::string& where) {
  std::vector<std::string> images;
  for (const std::string& source : sources) {
    std::error_code ec;
    if (fs::is_directory(source, ec)) {
      list_folder(source, images);
    } else if (fs::is_regular_file(source, ec)) {
      list_file(source, images);
    } else {
      KESTREL_FAIL(where, ": ", source, " does not exist; check the yaml's `path` and this entry");
    }
  }
  std::sort(images.begin(), images.end());
  images.erase(std::unique(images.begin(), images.end()), images.end());
  KESTREL_CHECK(!images.empty(), where, ": no images found (suffixes bmp dng jpeg jpg mpo png tif ",
                "tiff webp pfm) in ", sources.front(), sources.size() > 1 ? " and the others" : "");
  return images;
}

DatasetSplit load_split(const DatasetConfig& config, const std::string& split, int nc,
                        bool single_cls, bool use_cache, int threads, bool evaluation, bool polygons) {
  if (polygons) use_cache = false;
  const std::vector<std::string>& sources = config.split(split);
  const std::string where = str(config.yaml_path, ": `", split, "`");
  KESTREL_CHECK(!sources.empty(), where, " is not set in the dataset yaml");
  KESTREL_CHECK(nc >= 1, "load_split: nc must be at least 1, got ", nc);
  KESTREL_CHECK(threads >= 0, "load_split: threads must be >= 0 (0 = automatic), got ", threads);
  const std::vector<std::string> images = list_images(sources, where);
  // Under --single-cls every class becomes 0, so any class index is acceptable (as the reference).
  const int class_limit = single_cls ? 0 : nc;

  DatasetSplit out;
  out.cache_path = label_cache_path(sources, images);
  const std::string labels_what =
      out.cache_path.substr(0, out.cache_path.size() - std::string_view(kLabelCacheSuffix).size());
  const uint64_t hash = label_files_hash(images, class_limit);
  ScanResult scan;
  if (use_cache) {
    CacheRead cached = read_label_cache(out.cache_path, hash, class_limit);
    if (cached.state == CacheState::Loaded) {
      scan = std::move(cached.scan);
      out.from_cache = true;
    } else if (cached.state == CacheState::Corrupt) {
      out.warnings.push_back(str("WARNING: label cache ", out.cache_path, " is damaged (",
                                 cached.problem, "); rescanning and rewriting it"));
    }
  }
  if (!out.from_cache) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    ThreadPool pool(threads > 0 ? static_cast<size_t>(threads) : std::min(8u, hw));
    scan = polygons ? scan_segment_images(images, class_limit, pool) : scan_images(images, class_limit, pool);
    if (use_cache) {
      const std::string problem = write_label_cache(out.cache_path, hash, scan);
      if (!problem.empty())
        out.warnings.push_back(str("WARNING: cache directory ", fs::path(out.cache_path).parent_path().string(),
                                   " is not writeable (", problem, "); continuing without a label cache"));
    }
  }
  out.summary = scan_summary(out.from_cache ? out.cache_path : labels_what, scan.counts);
  out.counts = scan.counts;
  out.warnings.insert(out.warnings.end(), scan.warnings.begin(), scan.warnings.end());
  // Every image refused: its reasons come first, since a missing label would be the wrong hint
  // when no image could even be read. Each refused image left exactly one warning, its reason.
  KESTREL_CHECK(!scan.records.empty(), where, ": no usable images among ", images.size(), " (",
                out.summary, "): ", refusal_digest(images, scan.warnings));
  KESTREL_CHECK(scan.counts.found > 0 || split != "train" || evaluation, where,
                ": no labels found in ", labels_what, " (label cache ", out.cache_path,
                "), can not start training; each image needs a label file at its path with ",
                "/images/ replaced by /labels/ and the extension by .txt, e.g. ",
                image_to_label_path(images.front()), ", holding one `class x y w h` row per ",
                "object (normalised to 0..1)");
  if (scan.counts.found == 0)
    out.warnings.push_back(str("WARNING: no labels found in ", labels_what,
                               " (labels are found by replacing /images/ with /labels/ in image paths)"));
  out.records = std::move(scan.records);
  if (single_cls)
    for (ImageRecord& r : out.records)
      for (LabelBox& b : r.boxes) b.cls = 0;
  return out;
}

}  // namespace kestrel::yolo::data
