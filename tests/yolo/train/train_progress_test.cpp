// Training progress: EpochProgress::add keeps running means of the three losses (as the
// reference's mloss = (mloss * i + items) / (i + 1)); RunProgress goes through JSON text (as a
// checkpoint stores it) and back bit-exactly, awkward doubles included, every field landing in its
// own place; an empty object (a checkpoint from before progress existed) gives the defaults; a
// missing field or a negative count is an Error naming the checkpoint. The console line has the
// reference's layout.
#include "yolo/train/train_progress.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

uint64_t bits(double d) { return std::bit_cast<uint64_t>(d); }

RunProgress through_text(const RunProgress& p, const std::string& path = "ckpt.safetensors") {
  return RunProgress::from_json(json::parse(json::dump(p.to_json())), path);
}

RunProgress sample(double m0, double m1, double m2, double best) {
  RunProgress p;
  p.epoch.next_batch = 17;
  p.epoch.mloss[0] = m0;
  p.epoch.mloss[1] = m1;
  p.epoch.mloss[2] = m2;
  p.epoch.seen = 15;
  p.epoch.skipped = 2;
  p.nan_steps = 5;
  p.stopper.best_fitness = best;
  p.stopper.best_epoch = 41;
  p.accumulated = true;
  p.window_nonfinite = true;
  return p;
}

void expect_same(const RunProgress& a, const RunProgress& b) {
  EXPECT_EQ(a.epoch.next_batch, b.epoch.next_batch);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(bits(a.epoch.mloss[k]), bits(b.epoch.mloss[k]))
        << "mloss[" << k << "]: " << a.epoch.mloss[k] << " vs " << b.epoch.mloss[k];
  EXPECT_EQ(a.epoch.seen, b.epoch.seen);
  EXPECT_EQ(a.epoch.skipped, b.epoch.skipped);
  EXPECT_EQ(a.nan_steps, b.nan_steps);
  EXPECT_EQ(bits(a.stopper.best_fitness), bits(b.stopper.best_fitness))
      << a.stopper.best_fitness << " vs " << b.stopper.best_fitness;
  EXPECT_EQ(a.stopper.best_epoch, b.stopper.best_epoch);
  EXPECT_EQ(a.accumulated, b.accumulated);
  EXPECT_EQ(a.window_nonfinite, b.window_nonfinite);
}

}  // namespace

TEST(EpochProgress, AddKeepsRunningMeans) {
  EpochProgress p;
  p.add(1, 2, 3);
  EXPECT_EQ(p.seen, 1);
  EXPECT_EQ(p.mloss[0], 1);
  EXPECT_EQ(p.mloss[1], 2);
  EXPECT_EQ(p.mloss[2], 3);
  p.add(3, 6, 0);
  EXPECT_EQ(p.seen, 2);
  EXPECT_EQ(p.mloss[0], 2);  // small integers: exact
  EXPECT_EQ(p.mloss[1], 4);
  EXPECT_EQ(p.mloss[2], 1.5);
  EXPECT_EQ(p.next_batch, 0) << "add() counts losses, the trainer moves next_batch";
  EXPECT_EQ(p.skipped, 0);

  // A longer run of uneven values: the running mean equals the plain mean to rounding
  // (relative 1e-13 over 100 terms of size ~1).
  EpochProgress q;
  double sum[3] = {0, 0, 0};
  for (int i = 0; i < 100; ++i) {
    const double items[3] = {0.1 * i + 0.05, 1.0 / (i + 1), (i % 7) * 0.333};
    q.add(items[0], items[1], items[2]);
    for (int k = 0; k < 3; ++k) sum[k] += items[k];
  }
  EXPECT_EQ(q.seen, 100);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(q.mloss[k], sum[k] / 100, 1e-13 * std::abs(sum[k] / 100)) << k;
}

TEST(EpochProgress, AddContinuesFromRestoredMeans) {
  // A resumed epoch continues from the saved means and count as if never interrupted.
  EpochProgress whole, first;
  for (int i = 0; i < 5; ++i) {
    whole.add(i, 2 * i, 3 * i);
    if (i < 3) first.add(i, 2 * i, 3 * i);
  }
  EpochProgress resumed;
  resumed.seen = first.seen;
  for (int k = 0; k < 3; ++k) resumed.mloss[k] = first.mloss[k];
  for (int i = 3; i < 5; ++i) resumed.add(i, 2 * i, 3 * i);
  EXPECT_EQ(resumed.seen, whole.seen);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(bits(resumed.mloss[k]), bits(whole.mloss[k])) << k;
}

