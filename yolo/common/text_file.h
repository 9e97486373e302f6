// A whole text file read into a string, refused with its name when it cannot be read.
#pragma once
#include <string>

namespace kestrel::yolo {

std::string read_text(const std::string& path);

}  // namespace kestrel::yolo
