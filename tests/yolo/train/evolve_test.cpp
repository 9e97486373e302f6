// Hyperparameter evolution (yolo/train/evolve.h): the reference's mutation scheme and bounds, evolve.csv
// and hyp_evolve.yaml in its format, bad files refused clearly, and `kestrel train --evolve N`
// end to end on the synthetic set.
#include "yolo/train/evolve.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "tests/support/cli.h"
#include "tests/yolo/train/seg_dataset.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_evolve_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TrainResults results(double map50, double map) { return {0.5, 0.4, map50, map, 0.05, 0.02, 0.01}; }
TrainResults seg_results(double map50, double map, double mask_map50, double mask_map) {
  TrainResults r = results(map50, map);
  r.segment = true;
  r.mask_precision = 0.45, r.mask_recall = 0.35, r.mask_map50 = mask_map50, r.mask_map = mask_map;
  r.seg_loss = 0.03;
  return r;
}

}  // namespace

TEST(Evolve, GenesAreTheReferenceKeysInFileOrderWithTheirBounds) {
  const auto& genes = evolve_genes();
  ASSERT_EQ(genes.size(), 28u);
  EXPECT_STREQ(genes.front().key, "lr0");
  EXPECT_STREQ(genes.back().key, "copy_paste");
  const Hyp defaults;
  for (const EvolveGene& g : genes) {
    EXPECT_LE(g.lower, g.upper) << g.key;
    EXPECT_NO_THROW(defaults.get(g.key)) << g.key;  // every gene is a hyp key
  }
}

TEST(Evolve, ConstrainClipsToBoundsAndRoundsToFiveDecimals) {
  Hyp h;
  h.lr0 = 0.5;                 // above 0.1
  h.momentum = 0.1;            // below 0.6
  h.box = 0.0512345678;        // inside: rounded
  h.label_smoothing = 0.123456789;  // not evolved: untouched
  const Hyp c = constrain_hyp(h);
  EXPECT_DOUBLE_EQ(c.lr0, 0.1);
  EXPECT_DOUBLE_EQ(c.momentum, 0.6);
  EXPECT_DOUBLE_EQ(c.box, 0.05123);
  EXPECT_DOUBLE_EQ(c.label_smoothing, 0.123456789);
}

TEST(Evolve, CsvRoundTripsInTheReferenceFormat) {
  const fs::path dir = scratch("csv");
  const std::string csv = (dir / "evolve.csv").string();
  append_evolve_csv(csv, results(0.3, 0.2), Hyp{});
  append_evolve_csv(csv, results(0.6, 0.5), constrain_hyp(Hyp{}));
  const std::string text = read(csv);
  EXPECT_EQ(text.substr(0, 21), "   metrics/precision,");  // '%20s' names
  const EvolveTable t = read_evolve_csv(csv);
  ASSERT_EQ(t.rows.size(), 2u);
  ASSERT_EQ(t.keys.size(), 35u);
  EXPECT_EQ(t.keys[7], "lr0");
  EXPECT_DOUBLE_EQ(t.rows[1][2], 0.6);
  EXPECT_DOUBLE_EQ(t.rows[0][7], 0.01);
  EXPECT_NEAR(evolve_fitness(t.rows[1]), 0.1 * 0.6 + 0.9 * 0.5, 1e-12);

  const std::string yaml = (dir / "hyp_evolve.yaml").string();
  EXPECT_EQ(write_hyp_evolve_yaml(yaml, t), 1u);
  const Hyp best = load_hyp(yaml);  // a hyp file train --hyp accepts
  EXPECT_DOUBLE_EQ(best.lr0, 0.01);
  EXPECT_NE(read(yaml).find("# Best generation: 1"), std::string::npos);
}

