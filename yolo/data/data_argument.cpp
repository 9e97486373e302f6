#include "yolo/data/data_argument.h"

#include "yolo/common/shipped_files.h"
#include "yolo/data/dataset_download.h"
#include "yolo/data/synthetic.h"

namespace kestrel::yolo {

std::string resolve_data(const std::string& data) {
  if (data.empty() || data == "synthetic")
    return data::ensure_synthetic_dataset(data::default_synthetic_dir());
  const std::string yaml = find_shipped_file(data, "--data");
  fetch_missing_dataset(yaml);
  return yaml;
}

}  // namespace kestrel::yolo
