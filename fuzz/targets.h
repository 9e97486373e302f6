// The fuzz targets: one function per input format Kestrel reads from files users get elsewhere.
// Each takes arbitrary bytes. A refusal the format's reader is meant to give (kestrel::Error, or
// cli::UsageError for flags) is caught inside; anything else escapes: a crash, a sanitizer
// report, another exception, or a broken promise about what a successful read returns
// (fuzz::PropertyViolation). libFuzzer drives them (fuzz/libfuzzer_main.cpp, -DKESTREL_FUZZ=ON);
// tests/fuzz/targets_test.cpp replays every checked-in corpus file through them in every build.
#pragma once
#include <span>
#include <stdexcept>
#include <string_view>

namespace kestrel::fuzz {

// A successful read returned something its reader promises never to return.
class PropertyViolation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Throws PropertyViolation with `what` unless `holds`.
void require(bool holds, const char* what);

void label_lines(std::string_view input);    // yolo/data/label_scan: a label file's rows
void dataset_yaml(std::string_view input);   // yolo/data/dataset_config: a dataset yaml
void model_yaml(std::string_view input);     // yolo/model/model_config: a model yaml
void safetensors(std::string_view input);    // io/safetensors: a whole file, header and body
void label_cache(std::string_view input);    // yolo/data/label_cache: a cache file
void json(std::string_view input);           // io/json: a document
void image_header(std::string_view input);   // yolo/data/image_codec: probe, then small decodes
void cli_args(std::string_view input);       // yolo/cli/args: NUL-separated arguments
void zip_archive(std::string_view input);    // io/zip_archive, then the whole .pt path
void pickle(std::string_view input);         // io/pickle under a YOLOv5 checkpoint's globals
void weights_file(std::string_view input);   // yolo/model/weights_file: any file given to --weights

struct Target {
  const char* name;  // also its folder under fuzz/corpus/ and fuzz/dict/<name>.dict
  void (*run)(std::string_view input);
};

// Every target, in the order above.
std::span<const Target> all_targets();

}  // namespace kestrel::fuzz