// A segmentation evolution's rows: 12 results (boxes', masks', four val losses), ranked by the seg
// fitness; a detection file is not appended to by a segmentation run.
TEST(Evolve, SegmentationRowsHoldBoxAndMaskResults) {
  const fs::path dir = scratch("seg_csv");
  const std::string csv = (dir / "evolve.csv").string();
  append_evolve_csv(csv, seg_results(0.6, 0.5, 0.1, 0.05), Hyp{});  // fitness 0.51 + 0.055
  append_evolve_csv(csv, seg_results(0.3, 0.2, 0.5, 0.4), constrain_hyp(Hyp{}));  // 0.21 + 0.41: the best
  const EvolveTable t = read_evolve_csv(csv);
  ASSERT_EQ(t.results, 12u);
  ASSERT_EQ(t.keys.size(), 40u);
  EXPECT_EQ(t.keys[4], "metrics/precision(M)");
  EXPECT_EQ(t.keys[9], "val/seg_loss");
  EXPECT_EQ(t.keys[12], "lr0");
  EXPECT_DOUBLE_EQ(t.rows[0][7], 0.05);
  EXPECT_DOUBLE_EQ(t.rows[0][9], 0.03);
  EXPECT_NEAR(t.fitness(0), 0.1 * 0.6 + 0.9 * 0.5 + 0.1 * 0.1 + 0.9 * 0.05, 1e-12);
  EXPECT_NEAR(t.fitness(1), 0.1 * 0.3 + 0.9 * 0.2 + 0.1 * 0.5 + 0.9 * 0.4, 1e-12);
  const std::string yaml = (dir / "hyp_evolve.yaml").string();
  EXPECT_EQ(write_hyp_evolve_yaml(yaml, t), 1u);
  EXPECT_DOUBLE_EQ(load_hyp(yaml).lr0, 0.01);
  std::mt19937_64 rng(3);
  const Hyp child = mutate_hyp(t, Hyp{}, rng);  // parents' keys read after the 12 results
  EXPECT_GE(child.lr0, 1e-5);
  EXPECT_LE(child.lr0, 0.1);
  try {
    append_evolve_csv(csv, results(0.3, 0.2), Hyp{});
    ADD_FAILURE() << "a detection row went into a segmentation evolve.csv";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("segmentation generations"), std::string::npos) << e.what();
  }
}

TEST(Evolve, MutationStaysInBoundsKeepsFixedKeysAndIsRepeatable) {
  const fs::path dir = scratch("mutate");
  const std::string csv = (dir / "evolve.csv").string();
  append_evolve_csv(csv, results(0.3, 0.2), constrain_hyp(Hyp{}));
  const EvolveTable table = read_evolve_csv(csv);
  int changed_somewhere = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 rng(seed), again(seed);
    const Hyp m = mutate_hyp(table, Hyp{}, rng);
    EXPECT_EQ(m.values(), mutate_hyp(table, Hyp{}, again).values()) << "seed " << seed;
    bool changed = false;
    for (const EvolveGene& g : evolve_genes()) {
      const double before = Hyp{}.get(g.key), after = m.get(g.key);
      EXPECT_GE(after, g.lower) << g.key;
      EXPECT_LE(after, g.upper) << g.key;
      if (g.gain == 0) {
        EXPECT_EQ(after, constrain_hyp(Hyp{}).get(g.key)) << g.key;
      }
      // A multiplier lies in [0.3, 3] before clipping.
      if (before > 0 && after > g.lower && after < g.upper) {
        EXPECT_GE(after, 0.3 * before - 1e-5) << g.key;
        EXPECT_LE(after, 3.0 * before + 1e-5) << g.key;
      }
      changed = changed || std::abs(after - before) > 1e-12;
    }
    changed_somewhere += changed;
  }
  // The draw repeats until some multiplier differs from 1; rounding to 5 decimals can still undo
  // a tiny change, so nearly every generation differs from its parent.
  EXPECT_GE(changed_somewhere, 45);
}

