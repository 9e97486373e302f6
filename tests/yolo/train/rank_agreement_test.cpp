// Rank agreement: run_fingerprint is a pure function of the training index, the parameter shapes
// and the flags (equal inputs, equal fingerprints), and a single differing image path, image size,
// box class or coordinate (one float ulp), parameter name or shape (even with the same element
// count) or flag value changes it; fingerprint_difference names the part that differs ("training
// dataset index", "model", "--<flag>") and is "" for equal fingerprints; check_ranks_agree is a
// no-op in a single-process run (no process group is touched).
#include "yolo/train/rank_agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

using Params = std::vector<std::pair<std::string, Shape>>;
using Flags = std::vector<std::pair<std::string, std::string>>;

std::vector<data::ImageRecord> index() {
  std::vector<data::ImageRecord> out;
  for (int i = 0; i < 4; ++i) {
    data::ImageRecord r;
    r.image_path = "datasets/coco128/images/train2017/00000000000" + std::to_string(i) + ".jpg";
    r.width = 640;
    r.height = 480 + i;
    for (int b = 0; b <= i; ++b) r.boxes.push_back({b, 0.1f * b + 0.05f, 0.5f, 0.25f, 0.125f + 0.01f * i});
    out.push_back(r);
  }
  return out;
}

Params params() {
  return {{"model.0.conv.weight", {32, 3, 6, 6}}, {"model.0.bn.weight", {32}}, {"model.24.m.0.bias", {255}}};
}

Flags flags() { return {{"epochs", "100"}, {"batch_size", "16"}, {"imgsz", "640"}}; }

}  // namespace

TEST(RankAgreement, EqualInputsGiveEqualFingerprints) {
  const RunFingerprint a = run_fingerprint(index(), params(), flags());
  const RunFingerprint b = run_fingerprint(index(), params(), flags());
  EXPECT_EQ(a.dataset, b.dataset);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(fingerprint_difference(a, b), "");
  // The summary counts are right: 4 images with 1 + 2 + 3 + 4 boxes; 32*3*6*6 + 32 + 255 values.
  EXPECT_EQ(a.dataset.rfind("4 images, 10 boxes, digest ", 0), 0u) << a.dataset;
  EXPECT_EQ(a.model.rfind("3 tensors, 3743 parameters, digest ", 0), 0u) << a.model;
}

TEST(RankAgreement, OneDifferenceInTheIndexChangesTheDataset) {
  const RunFingerprint base = run_fingerprint(index(), params(), flags());
  const std::vector<std::pair<std::string, std::function<void(std::vector<data::ImageRecord>&)>>> changes = {
      {"one image path", [](auto& r) { r[2].image_path = "datasets/coco128/images/train2017/000000000002.png"; }},
      {"one path character", [](auto& r) { r[1].image_path[r[1].image_path.size() - 5] = '7'; }},
      {"one width", [](auto& r) { r[3].width = 641; }},
      {"one height", [](auto& r) { r[0].height = 481; }},
      {"one box class", [](auto& r) { r[3].boxes[2].cls = 7; }},
      {"one box coordinate by one ulp",
       [](auto& r) { r[2].boxes[1].w = std::nextafter(r[2].boxes[1].w, 1.0f); }},
      {"one box height", [](auto& r) { r[1].boxes[0].h = 0.5f; }},
      {"two images swapped", [](auto& r) { std::swap(r[0], r[1]); }},
      {"one box moved to another image",
       [](auto& r) {
         r[1].boxes.push_back(r[2].boxes.back());
         r[2].boxes.pop_back();
       }},
  };
  for (const auto& [what, change] : changes) {
    std::vector<data::ImageRecord> records = index();
    change(records);
    const RunFingerprint other = run_fingerprint(records, params(), flags());
    EXPECT_NE(other.dataset, base.dataset) << what;
    EXPECT_EQ(other.model, base.model) << what;
    const std::string d = fingerprint_difference(base, other);
    EXPECT_NE(d.find("training dataset index"), std::string::npos) << what << ": " << d;
    EXPECT_EQ(d.find("model"), std::string::npos) << what << ": " << d;
  }
}

TEST(RankAgreement, OneDifferenceInTheParametersChangesTheModel) {
  const RunFingerprint base = run_fingerprint(index(), params(), flags());
  const std::vector<std::pair<std::string, std::function<void(Params&)>>> changes = {
      {"one shape, same element count", [](Params& p) { p[0].second = {32, 3, 3, 12}; }},
      {"one dimension", [](Params& p) { p[2].second = {256}; }},
      {"one name", [](Params& p) { p[1].first = "model.0.bn.bias"; }},
      {"two parameters swapped", [](Params& p) { std::swap(p[1], p[2]); }},
      {"one parameter more", [](Params& p) { p.push_back({"model.24.m.1.bias", {255}}); }},
  };
  for (const auto& [what, change] : changes) {
    Params p = params();
    change(p);
    const RunFingerprint other = run_fingerprint(index(), p, flags());
    EXPECT_NE(other.model, base.model) << what;
    EXPECT_EQ(other.dataset, base.dataset) << what;
    const std::string d = fingerprint_difference(base, other);
    EXPECT_NE(d.find("model"), std::string::npos) << what << ": " << d;
    EXPECT_EQ(d.find("training dataset index"), std::string::npos) << what << ": " << d;
  }
}

TEST(RankAgreement, DifferingFlagIsNamed) {
  const RunFingerprint base = run_fingerprint(index(), params(), flags());
  Flags f = flags();
  f[0].second = "300";
  const RunFingerprint other = run_fingerprint(index(), params(), f);
  EXPECT_EQ(other.dataset, base.dataset);
  EXPECT_EQ(other.model, base.model);
  const std::string d = fingerprint_difference(base, other);
  EXPECT_NE(d.find("--epochs"), std::string::npos) << d;
  EXPECT_NE(d.find("'100'"), std::string::npos) << d;
  EXPECT_NE(d.find("'300'"), std::string::npos) << d;
  EXPECT_EQ(d.find("--batch_size"), std::string::npos) << d;
  EXPECT_EQ(d.find("training dataset index"), std::string::npos) << d;

  // A flag only this rank has is reported against rank 0's "(absent)".
  Flags more = flags();
  more.emplace_back("cache", "ram");
  const std::string d2 = fingerprint_difference(base, run_fingerprint(index(), params(), more));
  EXPECT_NE(d2.find("--cache"), std::string::npos) << d2;
  EXPECT_NE(d2.find("(absent)"), std::string::npos) << d2;

  // Everything differing: one line per part.
  std::vector<data::ImageRecord> records = index();
  records.pop_back();
  Params p = params();
  p.pop_back();
  const std::string all = fingerprint_difference(base, run_fingerprint(records, p, f));
  EXPECT_NE(all.find("training dataset index"), std::string::npos) << all;
  EXPECT_NE(all.find("model"), std::string::npos) << all;
  EXPECT_NE(all.find("--epochs"), std::string::npos) << all;
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 3) << all;
}

TEST(RankAgreement, SingleProcessCheckIsANoOp) {
  RankInfo single;  // world 1, no process group: touching it would crash
  ASSERT_EQ(single.world, 1);
  ASSERT_EQ(single.group, nullptr);
  const RunFingerprint mine = run_fingerprint(index(), params(), flags());
  EXPECT_NO_THROW(check_ranks_agree(single, Device::cpu(), mine));
  EXPECT_NO_THROW(check_ranks_agree(single, Device::cpu(), RunFingerprint{}));
}
