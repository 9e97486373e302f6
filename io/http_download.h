// Fetching one file over HTTP(S) with libcurl, for pretrained weights and dataset archives.
// Redirects are followed (GitHub's release assets redirect to a CDN). Only http and https are
// spoken, and file:// for a mirror on disk; a redirect may lead to http(s) only. The body goes to a temporary beside the
// target (io/atomic_file) that is renamed into place only when the whole body has arrived,
// so a failed, stalled, truncated or interrupted transfer leaves no file at the target. A
// refusal names the URL, the reason (the HTTP status, or curl's own words) and `manual`, what to
// do by hand instead.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace kestrel {

struct DownloadOptions {
  // A transfer that receives no byte for this long fails (also the limit for connecting), and
  // the refusal adds `stall_advice` (how to wait longer).
  double stall_seconds = 30;
  std::string stall_advice;
  // Called as bytes arrive (total 0 while the size is unknown), and once more with last = true
  // when the file is complete. It decides itself how often to draw.
  std::function<void(uint64_t done, uint64_t total, bool last)> progress;
  // Appended to every refusal: where to fetch the file by hand and where to put it.
  std::string manual;
};

// Downloads `url` into `path` (its folder must exist) and returns the number of bytes written.
// Refused: an HTTP status of 400 or more, a body shorter than its Content-Length, no byte for
// options.stall_seconds, and every network failure curl reports.
uint64_t download_file(const std::string& url, const std::string& path, const DownloadOptions& options = {});

// Whether a file's first bytes are an HTML page (leading blanks skipped, any case), as a server's
// error or sign-in page sent in place of the file asked for is.
bool looks_like_web_page(std::string_view head);

}  // namespace kestrel
