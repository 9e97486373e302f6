// Classification datasets in the ImageNet folder layout, as the reference's classify/train.py
// finds and reads them (torchvision's ImageFolder underneath):
//
//   <root>/train/<class>/**/*.jpg     classes: train's sub-folders, sorted; class i is the i-th
//   <root>/val/<class>/**/*.jpg       (or <root>/test/..., which wins when it exists)
//
// A split's samples are, class by class in that order, the files of a sorted recursive walk of the
// class folder (symbolic links followed) whose lower-case extension is one of ImageFolder's. The
// evaluation split is indexed by train's class names, so a class missing from val keeps the
// indices right (the reference indexes val by val's own folders); a val class that train lacks is
// an error.
#pragma once
#include <string>
#include <vector>

#include "yolo/common/console.h"
#include "yolo/common/download.h"

namespace kestrel::yolo::data {

struct ClassifySample {
  std::string path;
  int label = 0;
};

// One split folder as ImageFolder reads it.
struct ClassifySplit {
  std::string dir;                   // the split folder, as given
  std::vector<std::string> classes;  // the class names its labels index
  std::vector<ClassifySample> samples;
};

// ImageFolder's IMG_EXTENSIONS (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp), any case.
bool is_classify_image_path(const std::string& path);

// Scans `split_dir`. With `classes` empty, the classes are its own sub-folders, sorted; otherwise
// labels index `classes` and a sub-folder not among them is an error naming it. Errors (naming the
// folder and the expected layout): no such folder, no class folder, a class folder without an
// image file, a symbolic link that loops back to a folder above it.
ClassifySplit scan_class_folders(const std::string& split_dir, const std::vector<std::string>& classes = {});

struct ClassifyDataset {
  std::string root;                  // absolute
  std::vector<std::string> classes;  // train's class folders, sorted: class i's name
  ClassifySplit train;
  ClassifySplit test;                // <root>/test when it exists, else <root>/val
  std::string test_name;             // "test" or "val"
};

// Reads <root>/train and <root>/test or <root>/val. Besides scan_class_folders' errors: a root
// without train/ or without val/ (and test/) is an error giving the expected layout, and so is an
// image file Kestrel cannot decode (it reads JPEG and PNG: .bmp, .tif, .webp, ... are listed by
// ImageFolder but refused here, naming them, before any training starts).
ClassifyDataset load_classify_dataset(const std::string& root);

// The reference's DATASETS_DIR, where a dataset named without a path lives and is downloaded to:
// ../datasets read from the current directory, as `path: ../datasets/coco128` in detection's
// yamls (the reference runs from its checkout, whose parent holds datasets/).
std::string classify_datasets_dir();

// The release address of a named classification dataset (imagenette160, mnist, ...).
std::string classify_dataset_url(const std::string& name);

// --data for classification, as classify/train.py resolves it, to the dataset's root (absolute):
//  - a yaml file (.yaml/.yml) whose `path:` names the root; a relative `path` is read from the
//    current directory, then from the yaml's folder (as detection's yamls);
//  - an existing folder;
//  - <classify_datasets_dir()>/<data>;
//  - for a bare name found nowhere: <name>.zip fetched from the release (through
//    KESTREL_DOWNLOAD_MIRROR when set) and unpacked into classify_datasets_dir().
// Anything else is an error naming every place looked at and the expected layout. The root's
// layout is checked by load_classify_dataset, not here.
std::string resolve_classify_data(const std::string& data, const DownloadSettings& settings, const Console& out);
// The same with the environment's download settings and a console of this process's own.
std::string resolve_classify_data(const std::string& data);

}  // namespace kestrel::yolo::data
