#include "io/http_download.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/curl_library.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;

// What the callbacks share with download_file. Exceptions must not cross libcurl's C frames: a
// callback that fails keeps its message here and tells curl to stop.
struct Transfer {
  AtomicFile* file = nullptr;
  const DownloadOptions* options = nullptr;
  uint64_t written = 0;
  Clock::time_point last_byte = Clock::now();
  uint64_t last_seen = 0;
  std::string failure;  // set by a callback that stopped the transfer
  bool stalled = false;
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  try {
    t->file->write(data, n);
  } catch (const std::exception& e) {
    t->failure = e.what();
    return 0;  // curl stops with CURLE_WRITE_ERROR
  }
  t->written += n;
  return n;
}

// Called by curl at least once a second, even while nothing arrives: the stall clock and the
// caller's progress bar both run from here.
int on_progress(void* user, curl_off_t total, curl_off_t done, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  const auto now = Clock::now();
  if (static_cast<uint64_t>(done) != t->last_seen) {
    t->last_seen = static_cast<uint64_t>(done);
    t->last_byte = now;
  }
  if (std::chrono::duration<double>(now - t->last_byte).count() >= t->options->stall_seconds) {
    t->stalled = true;
    return 1;  // curl stops with CURLE_ABORTED_BY_CALLBACK
  }
  if (t->options->progress) {
    try {
      t->options->progress(static_cast<uint64_t>(done), total > 0 ? static_cast<uint64_t>(total) : 0, false);
    } catch (const std::exception& e) {
      t->failure = e.what();
      return 1;
    }
  }
  return 0;
}

std::string seconds_text(double s) {
  const double whole = std::round(s);
  return std::abs(s - whole) < 1e-9 ? str(static_cast<int64_t>(whole), " s") : str(s, " s");
}


}  // namespace

uint64_t download_file(const std::string& url, const std::string& path, const DownloadOptions& options) {
  const std::string manual = options.manual.empty() ? "" : "; " + options.manual;
  const auto message = [&](const std::string& reason) -> std::string {
    return str("cannot download ", url, " to ", path, ": ", reason, manual);
  };
  KESTREL_CHECK(options.stall_seconds > 0, "download_file: stall_seconds must be positive, got ", options.stall_seconds);

  const CurlLibrary& lib = curl_library(options.manual);
  std::unique_ptr<CURL, void (*)(CURL*)> curl(lib.easy_init(), lib.easy_cleanup);
  KESTREL_CHECK(curl, message("libcurl could not start a transfer (out of memory?)"));
  // A download of this file that was killed left its partial temporary: gone before this one starts.
  for (const std::string& left : remove_dead_temporaries(path))
    std::fprintf(stderr, "download: removed %s, left by a download that was killed\n", left.c_str());
  AtomicFile file(path);
  Transfer t;
  t.file = &file;
  t.options = &options;
  char curl_message[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  lib.easy_setopt(c, CURLOPT_URL, url.c_str());
  lib.easy_setopt(c, CURLOPT_ERRORBUFFER, curl_message);
  lib.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  lib.easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  // By name where the libcurl opened at run time knows the names (7.85 and newer), else as bits.
  if (lib.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file") != CURLE_OK ||
      lib.easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the names' predecessors, for old libcurls
    lib.easy_setopt(c, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS | CURLPROTO_FILE));
    lib.easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#pragma GCC diagnostic pop
  }
  lib.easy_setopt(c, CURLOPT_FAILONERROR, 1L);
  lib.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  lib.easy_setopt(c, CURLOPT_USERAGENT, "kestrel");
  lib.easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::ceil(options.stall_seconds * 1000)));
  lib.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  lib.easy_setopt(c, CURLOPT_WRITEDATA, &t);
  lib.easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  lib.easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  lib.easy_setopt(c, CURLOPT_XFERINFODATA, &t);

  const CURLcode rc = lib.easy_perform(c);
  long status = 0;
  lib.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_off_t expected = -1;
  lib.easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &expected);
  if (rc != CURLE_OK) {
    if (!t.failure.empty()) KESTREL_FAIL(message(t.failure));
    if (t.stalled)
      KESTREL_FAIL(message(str("no data for ", seconds_text(options.stall_seconds), " after ", t.written,
                              " bytes (the connection stalled", options.stall_advice.empty() ? "" : "; " + options.stall_advice, ")")));
    if (rc == CURLE_HTTP_RETURNED_ERROR) KESTREL_FAIL(message(str("the server answered HTTP ", status)));
    if (rc == CURLE_PARTIAL_FILE && expected >= 0)
      KESTREL_FAIL(message(str("the transfer broke off after ", t.written, " of ", expected,
                              " bytes (truncated)")));
    KESTREL_FAIL(message(curl_message[0] ? std::string(curl_message) : std::string(lib.easy_strerror(rc))));
  }
  // A redirect without a Location ends here with its own (empty) body: not the file.
  if (status >= 300) KESTREL_FAIL(message(str("the server answered HTTP ", status, " and sent no file")));
  // curl refuses a body shorter than its Content-Length itself; this holds it to the same rule
  // whatever the build does with a connection closed early.
  if (expected >= 0 && static_cast<uint64_t>(expected) != t.written)
    KESTREL_FAIL(message(str("received ", t.written, " bytes, but the server announced ", expected, " (truncated)")));
  file.commit();
  if (options.progress) options.progress(t.written, expected >= 0 ? static_cast<uint64_t>(expected) : t.written, true);
  return t.written;
}

bool looks_like_web_page(std::string_view head) {
  const size_t start = head.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) return false;
  auto starts = [&](std::string_view tag) {
    if (head.size() - start < tag.size()) return false;
    for (size_t i = 0; i < tag.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(head[start + i])) != tag[i]) return false;
    return true;
  };
  return starts("<!doctype") || starts("<html");
}

}  // namespace kestrel
