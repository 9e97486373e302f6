// Whether a training run's step runs as CUDA graphs (--cuda-graph), from its options, device and
// process group (yolo/train/step_graph_policy.h decides batch by batch once graphs are on).
#pragma once
#include "engine/device.h"
#include "yolo/train/rank_info.h"
#include "yolo/train/train_options.h"

namespace kestrel::yolo {

// --cuda-graph: auto captures when nothing the run asked for changes the step's shapes or needs
// the host inside the step; on insists (refused, saying why, where graphs cannot run); off runs
// eagerly. Whether the training step runs in graph mode. task_obstacle: why the task's step
// cannot be captured ("" when it can; TrainTask::graph_obstacle).
bool cuda_graphs_wanted(const TrainOptions& o, Device device, const RankInfo& rank,
                        const std::string& task_obstacle = "");

}  // namespace kestrel::yolo
