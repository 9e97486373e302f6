// The reference's pretrained weights by name, as its attempt_download fetches them: a --weights
// that names no existing file but one of the v7.0 release's detection models (yolov5n.pt, s, m,
// l, x and the P6 models yolov5n6.pt .. yolov5x6.pt) is downloaded from the release's assets to
// that very path (its folder made), then read as a checkpoint: a download that is none is removed
// and refused. An http(s) URL is fetched, as there, to its file name in the current directory
// (and used from there when that file exists). The release's classifiers (yolov5s-cls.pt, ...) are
// fetched for `kestrel classify` and refused elsewhere by name, saying where they run; its
// segmentation models (-seg) are refused by name.
#pragma once
#include <string>

#include "yolo/common/console.h"
#include "yolo/common/download.h"

namespace kestrel::yolo {

inline constexpr const char* kReleaseAssets = "https://github.com/ultralytics/yolov5/releases/download/v7.0/";
inline constexpr const char* kReleasePage = "https://github.com/ultralytics/yolov5/releases/tag/v7.0";

// True for the file names of the release's detection weights (yolov5s.pt, yolov5m6.pt, ...).
bool is_release_weights(const std::string& file_name);

// The path to read for --weights `weights`: `weights` itself, after downloading it where it is
// missing and a release name; for a URL, the downloaded file's path. Anything else is returned
// unchanged (the reader then says what is wrong with it).
// `classify`: for classify's commands, which also take the release's -cls names.
std::string fetch_missing_weights(const std::string& weights, const DownloadSettings& settings, const Console& out,
                                  bool classify = false);

// The same with the environment's settings and a console of this process's own.
std::string fetch_missing_weights(const std::string& weights, bool classify = false);

}  // namespace kestrel::yolo
