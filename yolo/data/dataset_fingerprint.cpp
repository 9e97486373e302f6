#include "yolo/data/dataset_fingerprint.h"

#include <cstdio>

#include "base/error.h"

namespace kestrel::yolo {

json::Value DatasetFingerprint::to_json() const {
  return json::Object{{"images", json::Value(images)}, {"digest", json::Value(digest)}};
}

DatasetFingerprint DatasetFingerprint::from_json(const json::Value& v, const std::string& path) {
  const json::Value* images = v.is_object() ? v.find("images") : nullptr;
  const json::Value* digest = v.is_object() ? v.find("digest") : nullptr;
  KESTREL_CHECK(images && digest, "checkpoint '", path,
                "': its dataset fingerprint lacks 'images' or 'digest'; the file is damaged");
  return {images->as_integer(), digest->as_string()};
}

DatasetFingerprint dataset_fingerprint(const std::vector<std::string>& image_paths) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string& path : image_paths)  // with each path's NUL: "ab"+"c" is not "a"+"bc"
    for (size_t i = 0; i <= path.size(); ++i) h = (h ^ static_cast<unsigned char>(path.c_str()[i])) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return {static_cast<int64_t>(image_paths.size()), hex};
}

DatasetFingerprint dataset_fingerprint(const std::vector<data::ImageRecord>& records) {
  std::vector<std::string> paths;
  paths.reserve(records.size());
  for (const data::ImageRecord& r : records) paths.push_back(r.image_path);
  return dataset_fingerprint(paths);
}

std::string check_resume_dataset(const std::optional<DatasetFingerprint>& saved,
                                 const DatasetFingerprint& now, int64_t next_batch,
                                 int64_t batches_now, const std::string& checkpoint) {
  const std::string ways_on = str("Restore the dataset to resume, or start a new run: from scratch, ",
                                  "or from these weights with --weights ", checkpoint);
  if (!saved) {
    if (next_batch == 0) return {};
    // Without a fingerprint only a dataset that shrank past the resume point is visible.
    KESTREL_CHECK(next_batch <= batches_now, "--resume: ", checkpoint, " stopped ", next_batch,
                  " batches into an epoch, but the train split now makes only ", batches_now,
                  " batches per epoch: its images changed since. ", ways_on);
    return str(checkpoint, " predates dataset fingerprints, so whether the train images are ",
               "still the ones it stopped in cannot be checked; resuming ", next_batch,
               " batches into the epoch as if they were");
  }
  if (*saved == now) return {};
  const std::string change =
      saved->images == now.images
          ? str("the train split still has ", now.images, " images, but a different list of files")
          : str("the train split had ", saved->images, " images then and has ", now.images, " now");
  KESTREL_CHECK(next_batch == 0, "--resume: ", checkpoint, " stopped ", next_batch,
                " batches into an epoch, and ", change,
                "; a run resumes inside an epoch only over the same images. ", ways_on);
  return str(change, "; resuming at an epoch boundary, as the reference does");
}

}  // namespace kestrel::yolo
