// Hyperparameter evolution, the reference's `train.py --evolve [N]`: N generations, each a normal
// training run (no weights, no plots, validation of the final epoch only) with hyperparameters
// mutated from the fittest of the earlier generations, recorded in the run directory's evolve.csv
// (one row per generation: 7 results, then every evolved key), hyp_evolve.yaml (the best row) and
// evolve.png (each key against fitness).
//
// Segmentation (`kestrel segment train --evolve`) evolves the same keys with the same scheme; its
// rows hold 12 results (P, R, mAP50, mAP50-95 of boxes, then of masks; val box, seg, obj and cls
// losses) and its fitness is the seg fitness (0.1 mAP50 + 0.9 mAP50-95 of boxes plus the same of
// masks). v7.0's segment/train.py --evolve stops with an error where its first generation ends
// (print_mutation is given 19 keys for 12 results), so these files are Kestrel's own layout.
//
// The reference's scheme: parent = one of the 5 fittest rows so far, drawn with weights fitness -
// min + 1e-6; each key's multiplier v = clip(1 + gain * [u < 0.8] * N(0, 1) * U * 0.2, 0.3, 3.0)
// with one U for the whole draw, redrawn until some key changes; then every key clipped to its
// bounds and rounded to 5 decimals. Keys with gain 0 (iou_t, fl_gamma, perspective, fliplr) keep
// their value. Kestrel draws from a generator seeded by --seed and the generation index (the
// reference seeds its mutation from the clock), so an evolution can be repeated exactly.
// The reference's optional `anchors` key (anchors per level) is not evolved: Kestrel's hyp files
// have no such key, and the anchors come from the model yaml and autoanchor.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "yolo/common/hyp.h"
#include "yolo/train/trainer.h"

namespace kestrel::yolo {

// One evolved key: its mutation gain (0 = fixed) and its bounds.
struct EvolveGene {
  const char* key;
  double gain, lower, upper;
};
// In the hyp file's order (the columns of evolve.csv after the results).
const std::vector<EvolveGene>& evolve_genes();

// The results columns of evolve.csv, in order: detection's 7, or segmentation's 12.
const std::vector<std::string>& evolve_result_keys(bool segment = false);
// A run's results as those columns.
std::vector<double> evolve_result_values(const TrainResults& results);

// Every evolved key clipped to its bounds and rounded to 5 decimals.
Hyp constrain_hyp(Hyp hyp);

// evolve.csv: the header names and the rows of numbers (7 or 12 results + the evolved keys).
struct EvolveTable {
  std::vector<std::string> keys;
  std::vector<std::vector<double>> rows;
  size_t results = 7;  // columns of results before the evolved keys (12: segmentation's)
  double fitness(size_t row) const;
};
// Reads an evolve.csv; a file whose columns are not this build's keys, or with a malformed
// number, is an error naming the file and the fix.
EvolveTable read_evolve_csv(const std::string& path);
// Appends one generation (writing the header first when the file is new), in the reference's
// format ('%20s' names, '%20.5g' values). A file of the other task's columns is refused.
void append_evolve_csv(const std::string& path, const TrainResults& results, const Hyp& hyp);
// The reference's fitness of a row: 0.1 mAP50 + 0.9 mAP50-95; of a segmentation row (12
// results) the seg fitness, that of boxes plus that of masks.
double evolve_fitness(const std::vector<double>& row, size_t results = 7);

// The next generation's hyperparameters from the table so far (at least one row); `base` supplies
// the keys that are not evolved (label_smoothing).
Hyp mutate_hyp(const EvolveTable& table, const Hyp& base, std::mt19937_64& rng);

// hyp_evolve.yaml: the fittest row's keys as a hyp file, under comment lines naming its generation
// and results. Returns the best row's index.
size_t write_hyp_evolve_yaml(const std::string& path, const EvolveTable& table);

// evolve.png next to evolve.csv: one panel per evolved key, its values against fitness, the best
// marked.
void plot_evolve(const std::string& csv_path, const std::string& png_path);

// Runs `generations` generations of `base` (whose project/name give the run directory; the
// reference's runs/evolve by default). Returns the exit status of the first generation that did
// not finish (an interruption), else 0.
int evolve(const TrainOptions& base, int generations);

}  // namespace kestrel::yolo
