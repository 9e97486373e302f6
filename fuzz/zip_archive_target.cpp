// A .pt (torch.save's zip archive) is refused with kestrel::Error or read so that every entry lies
// inside the input with a unique name; an archive that reads is then taken through the whole
// .pt path (pickle, storages, the YOLOv5 module walk), where a read promises tensors whose bytes
// fit their dtype and shape.
#include <set>
#include <string>

#include "engine/zip_archive.h"
#include "fuzz/targets.h"
#include "kernels/error.h"
#include "yolo/weights_file.h"

namespace kestrel::fuzz {

void zip_archive(std::string_view input) {
  try {
    const ZipArchive zip = ZipArchive::parse(input, "fuzz.pt");
    std::set<std::string> names;
    for (const ZipEntry& e : zip.entries()) {
      require(e.data_offset <= input.size() && e.size <= input.size() - e.data_offset,
              "an entry reaches past the archive");
      require(names.insert(e.name).second, "two entries share a name");
      require(zip.find(e.name) == &e, "find returns another entry");
    }
  } catch (const Error&) {
    return;
  }
  SafetensorsFile file;
  try {
    file = yolo::parse_weights_file(std::string(input), "fuzz.pt");
  } catch (const Error&) {
    return;
  }
  for (const std::string& name : file.names()) {
    Tensor t;
    try {
      t = file.get(name);
    } catch (const Error&) {
      continue;  // a dtype Kestrel has no tensor type for
    }
    const SafetensorsEntry& e = file.entry(name);
    require(static_cast<uint64_t>(t.numel()) * t.element_size() == e.end - e.begin,
            "a tensor's size differs from its bytes");
  }
}

}  // namespace kestrel::fuzz
