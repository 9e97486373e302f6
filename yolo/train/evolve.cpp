#include "yolo/train/evolve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "base/error.h"
#include "io/atomic_file.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/common/text_file.h"
#include "yolo/train/train_echo.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

constexpr size_t kParents = 5;     // the fittest rows a parent is drawn from
constexpr double kMutationP = 0.8, kSigma = 0.2;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string cell; std::getline(ss, cell, ',');) out.push_back(trim(cell));
  return out;
}

std::vector<std::string> expected_keys(bool segment) {
  std::vector<std::string> keys = evolve_result_keys(segment);
  for (const EvolveGene& g : evolve_genes()) keys.emplace_back(g.key);
  return keys;
}

std::string row_text(const std::vector<double>& values) {
  std::string line;
  char cell[64];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(cell, sizeof cell, "%s%20.5g", i ? "," : "", values[i]);
    line += cell;
  }
  return line + "\n";
}

// Indices of the rows, fittest first (ties keep file order).
std::vector<size_t> by_fitness(const EvolveTable& table) {
  std::vector<size_t> order(table.rows.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return table.fitness(a) > table.fitness(b);
  });
  return order;
}

// Multipliers for every gene, redrawn until at least one differs from 1.
std::vector<double> draw_multipliers(std::mt19937_64& rng) {
  const std::vector<EvolveGene>& genes = evolve_genes();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  bool any_gain = false;
  for (const EvolveGene& g : genes) any_gain = any_gain || g.gain > 0;
  KESTREL_CHECK(any_gain, "evolve: no key has a mutation gain");
  std::vector<double> v(genes.size(), 1.0);
  while (std::all_of(v.begin(), v.end(), [](double x) { return x == 1.0; })) {
    std::vector<double> mask(genes.size()), noise(genes.size());
    for (double& m : mask) m = uniform(rng) < kMutationP ? 1.0 : 0.0;
    for (double& n : noise) n = normal(rng);
    const double spread = uniform(rng) * kSigma;  // one draw for the whole vector, as the reference
    for (size_t i = 0; i < genes.size(); ++i)
      v[i] = std::clamp(genes[i].gain * mask[i] * noise[i] * spread + 1.0, 0.3, 3.0);
  }
  return v;
}

}  // namespace

const std::vector<EvolveGene>& evolve_genes() {
  // The reference's mutation gains and bounds (train.py's `meta`), without `anchors`.
  static const std::vector<EvolveGene> genes = {
      {"lr0", 1, 1e-5, 1e-1},          {"lrf", 1, 0.01, 1.0},
      {"momentum", 0.3, 0.6, 0.98},    {"weight_decay", 1, 0.0, 0.001},
      {"warmup_epochs", 1, 0.0, 5.0},  {"warmup_momentum", 1, 0.0, 0.95},
      {"warmup_bias_lr", 1, 0.0, 0.2}, {"box", 1, 0.02, 0.2},
      {"cls", 1, 0.2, 4.0},            {"cls_pw", 1, 0.5, 2.0},
      {"obj", 1, 0.2, 4.0},            {"obj_pw", 1, 0.5, 2.0},
      {"iou_t", 0, 0.1, 0.7},          {"anchor_t", 1, 2.0, 8.0},
      {"fl_gamma", 0, 0.0, 2.0},       {"hsv_h", 1, 0.0, 0.1},
      {"hsv_s", 1, 0.0, 0.9},          {"hsv_v", 1, 0.0, 0.9},
      {"degrees", 1, 0.0, 45.0},       {"translate", 1, 0.0, 0.9},
      {"scale", 1, 0.0, 0.9},          {"shear", 1, 0.0, 10.0},
      {"perspective", 0, 0.0, 0.001},  {"flipud", 1, 0.0, 1.0},
      {"fliplr", 0, 0.0, 1.0},         {"mosaic", 1, 0.0, 1.0},
      {"mixup", 1, 0.0, 1.0},          {"copy_paste", 1, 0.0, 1.0}};
  return genes;
}

const std::vector<std::string>& evolve_result_keys(bool segment) {
  static const std::vector<std::string> detect = {
      "metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95",
      "val/box_loss",      "val/obj_loss",   "val/cls_loss"};
  static const std::vector<std::string> seg = {
      "metrics/precision(B)", "metrics/recall(B)", "metrics/mAP_0.5(B)", "metrics/mAP_0.5:0.95(B)",
      "metrics/precision(M)", "metrics/recall(M)", "metrics/mAP_0.5(M)", "metrics/mAP_0.5:0.95(M)",
      "val/box_loss",         "val/seg_loss",      "val/obj_loss",       "val/cls_loss"};
  return segment ? seg : detect;
}

