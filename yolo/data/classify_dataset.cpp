#include "yolo/data/classify_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "io/zip_extract.h"
#include "yolo/common/yaml_load.h"

namespace kestrel::yolo::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLayout = "<root>/train/<class>/*.jpg and <root>/val/<class>/*.jpg";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string absolute_normal(const fs::path& p) { return fs::absolute(p).lexically_normal().string(); }

// The sub-folders of `dir` (symbolic links to folders included), sorted: ImageFolder's find_classes.
std::vector<std::string> sub_folders(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  KESTREL_CHECK(!ec, "cannot list ", dir.string(), ": ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// One folder of a walk: its path relative to the walk's top ("" for the top) and its files.
struct WalkedFolder {
  std::string rel;
  std::vector<std::string> files;
};

// os.walk(top, followlinks=True): every folder below `dir` with the names of its non-folder
// entries. `chain` holds the canonical paths of the folders above, to refuse a link loop (which
// os.walk would follow until the path is too long).
void walk(const fs::path& dir, const std::string& rel, std::vector<fs::path>& chain, std::vector<WalkedFolder>& out) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  KESTREL_CHECK(!ec, "cannot read ", dir.string(), ": ", ec.message());
  KESTREL_CHECK(std::find(chain.begin(), chain.end(), real) == chain.end(), dir.string(),
                " is a symbolic link to a folder above it (", real.string(),
                "); the scan would never end: remove the link");
  chain.push_back(real);
  WalkedFolder here{rel, {}};
  std::vector<std::string> subdirs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code kind;
    const std::string name = it->path().filename().string();
    (it->is_directory(kind) ? subdirs : here.files).push_back(name);
  }
  KESTREL_CHECK(!ec, "cannot list ", dir.string(), ": ", ec.message());
  out.push_back(std::move(here));
  for (const std::string& s : subdirs) walk(dir / s, rel.empty() ? s : rel + "/" + s, chain, out);
  chain.pop_back();
}

// make_dataset's files of one class folder: folders in the order of their path strings (Python's
// sorted(os.walk(...))), each folder's files sorted, only image extensions.
std::vector<std::string> class_files(const fs::path& class_dir) {
  std::vector<WalkedFolder> folders;
  std::vector<fs::path> chain;
  walk(class_dir, "", chain, folders);
  std::sort(folders.begin(), folders.end(), [](const WalkedFolder& a, const WalkedFolder& b) { return a.rel < b.rel; });
  std::vector<std::string> files;
  for (WalkedFolder& f : folders) {
    std::sort(f.files.begin(), f.files.end());
    const fs::path dir = f.rel.empty() ? class_dir : class_dir / f.rel;
    for (const std::string& name : f.files)
      if (is_classify_image_path(name)) files.push_back((dir / name).string());
  }
  return files;
}

// `path:` of a classification yaml, read from the current directory, then from the yaml's folder.
std::string root_from_yaml(const std::string& yaml_path) {
  std::ifstream in(yaml_path);
  KESTREL_CHECK(in, "--data ", yaml_path, ": cannot read the yaml; give an existing file or the dataset's folder");
  std::stringstream text;
  text << in.rdbuf();
  const YAML::Node root = load_yaml(text.str(), yaml_path);
  KESTREL_CHECK(root.IsMap() && root["path"] && root["path"].IsScalar(), yaml_path,
                ": a classification dataset yaml needs `path:`, the folder holding ", kLayout);
  const fs::path path = root["path"].Scalar();
  if (path.is_absolute()) return absolute_normal(path);
  const fs::path from_cwd = fs::current_path() / path, from_yaml = fs::absolute(yaml_path).parent_path() / path;
  for (const fs::path& p : {from_cwd, from_yaml})
    if (fs::is_directory(p)) return absolute_normal(p);
  KESTREL_FAIL(yaml_path, ": `path: ", path.string(), "` is not a folder, neither from the current directory (",
               absolute_normal(from_cwd), ") nor from the yaml's folder (", absolute_normal(from_yaml),
               "); fix `path` to the folder holding ", kLayout);
}

// Fetches <name>.zip from the release into `dir` and returns <dir>/<name>.
std::string download_named_dataset(const std::string& name, const fs::path& dir, const std::string& looked,
                                   const DownloadSettings& settings, const Console& out) {
  const std::string url = classify_dataset_url(name);
  const std::string manual = str("no dataset at ", looked, "; if ", name, " is one of the release's classification ",
                                 "datasets fetch ", url, " by hand and unpack it into ", dir.string(),
                                 ", else give --data the folder holding ", kLayout);
  out.line("Dataset not found, missing path ", (dir / name).string(), ", attempting download...");
  std::error_code ec;
  const bool new_folder = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  KESTREL_CHECK(!ec, "cannot create ", dir.string(), " for the dataset ", name, ": ", ec.message());
  const std::string archive = (dir / (name + ".zip")).string();
  try {
    download_with_progress(mirrored_url(url, settings), archive, manual, settings, out);
    unzip_file(archive, dir.string());
  } catch (const Error& e) {
    fs::remove(archive, ec);
    if (new_folder) fs::remove(dir, ec);  // only when empty
    KESTREL_FAIL(e.what(), "; ", manual);
  }
  fs::remove(archive, ec);
  KESTREL_CHECK(fs::is_directory(dir / name), url, " was unpacked into ", dir.string(), " but made no folder ", name,
                "; ", manual);
  out.line("Dataset download success, saved to ", (dir / name).string());
  return absolute_normal(dir / name);
}

}  // namespace

