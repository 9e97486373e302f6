// A dataset yaml's own download, as the reference's check_dataset makes it: when the yaml's `val`
// images are missing and its `download` is one .zip address (coco128.yaml's), the archive is
// fetched (through KESTREL_DOWNLOAD_MIRROR when set, yolo/common/download.h) into the folder above `path`,
// unpacked there (io/zip_extract: safe names, bounded sizes, moved into place only when
// complete), removed, and the dataset checked again. A `download` that is a script (coco.yaml,
// VOC.yaml) is never run: load_dataset_config's error then lists what to fetch by hand.
#pragma once
#include <string>

#include "yolo/common/console.h"
#include "yolo/common/download.h"

namespace kestrel::yolo {

// Fetches the dataset of `yaml_path` when it is missing and its yaml says where from; returns
// without doing anything otherwise. Errors name the address, the reason and what to do by hand.
void fetch_missing_dataset(const std::string& yaml_path, const DownloadSettings& settings, const Console& out);

// The same with the environment's settings and a console of this process's own.
void fetch_missing_dataset(const std::string& yaml_path);

}  // namespace kestrel::yolo
