// Files Kestrel ships (models/*.yaml, data/hyps/*.yaml), found as the reference's check_file
// finds its own: a path that names an existing file is used as given; anything else is looked up
// among the shipped files, so `--cfg yolov5n.yaml` works, and the default `models/yolov5s.yaml`
// works from any directory.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace kestrel::yolo {

// Folders that may hold the shipped files of a binary at `executable`, in search order: its own
// folder (the build copies models/ and data/ next to the binary), the folder above it (the
// bundle's bin/ beside models/ and data/), and ../share/kestrel (`cmake --install`).
std::vector<std::filesystem::path> shipped_roots(const std::filesystem::path& executable);

// `given` when it names an existing file. Otherwise, in the first root that has it, root/given or
// the one file matching root/models/**/given or root/data/**/given (the reference searches its
// data/ and models/ the same way). Throws naming `flag` and every place tried when none has it,
// and lists the candidates when one root holds several.
std::string find_shipped_file(const std::string& given,
                              const std::vector<std::filesystem::path>& roots,
                              const std::string& flag);

// As above, with the shipped_roots of the running program.
std::string find_shipped_file(const std::string& given, const std::string& flag);

}  // namespace kestrel::yolo
