#include "yolo/common/download.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "io/http_download.h"
#include "yolo/common/stop_signal.h"

namespace kestrel::yolo {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

std::string url_file_name(const std::string& url) {
  const std::string path = url.substr(0, url.find_first_of("?#"));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

DownloadSettings download_settings() {
  DownloadSettings s;
  s.mirror = env("KESTREL_DOWNLOAD_MIRROR");
  while (!s.mirror.empty() && s.mirror.back() == '/') s.mirror.pop_back();
  const std::string timeout = env("KESTREL_DOWNLOAD_TIMEOUT");
  if (!timeout.empty()) {
    char* end = nullptr;
    const double v = std::strtod(timeout.c_str(), &end);
    KESTREL_CHECK(end && *end == '\0' && std::isfinite(v) && v > 0, "KESTREL_DOWNLOAD_TIMEOUT='", timeout,
                  "' is not a positive number of seconds; unset it for the default of 30");
    s.stall_seconds = v;
  }
  return s;
}

std::string mirrored_url(const std::string& url, const DownloadSettings& settings) {
  return settings.mirror.empty() ? url : settings.mirror + "/" + url_file_name(url);
}

std::string format_size(double bytes) {
  static const char* const units[] = {"", "k", "M", "G", "T", "P"};
  char buf[32];
  for (const char* unit : units) {
    if (std::abs(bytes) < 999.5) {
      const char* f = std::abs(bytes) < 9.995 ? "%1.2f%s" : std::abs(bytes) < 99.95 ? "%2.1f%s" : "%3.0f%s";
      std::snprintf(buf, sizeof buf, f, bytes, unit);
      return buf;
    }
    bytes /= 1024;
  }
  std::snprintf(buf, sizeof buf, "%3.1fE", bytes);
  return buf;
}

std::string format_download_bar(uint64_t done, uint64_t total, double seconds) {
  const std::string rate = seconds > 0 ? str(", ", format_size(done / seconds), "B/s") : std::string();
  if (total == 0) return str(format_size(static_cast<double>(done)), "B ", format_interval(seconds), rate);
  // format_bar's percentage and cells (" 40%|████      |"), then sizes in place of its counts.
  const std::string bar = format_bar(static_cast<int64_t>(done), static_cast<int64_t>(total), seconds);
  const std::string cells = bar.substr(0, bar.find('|', bar.find('|') + 1) + 1);
  const std::string left =
      done > 0 ? format_interval(seconds / done * static_cast<double>(total > done ? total - done : 0)) : "?";
  return str(cells, " ", format_size(static_cast<double>(done)), "/", format_size(static_cast<double>(total)), " ",
             format_interval(seconds), "<", left, rate);
}

uint64_t download_with_progress(const std::string& url, const std::string& path, const std::string& manual,
                                const DownloadSettings& settings, const Console& out, const std::string& shown) {
  out.line("Downloading ", url, " to ", shown.empty() ? path : shown, "...");
  const auto start = std::chrono::steady_clock::now();
  ProgressCadence cadence = out.cadence();
  DownloadOptions options;
  options.stall_seconds = settings.stall_seconds;
  options.stall_advice = "set KESTREL_DOWNLOAD_TIMEOUT to more seconds to wait longer";
  options.manual = manual;
  options.progress = [&](uint64_t done, uint64_t total, bool last) {
    // Ctrl-C (or SIGTERM) during a download stops it at the next progress call (at least once a
    // second), not when the file is complete.
    if (StopSignal::pending()) throw Error("interrupted");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // An unknown size counts as not yet done, so the cadence draws by time alone until the end.
    const int64_t of = total > 0 ? static_cast<int64_t>(total) : static_cast<int64_t>(done) + 1;
    // curl reports the full count again until the transfer closes: the end is drawn once, at `last`.
    const bool whole = total > 0 && done >= total;
    if (last || (!whole && cadence.due(static_cast<int64_t>(done), of, seconds)))
      out.progress(format_download_bar(done, total, seconds), last);
  };
  try {
    return download_file(url, path, options);
  } catch (const Error&) {
    if (const int sig = StopSignal::pending())
      throw Interrupted(sig, str("the download of ", url, " was interrupted (", sig == SIGINT ? "SIGINT" : "SIGTERM",
                                 "); nothing was kept"));
    throw;
  }
}

}  // namespace kestrel::yolo