TEST(RunProgress, JsonTextRoundTripIsBitExact) {
  const std::vector<std::vector<double>> values = {
      {0.1 + 0.2, 1e-300, 123456.789, 0.7000000000000001},
      {1.0 / 3.0, 2.0, 1e300, 0.0},                       // 2.0 is written as "2" (a JSON integer)
      {2.2250738585072014e-308, 9007199254740993.0, 0.1, -0.25},  // smallest normal; 2^53 + 1
      {1e19, 123456789012345678.0, 5e-5, 0.6941176470588235},
  };
  for (const auto& v : values) {
    const RunProgress p = sample(v[0], v[1], v[2], v[3]);
    SCOPED_TRACE(json::dump(p.to_json()));
    expect_same(through_text(p), p);
  }
  // Each field lands in its own place (distinct values everywhere).
  const RunProgress back = through_text(sample(0.5, 0.25, 0.125, 0.75));
  EXPECT_EQ(back.epoch.next_batch, 17);
  EXPECT_EQ(back.epoch.seen, 15);
  EXPECT_EQ(back.epoch.skipped, 2);
  EXPECT_EQ(back.nan_steps, 5);
  EXPECT_EQ(back.stopper.best_epoch, 41);
  EXPECT_EQ(back.stopper.best_fitness, 0.75);
  EXPECT_EQ(back.epoch.mloss[0], 0.5);
  EXPECT_EQ(back.epoch.mloss[2], 0.125);
  EXPECT_TRUE(back.accumulated);
  EXPECT_TRUE(back.window_nonfinite);

  RunProgress plain;  // and the defaults themselves
  expect_same(through_text(plain), plain);
  EXPECT_FALSE(through_text(plain).accumulated);
}

// The dataset fingerprint travels with the progress; a checkpoint without one reads as absent.
TEST(RunProgress, DatasetFingerprintRoundTripsAndMayBeAbsent) {
  RunProgress p = sample(0.5, 0.25, 0.125, 0.75);
  EXPECT_FALSE(through_text(p).dataset.has_value());
  p.dataset = DatasetFingerprint{128, "0123456789abcdef"};
  const RunProgress back = through_text(p);
  ASSERT_TRUE(back.dataset.has_value());
  EXPECT_EQ(*back.dataset, *p.dataset);
  json::Value damaged = json::parse(R"({"next_batch": 1, "mloss": [0, 0, 0], "seen": 1, "skipped": 0,
      "nan_steps": 0, "stopper_best_fitness": 0, "stopper_best_epoch": 0, "accumulated": false,
      "dataset": {"images": 3}})");
  EXPECT_THROW(RunProgress::from_json(damaged, "ckpt.safetensors"), Error);
}

// --image-weights' per-class mAPs travel bit for bit (a resumed run draws with them), and are
// absent without it.
TEST(RunProgress, ClassMapsRoundTripAndMayBeAbsent) {
  RunProgress p = sample(0.5, 0.25, 0.125, 0.75);
  EXPECT_TRUE(through_text(p).class_maps.empty());
  EXPECT_EQ(p.to_json().find("class_maps"), nullptr);
  p.class_maps = {0.0, 1.0 / 3.0, 0.123456789012345678, 1.0};
  const RunProgress back = through_text(p);
  ASSERT_EQ(back.class_maps.size(), p.class_maps.size());
  for (size_t c = 0; c < p.class_maps.size(); ++c) EXPECT_EQ(bits(back.class_maps[c]), bits(p.class_maps[c])) << c;
}

// A data-parallel run's settled bucket layout travels whole (a resumed run adopts it), is absent
// for one rank, and a cut outside the order is refused as damage.
TEST(RunProgress, BucketLayoutRoundTripsAndMayBeAbsent) {
  RunProgress p = sample(0.5, 0.25, 0.125, 0.75);
  EXPECT_FALSE(through_text(p).bucket_layout.has_value());
  EXPECT_EQ(p.to_json().find("bucket_layout"), nullptr);
  p.bucket_layout = dist::Reducer::SettledLayout{{"model.24.m.0.bias", "model.0.conv.weight", "model.1.bn.weight"},
                                                 {false, true, false}, 4.0, 0.25};
  RunProgress back = through_text(p);
  ASSERT_TRUE(back.bucket_layout.has_value());
  EXPECT_EQ(back.bucket_layout->order, p.bucket_layout->order);
  EXPECT_EQ(back.bucket_layout->cuts, p.bucket_layout->cuts);
  EXPECT_EQ(back.bucket_layout->bucket_cap_mb, 4.0);
  EXPECT_EQ(back.bucket_layout->edge_bucket_cap_mb, 0.25);
  p.bucket_layout->cuts.clear();  // no timed cuts: none come back
  back = through_text(p);
  ASSERT_TRUE(back.bucket_layout.has_value());
  EXPECT_TRUE(back.bucket_layout->cuts.empty());
  json::Value damaged = json::parse(R"({"next_batch": 1, "mloss": [0, 0, 0], "seen": 1, "skipped": 0,
      "nan_steps": 0, "stopper_best_fitness": 0, "stopper_best_epoch": 0, "accumulated": false,
      "bucket_layout": {"order": ["a", "b"], "cuts": [2], "bucket_cap_mb": 4, "edge_bucket_cap_mb": 0.25}})");
  EXPECT_THROW(RunProgress::from_json(damaged, "ckpt.safetensors"), Error);
}

