// Reading TensorBoard event files back in tests, apart from the writer's code: the TFRecord
// framing parsed byte by byte with both masked CRC32Cs checked (crc32c itself is checked against
// published values in crc32c_test), each record decoded as a tensorflow.Event.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensorboard/crc32c.h"
#include "tensorboard/proto/event.pb.h"

namespace kestrel::testing {

struct EventFile {
  std::vector<tensorflow::Event> events;
  std::string error;  // the first framing, CRC or decoding problem; empty when none
};

inline uint64_t read_le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

inline EventFile parse_event_records(const std::string& bytes) {
  EventFile out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) return out.error = "truncated header at byte " + std::to_string(at), out;
    const uint64_t length = read_le(bytes, at, 8);
    if (read_le(bytes, at + 8, 4) != tensorboard::masked_crc32c(bytes.data() + at, 8))
      return out.error = "length CRC mismatch at byte " + std::to_string(at), out;
    if (bytes.size() - at - 12 < length + 4) return out.error = "truncated record at byte " + std::to_string(at), out;
    const char* data = bytes.data() + at + 12;
    if (read_le(bytes, at + 12 + length, 4) != tensorboard::masked_crc32c(data, length))
      return out.error = "data CRC mismatch at byte " + std::to_string(at), out;
    tensorflow::Event e;
    if (!e.ParseFromArray(data, static_cast<int>(length)))
      return out.error = "record at byte " + std::to_string(at) + " is no Event", out;
    out.events.push_back(std::move(e));
    at += 12 + length + 4;
  }
  return out;
}

inline std::string read_binary(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline EventFile read_event_file(const std::filesystem::path& p) { return parse_event_records(read_binary(p)); }

// The event files of a run directory (TensorBoard reads every file whose name holds "tfevents").
inline std::vector<std::filesystem::path> event_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path());
  return out;
}

// tag -> (step, value) of every scalar, in file order.
inline std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars(const EventFile& f) {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> out;
  for (const tensorflow::Event& e : f.events)
    for (const tensorflow::Summary::Value& v : e.summary().value())
      if (v.has_simple_value()) out[v.tag()].emplace_back(e.step(), v.simple_value());
  return out;
}

// What TensorBoard shows for a run directory's scalars: its event files in name order, a
// SessionLog START at step S dropping what came before at steps >= S. Empty with `error` set
// when a file does not parse.
inline std::map<std::string, std::vector<std::pair<int64_t, float>>> run_scalars(const std::filesystem::path& dir,
                                                                                 std::string* error) {
  std::vector<std::filesystem::path> files = event_files(dir);
  std::sort(files.begin(), files.end());
  std::map<std::string, std::vector<std::pair<int64_t, float>>> out;
  for (const auto& path : files) {
    const EventFile f = read_event_file(path);
    if (!f.error.empty()) return *error = path.string() + ": " + f.error, decltype(out){};
    for (const tensorflow::Event& e : f.events) {
      if (e.has_session_log() && e.session_log().status() == tensorflow::SessionLog::START)
        for (auto& [tag, series] : out)
          std::erase_if(series, [&](const std::pair<int64_t, float>& p) { return p.first >= e.step(); });
      for (const tensorflow::Summary::Value& v : e.summary().value())
        if (v.has_simple_value()) out[v.tag()].emplace_back(e.step(), v.simple_value());
    }
  }
  return out;
}

}  // namespace kestrel::testing
