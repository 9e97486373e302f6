// The reference's start-up echoes of a training run, as train.py prints them: its options
// (print_args: "train: weights=..., cfg=..., ...") and its hyperparameters ("hyperparameters: lr0=0.01,
// ..."), with Python's spelling of values (True, None, 0.0).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "yolo/common/hyp.h"
#include "yolo/train/train_options.h"

namespace kestrel::yolo {

// The options under the reference's names and in its order (its flags that Kestrel has), then
// Kestrel's own; `resume` as the flag was given (False, True or the path).
std::vector<std::pair<std::string, std::string>> train_args_echo(const TrainOptions& o);

// "lr0=0.01, lrf=0.01, ..." (the body of the `hyperparameters: ` line).
std::string hyp_echo(const Hyp& hyp);

}  // namespace kestrel::yolo
