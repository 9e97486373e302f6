#include "io/zip_extract.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "base/error.h"
#include "io/atomic_file.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// A whole file mapped read-only: a dataset archive is read without holding it in memory twice.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    KESTREL_CHECK(fd >= 0, "cannot open the archive '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      KESTREL_FAIL("'", path, "' is not a regular file; give a zip archive");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      KESTREL_CHECK(p != MAP_FAILED, "cannot map the archive '", path, "': ", std::strerror(errno));
      data_ = p;
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

[[noreturn]] void bad_entry(const std::string& archive, const std::string& name, const std::string& what) {
  KESTREL_FAIL("'", archive, "': entry '", name, "' ", what);
}

void inflate_entry(const ZipArchive& zip, const ZipEntry& entry, const std::function<void(std::string_view)>& sink) {
  z_stream z{};
  KESTREL_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, "zlib could not start inflating '", zip.path(), "'");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  const std::string_view in = zip.raw(entry);
  constexpr size_t kChunk = 1 << 18;
  constexpr size_t kMaxFeed = size_t{1} << 30;  // avail_in is 32 bits wide
  std::string out(kChunk, '\0');
  uint64_t fed = 0, produced = 0;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0 && fed < in.size()) {
      const size_t n = std::min<uint64_t>(kMaxFeed, in.size() - fed);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + fed));
      z.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t got = out.size() - z.avail_out;
    // With a fresh output buffer every round, "no progress possible" means the input ran out.
    if (rc == Z_BUF_ERROR)
      bad_entry(zip.path(), entry.name, "ends before its deflate stream does: the archive is damaged or truncated");
    if (rc != Z_OK && rc != Z_STREAM_END)
      bad_entry(zip.path(), entry.name, str("does not inflate (", z.msg ? z.msg : "zlib error", "): the archive is damaged"));
    if (got > entry.unpacked_size - produced)
      bad_entry(zip.path(), entry.name, str("inflates to more than the ", entry.unpacked_size,
                                            " bytes its directory declares (a zip bomb or damage); refused"));
    produced += got;
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(got));
    if (got) sink(std::string_view(out.data(), got));
  }
  if (produced != entry.unpacked_size)
    bad_entry(zip.path(), entry.name, str("inflates to ", produced, " bytes, but its directory declares ",
                                          entry.unpacked_size, ": the archive is damaged"));
  if (static_cast<uint32_t>(crc) != entry.crc)
    bad_entry(zip.path(), entry.name, "fails its CRC-32 check: the archive is damaged; download it again");
}

bool skipped(const fs::path& p) {
  for (const fs::path& part : p)
    if (part == "__MACOSX") return true;
  return p.filename() == ".DS_Store";
}

// Removes the unpacking folder unless everything was moved out of it.
struct TempFolder {
  fs::path path;
  ~TempFolder() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

}  // namespace

void read_zip_entry(const ZipArchive& zip, const ZipEntry& entry, const std::function<void(std::string_view)>& sink) {
  if (entry.method == 0) {
    const std::string_view bytes = zip.data(entry);
    if (crc32(bytes) != entry.crc)
      bad_entry(zip.path(), entry.name, "fails its CRC-32 check: the archive is damaged; download it again");
    if (!bytes.empty()) sink(bytes);
    return;
  }
  KESTREL_CHECK(entry.method == 8, "'", zip.path(), "': entry '", entry.name, "' uses compression method ",
                entry.method, "; Kestrel unpacks stored and deflated entries only");
  inflate_entry(zip, entry, sink);
}

fs::path safe_entry_path(const std::string& name, const std::string& archive) {
  const auto refuse = [&](const char* why) {
    KESTREL_FAIL("'", archive, "': entry '", name, "' ", why, "; Kestrel unpacks only names that stay ",
                 "inside the destination folder (an archive that escapes it is refused: zip-slip)");
  };
  if (name.empty()) refuse("has an empty name");
  if (name.find('\0') != std::string::npos) refuse("has a NUL byte in its name");
  if (name.front() == '/' || name.front() == '\\') refuse("is an absolute path");
  if (name.size() >= 2 && name[1] == ':') refuse("names a drive (a Windows absolute path)");
  fs::path out;
  for (const fs::path& part : fs::path(name)) {
    const std::string s = part.string();
    if (s == ".." || s.find("\\..") != std::string::npos || s.rfind("..\\", 0) == 0) refuse("climbs out with `..`");
    if (s.empty() || s == ".") continue;
    out /= part;
  }
  if (out.empty()) refuse("names no file");
  return out;
}