TEST(Evolve, ParentsComeFromTheFittestFive) {
  const fs::path dir = scratch("parents");
  const std::string csv = (dir / "evolve.csv").string();
  // Seven generations; the two least fit have lr0 = 0.09, which no mutation of the fittest five
  // (lr0 = 0.001) can reach (multipliers stay within [0.3, 3]).
  for (int i = 0; i < 7; ++i) {
    Hyp h;
    h.lr0 = i < 5 ? 0.001 : 0.09;
    append_evolve_csv(csv, results(i < 5 ? 0.5 + 0.01 * i : 0.01, i < 5 ? 0.4 : 0.001), h);
  }
  const EvolveTable table = read_evolve_csv(csv);
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::mt19937_64 rng(seed);
    EXPECT_LE(mutate_hyp(table, Hyp{}, rng).lr0, 0.003 + 1e-9) << "seed " << seed;
  }
}

TEST(Evolve, ForeignOrDamagedCsvIsRefusedNamingTheFile) {
  const fs::path dir = scratch("bad");
  const fs::path other = dir / "evolve.csv";
  std::ofstream(other) << "a,b,c\n1,2,3\n";
  try {
    read_evolve_csv(other.string());
    ADD_FAILURE() << "foreign columns accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(other.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("columns"), std::string::npos) << e.what();
  }
  const std::string csv = (dir / "ok.csv").string();
  append_evolve_csv(csv, results(0.3, 0.2), Hyp{});
  std::ofstream(csv, std::ios::app) << "1,2,oops\n";
  try {
    read_evolve_csv(csv);
    ADD_FAILURE() << "a damaged row accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

TEST(EvolveCommand, RunsGenerationsAndWritesTheReferenceOutputs) {
  const fs::path project = scratch("cli");
  const auto r = kestrel::testing::run_kestrel(
      "train --evolve 3 --epochs 1 --img-size 64 --batch-size 4 --max-batches 2 --workers 1 "
      "--cfg models/yolov5n.yaml --device cpu --seed 7 --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path run = project / "exp";
  for (const char* f : {"evolve.csv", "hyp_evolve.yaml", "evolve.png", "results.csv"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  // As the reference: no weights and no training plots while evolving.
  EXPECT_FALSE(fs::exists(run / "weights" / "last.safetensors"));
  EXPECT_FALSE(fs::exists(run / "labels.jpg"));
  const EvolveTable t = read_evolve_csv((run / "evolve.csv").string());
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_NE(std::vector<double>(t.rows[0].begin() + 7, t.rows[0].end()),
            std::vector<double>(t.rows[1].begin() + 7, t.rows[1].end()))
      << "the second generation was not mutated";
  EXPECT_NE(r.out.find("Hyperparameter evolution finished 3 generations"), std::string::npos) << r.out;

  // Bad values and DDP are refused.
  EXPECT_NE(kestrel::testing::run_kestrel("train --evolve 0 --device cpu").code, 0);
  const auto ddp = kestrel::testing::run_kestrel("train --evolve 2 --nproc-per-node 2 --device cpu");
  EXPECT_NE(ddp.code, 0);
  EXPECT_NE(ddp.out.find("DDP"), std::string::npos) << ddp.out;
}

// kestrel segment train --evolve: generations of the segmentation trainer, evolve.csv with the
// boxes' and masks' results.
TEST(EvolveCommand, SegmentationEvolves) {
  const fs::path project = scratch("seg_cli");
  const fs::path data_yaml = kestrel::testing::write_seg_dataset(project / "data", 8);
  const auto r = kestrel::testing::run_kestrel(
      "segment train --evolve 2 --epochs 1 --img-size 64 --batch-size 4 --workers 1 --cfg yolov5n-seg.yaml "
      "--device cpu --seed 7 --data " + data_yaml.string() + " --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const EvolveTable t = read_evolve_csv((project / "exp" / "evolve.csv").string());
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.results, 12u);
  EXPECT_TRUE(fs::exists(project / "exp" / "evolve.png"));
  EXPECT_NE(r.out.find("Usage example: kestrel segment train --hyp"), std::string::npos) << r.out;
}