std::vector<double> evolve_result_values(const TrainResults& r) {
  if (!r.segment) return {r.precision, r.recall, r.map50, r.map, r.box_loss, r.obj_loss, r.cls_loss};
  return {r.precision,      r.recall,      r.map50,      r.map,      r.mask_precision, r.mask_recall,
          r.mask_map50,     r.mask_map,    r.box_loss,   r.seg_loss, r.obj_loss,       r.cls_loss};
}

double EvolveTable::fitness(size_t row) const { return evolve_fitness(rows.at(row), results); }

Hyp constrain_hyp(Hyp hyp) {
  for (const EvolveGene& g : evolve_genes()) {
    const double v = std::clamp(hyp.get(g.key), g.lower, g.upper);
    hyp.set(g.key, std::round(v * 1e5) / 1e5);
  }
  return hyp;
}

double evolve_fitness(const std::vector<double>& row, size_t results) {
  const size_t metrics = results == 12 ? 8 : 4;
  KESTREL_CHECK(row.size() >= metrics, "evolve: a row needs the ", metrics, " metrics, got ", row.size(), " values");
  const double boxes = 0.1 * row[2] + 0.9 * row[3];
  return results == 12 ? boxes + 0.1 * row[6] + 0.9 * row[7] : boxes;
}

EvolveTable read_evolve_csv(const std::string& path) {
  std::istringstream in(read_text(path));
  EvolveTable table;
  std::string line;
  KESTREL_CHECK(std::getline(in, line), path, ": empty; delete it to start the evolution afresh");
  table.keys = split_csv(line);
  const bool segment = table.keys == expected_keys(true);
  const std::vector<std::string> want = expected_keys(segment);
  KESTREL_CHECK(table.keys == want, path, ": its columns are not the ", want.size(),
                " this build records (7 results, or segmentation's 12, then ", evolve_genes().front().key, " ... ",
                evolve_genes().back().key, "); it was written by another tool or version. Move it "
                "away, or evolve into a new directory (--name)");
  table.results = evolve_result_keys(segment).size();
  for (int number = 2; std::getline(in, line); ++number) {
    if (trim(line).empty()) continue;
    const std::vector<std::string> cells = split_csv(line);
    KESTREL_CHECK(cells.size() == want.size(), path, ": line ", number, " has ", cells.size(),
                  " values for ", want.size(), " columns; the file is damaged (remove that line)");
    std::vector<double> row;
    for (const std::string& c : cells) {
      char* end = nullptr;
      const double v = std::strtod(c.c_str(), &end);
      KESTREL_CHECK(!c.empty() && end == c.c_str() + c.size() && std::isfinite(v), path,
                    ": line ", number, " has '", c, "' where a number belongs; the file is "
                    "damaged (remove that line)");
      row.push_back(v);
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

void append_evolve_csv(const std::string& path, const TrainResults& r, const Hyp& hyp) {
  std::string text;
  if (fs::exists(path)) {
    const EvolveTable existing = read_evolve_csv(path);
    KESTREL_CHECK(existing.results == evolve_result_keys(r.segment).size(), path, ": it holds ",
                  existing.results == 12 ? "segmentation" : "detection", " generations and this is a ",
                  r.segment ? "segmentation" : "detection", " run; evolve into a new directory (--name)");
    text = read_text(path);
  } else {
    const std::vector<std::string> keys = expected_keys(r.segment);
    char cell[96];
    for (size_t i = 0; i < keys.size(); ++i) {
      std::snprintf(cell, sizeof cell, "%s%20s", i ? "," : "", keys[i].c_str());
      text += cell;
    }
    text += "\n";
  }
  std::vector<double> values = evolve_result_values(r);
  for (const EvolveGene& g : evolve_genes()) values.push_back(hyp.get(g.key));
  write_file_atomic(path, text + row_text(values));
}

Hyp mutate_hyp(const EvolveTable& table, const Hyp& base, std::mt19937_64& rng) {
  KESTREL_CHECK(!table.rows.empty(), "evolve: no earlier generation to mutate");
  const std::vector<size_t> order = by_fitness(table);
  const size_t n = std::min(kParents, order.size());
  std::vector<double> weights(n);
  double lowest = INFINITY;
  for (size_t i = 0; i < n; ++i) lowest = std::min(lowest, table.fitness(order[i]));
  for (size_t i = 0; i < n; ++i) weights[i] = table.fitness(order[i]) - lowest + 1e-6;
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  const std::vector<double>& parent = table.rows[order[pick(rng)]];

  const std::vector<double> v = draw_multipliers(rng);
  Hyp hyp = base;
  const std::vector<EvolveGene>& genes = evolve_genes();
  for (size_t i = 0; i < genes.size(); ++i) hyp.set(genes[i].key, parent[table.results + i] * v[i]);
  return constrain_hyp(hyp);
}

size_t write_hyp_evolve_yaml(const std::string& path, const EvolveTable& table) {
  KESTREL_CHECK(!table.rows.empty(), "evolve: no generation to write to ", path);
  const size_t best = by_fitness(table).front();
  const std::vector<double>& row = table.rows[best];
  std::ostringstream out;
  out << "# Kestrel hyperparameter evolution: the fittest of " << table.rows.size()
      << " generations\n# Best generation: " << best << "\n# Last generation: "
      << table.rows.size() - 1 << "\n#";
  char cell[64];
  for (size_t i = 0; i < table.results; ++i) {
    std::snprintf(cell, sizeof cell, "%s%20s", i ? ", " : " ", table.keys[i].c_str());
    out << cell;
  }
  out << "\n#";
  for (size_t i = 0; i < table.results; ++i) {
    std::snprintf(cell, sizeof cell, "%s%20.5g", i ? ", " : " ", row[i]);
    out << cell;
  }
  out << "\n\n";
  for (size_t i = table.results; i < table.keys.size(); ++i) {
    std::snprintf(cell, sizeof cell, "%.10g", row[i]);
    out << table.keys[i] << ": " << cell << "\n";
  }
  write_file_atomic(path, out.str());
  return best;
}

int evolve(const TrainOptions& base, int generations) {
  KESTREL_CHECK(generations >= 1, "--evolve needs at least 1 generation, got ", generations);
  TrainOptions o = base;
  o.evolve = generations;
  const Console console(true);  // as train.py's print_args, once for the whole evolution (one process)
  console.line(console.colour("train: "), args_text(train_args_echo(o)));
  if (o.project == "runs/train") o.project = "runs/evolve";
  // As the reference: --resume with --evolve continues the newest run directory (exist_ok).
  const bool continue_last = o.resume.has_value();
  o.resume.reset();
  // Held across the generations: each one's trainer writes into this directory and takes no lock.
  const ClaimedRunDir claim = claim_run_dir((fs::path(o.project) / o.name).string(), o.exist_ok || continue_last);
  const std::string save_dir = claim.path;
  remove_stale_temporaries(claim.lock);
  o.project = fs::path(save_dir).parent_path().string();
  o.name = fs::path(save_dir).filename().string();
  o.exist_ok = true;
  o.noval = o.nosave = true;
  const Hyp start = o.hyp_values ? *o.hyp_values : (o.hyp.empty() ? Hyp{} : load_hyp(o.hyp));
  const std::string csv = save_dir + "/evolve.csv", yaml = save_dir + "/hyp_evolve.yaml";

  for (int generation = 0; generation < generations; ++generation) {
    Hyp hyp = constrain_hyp(start);
    if (fs::exists(csv)) {
      const EvolveTable table = read_evolve_csv(csv);
      if (!table.rows.empty()) {
        std::mt19937_64 rng(o.seed * 1000003ull + table.rows.size());
        hyp = mutate_hyp(table, start, rng);
      }
    }
    o.hyp_values = hyp;
    TrainResults results;
    const int status = train(o, &results);
    if (status != 0) {
      std::cout << "evolve: generation " << generation + 1 << " of " << generations
                << " did not finish (exit status " << status << "); evolve.csv holds the "
                << "finished ones. Continue with the same command and --resume" << std::endl;
      return status;
    }
    append_evolve_csv(csv, results, hyp);
    const EvolveTable table = read_evolve_csv(csv);
    write_hyp_evolve_yaml(yaml, table);
    std::cout << "evolve: " << table.rows.size() << " generations finished, fitness of this one "
              << table.fitness(table.rows.size() - 1) << ", best " << table.fitness(by_fitness(table).front())
              << std::endl;
  }
  plot_evolve(csv, save_dir + "/evolve.png");
  std::cout << "Hyperparameter evolution finished " << generations << " generations\nResults saved to "
            << save_dir << "\nUsage example: kestrel " << (o.task == TrainTaskKind::Segment ? "segment " : "")
            << "train --hyp " << yaml << std::endl;
  return 0;
}

}  // namespace kestrel::yolo
