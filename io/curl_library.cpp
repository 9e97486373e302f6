#include "io/curl_library.h"

#include <dlfcn.h>

#include <mutex>
#include <optional>

#include "base/error.h"

namespace kestrel {
namespace {

constexpr const char* kCurlSoname = "libcurl.so.4";

template <typename Fn>
void resolve(void* handle, const std::string& soname, const char* symbol, const std::string& manual, Fn& out) {
  void* address = dlsym(handle, symbol);
  KESTREL_CHECK(address, soname, " has no ", symbol, " (is it libcurl 7.62 or newer?)", manual);
  out = reinterpret_cast<Fn>(address);
}

}  // namespace

CurlLibrary open_curl_library(const std::string& soname, const std::string& manual) {
  const std::string tail = manual.empty() ? "" : "; " + manual;
  // The handle is never closed: the table points into the library for the process's lifetime.
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    KESTREL_FAIL("downloads need libcurl, and ", soname, " could not be opened (", why ? why : "unknown reason",
                 "); install it (Debian and Ubuntu: apt install libcurl4)", tail);
  }
  CurlLibrary lib{};
  resolve(handle, soname, "curl_global_init", tail, lib.global_init);
  resolve(handle, soname, "curl_easy_init", tail, lib.easy_init);
  resolve(handle, soname, "curl_easy_setopt", tail, lib.easy_setopt);
  resolve(handle, soname, "curl_easy_perform", tail, lib.easy_perform);
  resolve(handle, soname, "curl_easy_getinfo", tail, lib.easy_getinfo);
  resolve(handle, soname, "curl_easy_cleanup", tail, lib.easy_cleanup);
  resolve(handle, soname, "curl_easy_strerror", tail, lib.easy_strerror);
  return lib;
}

const CurlLibrary& curl_library(const std::string& manual) {
  // Opened once per process and read-only afterwards; a failed open leaves it empty, so the
  // next download tries again (and gives the same clear refusal).
  static std::mutex mutex;
  static std::optional<CurlLibrary> library;
  std::lock_guard<std::mutex> lock(mutex);
  if (!library) {
    CurlLibrary opened = open_curl_library(kCurlSoname, manual);
    const CURLcode rc = opened.global_init(CURL_GLOBAL_DEFAULT);
    KESTREL_CHECK(rc == CURLE_OK, "libcurl failed to initialise: ", opened.easy_strerror(rc),
                  manual.empty() ? "" : "; " + manual);
    library = opened;
  }
  return *library;
}

}  // namespace kestrel
