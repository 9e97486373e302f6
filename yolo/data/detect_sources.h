// What `kestrel detect --source` reads, as the reference's LoadImages and LoadStreams: an image
// or video file, a folder (the files in it, not below), a glob (`*`, `?`, `[..]`; `**` spans
// folders, as Python's recursive glob), a .txt list (each line one of these, relative lines taken
// from the list's folder), a stream URL (rtsp://, rtmp://, http(s):// naming no image or video
// file), or a webcam index ("0").
#pragma once
#include <string>
#include <vector>

namespace kestrel::yolo::data {

enum class SourceKind { kImage, kVideo, kStream };

struct SourceItem {
  std::string path;  // absolute for files; the URL or webcam index for streams
  SourceKind kind = SourceKind::kImage;
};

// The reference's video suffixes (asf avi gif m4v mkv mov mp4 mpeg mpg ts wmv), any case.
bool is_video_path(const std::string& path);
// rtsp://, rtmp://, http(s):// without an image or video suffix, or a webcam index.
bool is_stream_source(const std::string& source);

// Every item of `source`: images first, then videos (each group sorted and without repeats, as
// the reference lists them), then streams in the order given. Throws naming the source when a
// path does not exist, when a URL names an image (downloads are not supported), or when nothing
// usable is found.
std::vector<SourceItem> expand_sources(const std::string& source);

// Python glob semantics on an absolute or relative pattern: matches sorted, hidden names matched
// only by a pattern component starting with '.', `**` as zero or more folders.
std::vector<std::string> glob_paths(const std::string& pattern);

}  // namespace kestrel::yolo::data
