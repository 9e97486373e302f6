// Downloads as the CLI makes them: the settings read from the environment, the address a mirror
// turns a URL into, and a transfer with a progress bar on the console (tqdm's byte layout,
// " 40%|████      | 1.55M/3.87M 00:01<00:02, 2.10MB/s"). The transfer itself is
// io/http_download (atomic, stall and truncation checks).
//
// Environment:
//   KESTREL_DOWNLOAD_MIRROR   a base URL (http, https or file) holding the files by name: every
//                             download (release weights, dataset archives) is fetched from
//                             <mirror>/<file name> instead of its own address
//   KESTREL_DOWNLOAD_TIMEOUT  seconds without a byte after which a transfer fails (default 30)
#pragma once
#include <cstdint>
#include <string>

#include "yolo/common/console.h"

namespace kestrel::yolo {

struct DownloadSettings {
  std::string mirror;        // "" when none
  double stall_seconds = 30;
};

// From the environment; a malformed KESTREL_DOWNLOAD_TIMEOUT is refused, naming it.
DownloadSettings download_settings();

// The URL's last path segment, without its query or fragment ("coco128.zip").
std::string url_file_name(const std::string& url);

// `url` itself, or <mirror>/<the URL's file name> when a mirror is set.
std::string mirrored_url(const std::string& url, const DownloadSettings& settings);

// tqdm's unit_scale sizes with binary steps, as torch.hub's download bar: "812", "3.87M", "14.1M".
std::string format_size(double bytes);

// The progress line of a download; total 0 when the size is unknown.
std::string format_download_bar(uint64_t done, uint64_t total, double seconds);

// Prints "Downloading <url> to <shown>..." (`shown`: the path the file will end up at, when the
// caller writes it elsewhere first; "" for `path`), fetches it to `path` with a progress bar on
// `out`, and returns the bytes written. Errors name the URL, the reason and `manual` (what to do
// by hand).
uint64_t download_with_progress(const std::string& url, const std::string& path, const std::string& manual,
                                const DownloadSettings& settings, const Console& out, const std::string& shown = "");

}  // namespace kestrel::yolo
