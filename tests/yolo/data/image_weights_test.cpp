// --image-weights against the reference's own numbers (tests/yolo/data/image_weights_draws.txt,
// written by scripts/record_image_weights.py with YOLOv5 v7.0's labels_to_class_weights,
// labels_to_image_weights and Python's random.choices, as train.py runs them each epoch): the
// class weights, every epoch's image weights bit for bit, and the drawn indices, for label sets
// from 1 to 80 classes and seeds of one and two 32-bit words. Also CPython's random() itself, a
// draw made without the epochs before it (a resumed run), and the loader order built on it.
#include "yolo/data/image_weights.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/support/testing.h"

namespace {

using namespace kestrel::yolo::data;

struct Epoch {
  std::vector<double> maps, image_weights;
  std::vector<int64_t> draw;
};
struct Case {
  std::string name;
  int nc = 0;
  uint64_t seed = 0;
  std::vector<ImageRecord> records;
  std::vector<double> class_weights;
  std::vector<Epoch> epochs;
};

template <typename T>
std::vector<T> numbers(std::istringstream& in) {
  std::vector<T> out;
  for (T v; in >> v;) out.push_back(v);
  return out;
}

std::vector<Case> recorded() {
  std::ifstream in("tests/yolo/data/image_weights_draws.txt");
  EXPECT_TRUE(in) << "cannot read tests/yolo/data/image_weights_draws.txt (tests run from the source root)";
  std::vector<Case> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string tag;
    fields >> tag;
    if (tag == "case") {
      Case c;
      fields >> c.name >> c.nc >> c.seed;
      out.push_back(c);
    } else if (tag == "labels") {
      ImageRecord r;
      r.image_path = "im" + std::to_string(out.back().records.size()) + ".jpg";
      for (int cls : numbers<int>(fields)) r.boxes.push_back({cls, 0.5f, 0.5f, 0.1f, 0.1f});
      out.back().records.push_back(r);
    } else if (tag == "class_weights") {
      out.back().class_weights = numbers<double>(fields);
    } else if (tag == "maps") {
      out.back().epochs.push_back({numbers<double>(fields), {}, {}});
    } else if (tag == "image_weights") {
      out.back().epochs.back().image_weights = numbers<double>(fields);
    } else if (tag == "draw") {
      out.back().epochs.back().draw = numbers<int64_t>(fields);
    }
  }
  return out;
}

TEST(PythonRandom, IsCPythonsGenerator) {
  PythonRandom r(0);  // random.seed(0); random.random() x 3
  EXPECT_EQ(r.random(), 0.8444218515250481);
  EXPECT_EQ(r.random(), 0.7579544029403025);
  EXPECT_EQ(r.random(), 0.420571580830845);
  PythonRandom words(0);  // random.getrandbits(32) x 2
  EXPECT_EQ(words.next_u32(), 3626764237u);
  EXPECT_EQ(words.next_u32(), 1654615998u);
  EXPECT_EQ(PythonRandom(uint64_t{1} << 40 | 5).random(), 0.5043802970418443);
  PythonRandom skipped(12345);  // 1000 random() calls, then the next
  skipped.discard_randoms(1000);
  EXPECT_EQ(skipped.random(), 0.06275586230470376);
}

TEST(PythonRandom, ChoicesRefuseWeightsWithoutATotal) {
  PythonRandom r(0);
  const std::string e = kestrel::testing::error_of([&] { python_choices(r, {0.0, 0.0}, 2, "test weights"); });
  EXPECT_NE(e.find("test weights: the weights add up to 0"), std::string::npos) << e;
  EXPECT_EQ(python_choices(r, {0.0, 1.0, 0.0}, 5, "w"), (std::vector<int64_t>{1, 1, 1, 1, 1}));
}

TEST(ImageWeights, MatchTheReferenceEpochByEpoch) {
  const std::vector<Case> cases = recorded();
  ASSERT_EQ(cases.size(), 4u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> cw = labels_to_class_weights(c.records, c.nc);
    ASSERT_EQ(cw.size(), c.class_weights.size());
    std::vector<float> model_cw;
    for (size_t k = 0; k < cw.size(); ++k) {
      model_cw.push_back(cw[k] * static_cast<float>(c.nc));
      EXPECT_EQ(model_cw[k], static_cast<float>(c.class_weights[k])) << "class " << k;
    }
    ImageWeights weights(c.records, c.nc, c.seed);
    for (size_t e = 0; e < c.epochs.size(); ++e) {
      const Epoch& want = c.epochs[e];
      EXPECT_EQ(labels_to_image_weights(c.records, c.nc, epoch_class_weights(model_cw, want.maps)), want.image_weights)
          << "epoch " << e;
      weights.set_maps(want.maps);
      EXPECT_EQ(weights.draw(static_cast<int64_t>(e)), want.draw) << "epoch " << e;
    }
    // A run resumed at the last epoch draws what the uninterrupted one drew there.
    ImageWeights resumed(c.records, c.nc, c.seed);
    resumed.set_maps(c.epochs.back().maps);
    EXPECT_EQ(resumed.draw(static_cast<int64_t>(c.epochs.size()) - 1), c.epochs.back().draw);
  }
}

// The loader's order: the sampler's shuffled positions through the epoch's draw; mosaic partners
// are the draw. Images without labels (weight 0) are never drawn.
TEST(ImageWeights, TheLoaderVisitsTheDrawInTheSamplersOrder) {
  const Case c = recorded().front();  // "small": images 2 and 7 have no labels
  auto weights = std::make_shared<ImageWeights>(c.records, c.nc, c.seed);
  const DistributedSampler sampler(static_cast<int64_t>(c.records.size()), 0, 1, true, 11);
  const EpochOrder order = image_weighted_order(sampler, weights);
  ASSERT_TRUE(order.partners);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    DistributedSampler at = sampler;
    at.set_epoch(epoch);
    const std::vector<int64_t> drawn = order.partners(epoch), shuffled = at.indices(), visit = order.indices(epoch);
    ASSERT_EQ(visit.size(), shuffled.size());
    for (size_t j = 0; j < visit.size(); ++j) EXPECT_EQ(visit[j], drawn[shuffled[j]]);
    for (int64_t i : visit) EXPECT_TRUE(i != 2 && i != 7) << "an image without labels was drawn";
  }
  EXPECT_EQ(order.partners(0), c.epochs[0].draw);
}

}  // namespace
