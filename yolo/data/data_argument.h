// --data as `kestrel train` and `kestrel val` take it: a dataset yaml, or the synthetic set.
#pragma once
#include <string>

namespace kestrel::yolo {

// --data: a dataset yaml (its dataset downloaded first when missing and the yaml gives a .zip
// address, yolo/data/dataset_download.h), or synthetic (generated once).
std::string resolve_data(const std::string& data);

}  // namespace kestrel::yolo
