// The run directory's opt.yaml and hyp.yaml as the reference's train.py writes them
// (yaml_save(vars(opt)), yaml_save(hyp): PyYAML's safe_dump, keys in insertion order), so that the
// reference's own `train.py --resume` reads a run Kestrel started: train.py's keys in its
// parse_opt order with its types (hyp the dict of values, freeze a list, evolve and cache null
// when unset, save_dir last), then Kestrel's own options (TrainOptions::to_pairs' rows the
// reference has no key for), typed as YAML reads their text. The same dict, without Kestrel's
// keys, is the 'opt' of the .pt checkpoints Kestrel writes (yolo/train/reference_checkpoint.h).
#pragma once
#include <string>

#include "io/json.h"
#include "yolo/common/hyp.h"
#include "yolo/train/train_options.h"

namespace kestrel::yolo {

struct ReferenceOptContext {
  const Hyp* hyp = nullptr;    // the run's values (opt['hyp']); required
  std::string data_yaml;       // the dataset yaml as resolved (the reference stores check_file's path)
  std::string save_dir;        // the run directory
  std::string resumed_from;    // the checkpoint a resumed run continues ("" for a new run)
};

// vars(opt) of train.py (or segment/train.py for a segmentation run) for these options.
json::Object reference_opt(const TrainOptions& o, const ReferenceOptContext& c);
// reference_opt, then Kestrel's own keys after it.
json::Object opt_yaml_values(const TrainOptions& o, const ReferenceOptContext& c);
// The reference's hyp dict: hyp-file keys in file order, floats (anchors, when set, an integer).
json::Object reference_hyp(const Hyp& hyp);

// An option's text (TrainOptions::to_pairs, ClassifyTrainOptions::to_pairs) typed as YAML reads it
// back from opt.yaml: true, false, null, an integer, a float, else the string itself.
json::Value typed_option_value(const std::string& text);

// A mapping as PyYAML's safe_dump(sort_keys=False) writes it: block style, lists as "- x" under
// their key, floats as Python's repr (1.0e-05 as PyYAML spells it), strings plain unless they
// would read as another type or hold characters a plain scalar may not (then single-quoted).
std::string python_yaml_dump(const json::Object& mapping);

}  // namespace kestrel::yolo
