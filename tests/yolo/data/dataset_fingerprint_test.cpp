// The fingerprint follows the image list (its order and every path) and nothing else; a resume
// inside an epoch over a changed list is refused with both counts and the ways on, at an epoch
// boundary it is only reported, and a checkpoint without a fingerprint still resumes, saying so
// (unless the split no longer reaches its batch).
#include "yolo/data/dataset_fingerprint.h"

#include <string>
#include <vector>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::error_of;

namespace {

std::vector<data::ImageRecord> records(const std::vector<std::string>& paths) {
  std::vector<data::ImageRecord> out;
  for (const std::string& p : paths) {
    data::ImageRecord r;
    r.image_path = p;
    out.push_back(r);
  }
  return out;
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DatasetFingerprint, FollowsThePathsAndTheirOrder) {
  const DatasetFingerprint ab = dataset_fingerprint(records({"/d/a.jpg", "/d/b.jpg"}));
  EXPECT_EQ(ab.images, 2);
  EXPECT_EQ(ab.digest.size(), 16u);
  EXPECT_EQ(ab, dataset_fingerprint(records({"/d/a.jpg", "/d/b.jpg"})));
  EXPECT_NE(ab, dataset_fingerprint(records({"/d/b.jpg", "/d/a.jpg"})));
  EXPECT_NE(ab.digest, dataset_fingerprint(records({"/d/a.jpg/d", "/b.jpg"})).digest);
  EXPECT_NE(ab, dataset_fingerprint(records({"/d/a.jpg", "/d/b.jpg", "/d/c.jpg"})));
  auto labelled = records({"/d/a.jpg", "/d/b.jpg"});
  labelled[0].boxes.push_back({0, 0.5f, 0.5f, 0.1f, 0.1f});  // labels are no part of the index
  EXPECT_EQ(ab, dataset_fingerprint(labelled));
}

TEST(DatasetFingerprint, MidEpochResumeNeedsTheSameImages) {
  const DatasetFingerprint six = dataset_fingerprint(records({"a", "b", "c", "d", "e", "f"}));
  const DatasetFingerprint four = dataset_fingerprint(records({"a", "b", "c", "d"}));
  const DatasetFingerprint six_other = dataset_fingerprint(records({"a", "b", "c", "d", "e", "g"}));
  EXPECT_EQ(check_resume_dataset(six, six, 3, 6, "last.safetensors"), "");
  const std::string shrank = error_of([&] { check_resume_dataset(six, four, 3, 4, "w/last.safetensors"); });
  EXPECT_TRUE(mentions(shrank, "stopped 3 batches into an epoch") &&
              mentions(shrank, "had 6 images then and has 4 now") &&
              mentions(shrank, "--weights w/last.safetensors") && mentions(shrank, "from scratch"))
      << shrank;
  const std::string swapped = error_of([&] { check_resume_dataset(six, six_other, 1, 6, "l.safetensors"); });
  EXPECT_TRUE(mentions(swapped, "still has 6 images, but a different list of files")) << swapped;
  // At an epoch boundary no order is pending: the change is reported and the run goes on.
  EXPECT_TRUE(mentions(check_resume_dataset(six, four, 0, 4, "l.safetensors"), "had 6 images then and has 4 now"));
}

// A checkpoint from before fingerprints resumes, saying that nothing could be checked, unless
// the split no longer reaches the batch it stopped at.
TEST(DatasetFingerprint, CheckpointsWithoutAFingerprintResumeWithANote) {
  const DatasetFingerprint four = dataset_fingerprint(records({"a", "b", "c", "d"}));
  EXPECT_TRUE(mentions(check_resume_dataset(std::nullopt, four, 2, 4, "old.safetensors"),
                       "old.safetensors predates dataset fingerprints"));
  EXPECT_EQ(check_resume_dataset(std::nullopt, four, 0, 4, "old.safetensors"), "");
  const std::string past_end = error_of([&] { check_resume_dataset(std::nullopt, four, 6, 4, "old.safetensors"); });
  EXPECT_TRUE(mentions(past_end, "stopped 6 batches into an epoch, but the train split now makes only 4") &&
              mentions(past_end, "--weights old.safetensors"))
      << past_end;
}