std::vector<std::string> unzip_file(const std::string& zip_path, const std::string& dest, const UnzipLimits& limits) {
  const MappedFile mapped(zip_path);
  const ZipArchive zip = ZipArchive::parse(mapped.bytes(), zip_path, ZipMethods::StoredOrDeflated);
  struct Item {
    const ZipEntry* entry;
    fs::path path;
    bool folder;
  };
  std::vector<Item> items;
  std::set<std::string> tops, files;
  uint64_t total = 0;
  for (const ZipEntry& e : zip.entries()) {
    const fs::path p = safe_entry_path(e.name, zip_path);
    if (skipped(p)) continue;
    // Names that differ only by `./` or `//` unpack to one file: the second would overwrite the
    // first, so the archive is refused as it is for an exact duplicate.
    const bool folder_entry = e.name.back() == '/' || S_ISDIR(e.unix_mode);
    if (!folder_entry && !files.insert(p.string()).second)
      bad_entry(zip_path, e.name, str("unpacks to ", p.string(), ", as an earlier entry does (names that differ ",
                                      "only by ./ or //): the archive is damaged or made to mislead"));
    if (S_ISLNK(e.unix_mode))
      bad_entry(zip_path, e.name, "is a symbolic link; Kestrel unpacks files and folders only");
    items.push_back({&e, p, e.name.back() == '/' || S_ISDIR(e.unix_mode)});
    tops.insert(p.begin()->string());
    if (!items.back().folder) {
      if (e.unpacked_size > limits.max_bytes - std::min(total, limits.max_bytes))
        KESTREL_FAIL("'", zip_path, "': its entries declare more than ", limits.max_bytes,
                     " bytes unpacked together (at entry '", e.name, "'); refused as a possible zip bomb");
      total += e.unpacked_size;
    }
  }
  KESTREL_CHECK(!items.empty(), "'", zip_path, "' holds no files to unpack");
  std::error_code ec;
  KESTREL_CHECK(fs::is_directory(dest, ec), "cannot unpack '", zip_path, "' into ", dest, ": no such folder");
  for (const std::string& top : tops)
    KESTREL_CHECK(!fs::exists(fs::symlink_status(fs::path(dest) / top, ec)), "cannot unpack '", zip_path,
                  "' into ", dest, ": ", (fs::path(dest) / top).string(), " already exists; move it away ",
                  "(or remove it) and run again");
  if (limits.check_free_space) {
    const fs::space_info space = fs::space(dest, ec);
    KESTREL_CHECK(ec || total <= space.available, "cannot unpack '", zip_path, "' into ", dest, ": it needs ",
                  total, " bytes and the disk has ", space.available, " free");
  }

  // The unpacking folder of a killed unpack of this archive (`<stem>.unzip.tmp.<pid>.<n>`) goes;
  // a live process's (an unpack running now) stays.
  for (const std::string& left : remove_dead_temporaries((fs::path(dest) / fs::path(zip_path).stem()).string() + ".unzip"))
    std::fprintf(stderr, "unzip: removed %s, left by an unpack that was killed\n", left.c_str());
  TempFolder tmp{unique_temp_path((fs::path(dest) / fs::path(zip_path).stem()).string() + ".unzip")};
  fs::create_directory(tmp.path, ec);
  KESTREL_CHECK(!ec, "cannot create ", tmp.path.string(), " to unpack '", zip_path, "': ", ec.message());
  for (const Item& item : items) {
    const fs::path target = tmp.path / item.path;
    fs::create_directories(item.folder ? target : target.parent_path(), ec);
    KESTREL_CHECK(!ec, "cannot create ", (item.folder ? target : target.parent_path()).string(), " to unpack '",
                  zip_path, "': ", ec.message());
    if (item.folder) continue;
    AtomicFile out(target.string());
    read_zip_entry(zip, *item.entry, [&out](std::string_view bytes) { out.write(bytes.data(), bytes.size()); });
    out.commit();
  }
  for (const std::string& top : tops) {
    fs::rename(tmp.path / top, fs::path(dest) / top, ec);
    KESTREL_CHECK(!ec, "cannot move ", (tmp.path / top).string(), " to ", (fs::path(dest) / top).string(),
                  ": ", ec.message());
  }
  return {tops.begin(), tops.end()};
}

}  // namespace kestrel
