// A .pt (torch.save's zip archive) is refused with kestrel::Error or read so that every entry lies
// inside the input with a unique name; an archive that reads is then taken through the whole
// .pt path (pickle, storages, the YOLOv5 module walk), where a read promises tensors whose bytes
// fit their dtype and shape. The same bytes are also read as a dataset archive (deflated entries
// too, io/zip_extract): an entry that reads comes to exactly its declared size, never more
// on the way, and a name that is accepted stays relative and never climbs with "..".
#include <filesystem>
#include <set>
#include <string>

#include "base/error.h"
#include "fuzz/targets.h"
#include "io/zip_archive.h"
#include "io/zip_extract.h"
#include "yolo/model/weights_file.h"

namespace kestrel::fuzz {

namespace {

void dataset_archive(std::string_view input) {
  ZipArchive zip;
  try {
    zip = ZipArchive::parse(input, "fuzz.zip", ZipMethods::StoredOrDeflated);
  } catch (const Error&) {
    return;
  }
  for (const ZipEntry& e : zip.entries()) {
    try {
      const std::filesystem::path p = safe_entry_path(e.name, "fuzz.zip");
      require(!p.empty() && p.is_relative(), "an accepted entry name is not a relative path");
      for (const auto& part : p) require(part != "..", "an accepted entry name climbs with ..");
    } catch (const Error&) {
    }
    uint64_t got = 0;
    try {
      read_zip_entry(zip, e, [&](std::string_view bytes) {
        got += bytes.size();
        require(got <= e.unpacked_size, "an entry inflated past its declared size");
      });
    } catch (const Error&) {
      continue;
    }
    require(got == e.unpacked_size, "an entry read to another size than declared");
  }
}

}  // namespace

void zip_archive(std::string_view input) {
  dataset_archive(input);
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
      t = safetensors_tensor(file, name);
    } catch (const Error&) {
      continue;  // a dtype Kestrel has no tensor type for
    }
    const SafetensorsEntry& e = file.entry(name);
    require(static_cast<uint64_t>(t.numel()) * t.element_size() == e.end - e.begin,
            "a tensor's size differs from its bytes");
  }
}

}  // namespace kestrel::fuzz
