// Dataset yaml files in the reference's format (data/coco128.yaml and friends), the image lists
// they name, and load_split, the one call the trainer makes to get a split's checked records.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "yolo/data/label_scan.h"
#include "yolo/data/records.h"

namespace kestrel::yolo::data {

struct DatasetConfig {
  std::string yaml_path;  // where it came from, for error messages
  // `path`, absolute. A relative one (or none, read as ".") is taken from the current directory,
  // as the reference takes it from the folder it runs from, else from the yaml's folder: the first
  // under which every `val` entry exists.
  std::string root;
  // Each split is a list of sources, absolute: image directories (searched recursively) or
  // text files listing images. `test` may be empty; `train` and `val` may not.
  std::vector<std::string> train, val, test;
  int nc = 0;
  std::vector<std::string> names;  // names[i] is class i's name

  // "train", "val" or "test"; anything else throws.
  const std::vector<std::string>& split(const std::string& name) const;
};

// Reads and checks a dataset yaml. `nc` defaults to the number of names (and names to
// "class0".. when only nc is given); `names` may be a list or an {index: name} map with indices
// 0..nc-1. Errors name the yaml and the key; a `val` found under neither reading of `path` is an
// error naming both places tried.
DatasetConfig load_dataset_config(const std::string& yaml_path);

// The same from the yaml's text; relative entries are resolved against yaml_path's folder.
DatasetConfig parse_dataset_config(const std::string& yaml_text, const std::string& yaml_path);

// A missing dataset that the reference's check_dataset downloads itself: no reading of `path` has
// every `val` entry, and the yaml's `download` is one http(s) address of a .zip.
struct DatasetDownload {
  std::string url;         // the yaml's `download`
  std::string unpack_dir;  // where to unpack it: the folder above `path` read from the current
                           // directory (../datasets for the reference's `path: ../datasets/coco128`;
                           // the current directory itself for a yaml without `path`)
  std::string root;        // `path` read so, where the archive must leave the dataset
  std::string missing;     // the `val` entries not found there
};

// The download a yaml asks for, or nullopt when its dataset is present or its `download` is
// anything else (none, a script, several addresses): load_dataset_config then says what to do.
std::optional<DatasetDownload> pending_dataset_download(const std::string& yaml_path);

// Only the class names (from `names`, or class0.. from `nc`), the images not looked for: detect's
// --data, as the reference's detect reads a yaml for its names alone.
std::vector<std::string> load_dataset_names(const std::string& yaml_path);

// True for the reference's image suffixes (bmp dng jpeg jpg mpo png tif tiff webp pfm), any case.
bool is_image_path(const std::string& path);

// Every image of a split's sources, sorted and without repeats. Directories are searched
// recursively (hidden entries skipped, as Python's glob does); in a list file each non-empty line
// is an image path, relative ones taken from the list's directory. Entries that are not image
// files are ignored. Throws, naming `where` (e.g. "data.yaml `val`"), when a source does not exist
// or no image is found.
std::vector<std::string> list_images(const std::vector<std::string>& sources,
                                     const std::string& where);

// A split ready for the loader: records of every usable image, the scan's counts and warnings
// (cache-related warnings included), and the summary line to print.
struct DatasetSplit {
  std::vector<ImageRecord> records;
  ScanCounts counts;
  std::vector<std::string> warnings;
  std::string summary;     // "Scanning '<labels dir>'... 126 images, 2 backgrounds, 0 corrupt"
  std::string cache_path;  // where the label cache lives (or would, if it could be written)
  bool from_cache = false;
};

// Lists the split's images, then takes the checked labels from the label cache when it is current
// (use_cache) or scans them on `threads` threads (0: min(8, hardware threads), as the reference)
// and writes the cache. Classes must lie in [0, nc); with single_cls any class >= 0 is accepted
// and becomes 0 (the reference's --single-cls). The train split must have at least one label
// file, as the reference's augmenting (training) dataset insists; `evaluation` lifts that for
// `kestrel val --task train`. Other splits may have none (every image is then a background).
// With `polygons` (instance segmentation), every record keeps its polygons (seg_scan.h); the label
// cache, which holds boxes only, is then neither read nor written (the split is scanned each time).
DatasetSplit load_split(const DatasetConfig& config, const std::string& split, int nc,
                        bool single_cls, bool use_cache, int threads = 0, bool evaluation = false,
                        bool polygons = false);

}  // namespace kestrel::yolo::data