TEST(RunProgress, EmptyObjectGivesDefaults) {
  for (const json::Value& v : {json::Value(json::Object{}), json::parse("{}"), json::Value()}) {
    const RunProgress p = RunProgress::from_json(v, "old.safetensors");
    EXPECT_EQ(p.epoch.next_batch, 0);
    EXPECT_EQ(p.epoch.seen, 0);
    EXPECT_EQ(p.epoch.skipped, 0);
    for (double m : p.epoch.mloss) EXPECT_EQ(m, 0.0);
    EXPECT_EQ(p.nan_steps, 0);
    EXPECT_EQ(p.stopper.best_fitness, 0.0);
    EXPECT_EQ(p.stopper.best_epoch, 0);
    EXPECT_FALSE(p.accumulated);
    EXPECT_FALSE(p.window_nonfinite);
  }
}

TEST(RunProgress, MissingOrDamagedFieldIsAnErrorNamingTheFile) {
  const std::string path = "runs/train/exp/weights/last.safetensors";
  const json::Object full = sample(0.5, 0.25, 0.125, 0.75).to_json().as_object();
  ASSERT_EQ(full.size(), 9u) << "a new field: extend this test";
  for (size_t drop = 0; drop < full.size(); ++drop) {
    json::Object partial = full;
    const std::string key = partial[drop].first;
    partial.erase(partial.begin() + static_cast<std::ptrdiff_t>(drop));
    if (key == "window_nonfinite") {  // optional: checkpoints from before it existed lack it
      EXPECT_FALSE(RunProgress::from_json(json::Value(partial), path).window_nonfinite);
      continue;
    }
    try {
      RunProgress::from_json(json::Value(partial), path);
      ADD_FAILURE() << "no error without '" << key << "'";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(path), std::string::npos) << m;
      EXPECT_NE(m.find(key), std::string::npos) << m;
    }
  }
  auto with = [&](const std::string& key, json::Value v) {
    json::Object o = full;
    for (auto& [k, value] : o)
      if (k == key) value = std::move(v);
    return json::Value(std::move(o));
  };
  EXPECT_THROW(RunProgress::from_json(with("mloss", json::Array{json::Value(1.0), json::Value(2.0)}), path), Error);
  EXPECT_THROW(RunProgress::from_json(with("next_batch", json::Value(int64_t{-1})), path), Error);
  EXPECT_THROW(RunProgress::from_json(with("seen", json::Value(int64_t{-3})), path), Error);
  EXPECT_THROW(RunProgress::from_json(with("accumulated", json::Value("yes")), path), Error);
  EXPECT_THROW(RunProgress::from_json(with("window_nonfinite", json::Value("yes")), path), Error);
  try {
    RunProgress::from_json(with("next_batch", json::Value(int64_t{-1})), path);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// The reference's columns: ('%11s' * 2 + '%11.4g' * 5) % (f'{epoch}/{epochs - 1}', f'{mem:.3g}G',
// *mloss, targets, imgsz), then ": " and the bar (format_bar, tested in console_test).
TEST(ProgressLine, ReferenceLayout) {
  EpochProgress p;
  p.mloss[0] = 0.1034;
  p.mloss[1] = 0.06011;
  p.mloss[2] = 0.02433;
  EXPECT_EQ(progress_line(3, 100, 0.512, p, 57, 640, 12, 30, 5.43),
            "       3/99     0.512G     0.1034    0.06011    0.02433         57        640:  40%|████      | "
            "12/30 00:05<00:08");
  EXPECT_EQ(progress_line(0, 3, 0, EpochProgress{}, 1234567, 320, 0, 8, 0).substr(0, 77),
            "        0/2         0G          0          0          0  1.235e+06        320");
}
