// Which training images a checkpoint was written for. A run interrupted inside an epoch resumes
// at its next batch of the same sampler order, which only means something over the same image
// index: a dataset that shrank or grew since would resume at the wrong images (or past the end).
// The checkpoint therefore carries the index's image count and a digest of its file list, and a
// mid-epoch resume over a different index is refused. At an epoch boundary nothing depends on
// the old order, so a changed dataset is only reported there, as the reference resumes it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/json.h"
#include "yolo/data/records.h"

namespace kestrel::yolo {

struct DatasetFingerprint {
  int64_t images = 0;
  std::string digest;  // FNV-1a 64 of the image paths in index order, 16 hex digits
  bool operator==(const DatasetFingerprint&) const = default;
  json::Value to_json() const;
  static DatasetFingerprint from_json(const json::Value& v, const std::string& path);
};

DatasetFingerprint dataset_fingerprint(const std::vector<data::ImageRecord>& records);
// The same over image paths in index order (a classifier's samples).
DatasetFingerprint dataset_fingerprint(const std::vector<std::string>& image_paths);

// The verdict on resuming `checkpoint` (stopped `next_batch` batches into its epoch; 0 at an
// epoch boundary) with the train split `now`, which makes `batches_now` batches per epoch.
// Throws kestrel::Error, with both counts and the two ways on, for a mid-epoch resume over a
// changed index (for a checkpoint without a fingerprint: one that no longer reaches the resume
// point); otherwise returns a note for the console ("" when there is nothing to say), e.g. that a
// checkpoint predates fingerprints.
std::string check_resume_dataset(const std::optional<DatasetFingerprint>& saved,
                                 const DatasetFingerprint& now, int64_t next_batch,
                                 int64_t batches_now, const std::string& checkpoint);

}  // namespace kestrel::yolo