bool is_classify_image_path(const std::string& path) {
  const std::string name = lower(fs::path(path).filename().string());
  for (const char* ext : {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})
    if (ends_with(name, ext)) return true;
  return false;
}

ClassifySplit scan_class_folders(const std::string& split_dir, const std::vector<std::string>& classes) {
  KESTREL_CHECK(fs::is_directory(split_dir), split_dir, " is not a folder; a classification dataset is laid out as ",
                kLayout);
  ClassifySplit split{split_dir, classes, {}};
  const std::vector<std::string> found = sub_folders(split_dir);
  KESTREL_CHECK(!found.empty(), split_dir, " has no class folder; a classification dataset is laid out as ", kLayout);
  if (split.classes.empty()) split.classes = found;
  std::string empty;
  for (const std::string& name : found) {
    const auto at = std::find(split.classes.begin(), split.classes.end(), name);
    KESTREL_CHECK(at != split.classes.end(), (fs::path(split_dir) / name).string(),
                  " is a class the train split does not have; add train/", name, "/ or remove it");
    const int label = static_cast<int>(at - split.classes.begin());
    const std::vector<std::string> files = class_files(fs::path(split_dir) / name);
    if (files.empty()) empty += (empty.empty() ? "" : ", ") + name;
    for (const std::string& f : files) split.samples.push_back({f, label});
  }
  // ImageFolder lists samples class by class in index order; `found` is sorted, the index order
  // may differ when classes come from train.
  std::stable_sort(split.samples.begin(), split.samples.end(),
                   [](const ClassifySample& a, const ClassifySample& b) { return a.label < b.label; });
  KESTREL_CHECK(empty.empty(), split_dir, ": no image file in the class folder(s) ", empty,
                " (ImageFolder's extensions: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp); add images or ",
                "remove the folder(s)");
  return split;
}

ClassifyDataset load_classify_dataset(const std::string& root) {
  ClassifyDataset d;
  d.root = absolute_normal(root);
  const fs::path r(d.root);
  KESTREL_CHECK(fs::is_directory(r), d.root, " is not a folder; a classification dataset is laid out as ", kLayout);
  KESTREL_CHECK(fs::is_directory(r / "train"), d.root, " has no train/ folder; a classification dataset is laid out as ",
                kLayout);
  d.test_name = fs::exists(r / "test") ? "test" : "val";
  KESTREL_CHECK(fs::is_directory(r / d.test_name), d.root, " has no val/ (or test/) folder; a classification dataset ",
                "is laid out as ", kLayout);
  d.train = scan_class_folders((r / "train").string());
  d.classes = d.train.classes;
  d.test = scan_class_folders((r / d.test_name).string(), d.classes);
  int64_t refused = 0;
  std::string examples;
  for (const ClassifySplit* s : {&d.train, &d.test})
    for (const ClassifySample& x : s->samples) {
      const std::string ext = lower(fs::path(x.path).extension().string());
      if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") continue;
      if (++refused <= 3) examples += (examples.empty() ? "" : ", ") + x.path;
    }
  KESTREL_CHECK(refused == 0, d.root, ": ", refused, " image(s) in a format Kestrel does not decode (", examples,
                refused > 3 ? ", ..." : "", "); it reads JPEG and PNG: convert them or remove them");
  return d;
}

std::string classify_datasets_dir() { return absolute_normal(fs::current_path() / ".." / "datasets"); }

std::string classify_dataset_url(const std::string& name) {
  return "https://github.com/ultralytics/yolov5/releases/download/v1.0/" + name + ".zip";
}

std::string resolve_classify_data(const std::string& data, const DownloadSettings& settings, const Console& out) {
  KESTREL_CHECK(!data.empty(), "--data: give the classification dataset's folder (", kLayout,
                "), a yaml with its `path:`, or the name of a dataset under ", classify_datasets_dir());
  const std::string ext = lower(fs::path(data).extension().string());
  if ((ext == ".yaml" || ext == ".yml") && !fs::is_directory(data)) return root_from_yaml(data);
  if (fs::is_directory(data)) return absolute_normal(data);
  const fs::path datasets = classify_datasets_dir();
  if (fs::is_directory(datasets / data)) return absolute_normal(datasets / data);
  const std::string looked = str(absolute_normal(data), " or ", absolute_normal(datasets / data));
  const bool bare_name = data.find('/') == std::string::npos && data != "." && data != "..";
  KESTREL_CHECK(bare_name, "--data ", data, ": no dataset folder at ", looked, "; give the folder holding ", kLayout);
  KESTREL_CHECK(data != "imagenet", "--data imagenet: no dataset at ", looked, "; ImageNet is not a release ",
                "download: fetch it by hand and lay it out as ", kLayout, " under ", datasets.string());
  return download_named_dataset(data, datasets, looked, settings, out);
}

std::string resolve_classify_data(const std::string& data) {
  return resolve_classify_data(data, download_settings(), Console(true));
}

}  // namespace kestrel::yolo::data
