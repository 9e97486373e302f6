// One captured training step (TrainStep's graph mode; train_step.h): the CUDA graph and the
// static tensors it reads and writes. Private to train_step.cpp and step_graph.cpp.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "engine/cuda_graph.h"
#include "yolo/train_step.h"

namespace kestrel::yolo {

struct TrainStep::Graph {
  Graph(Device device, std::shared_ptr<GraphPool> pool) : graph(device, std::move(pool)) {}
  CudaGraph graph;
  Tensor x, targets;                 // the static inputs the graph reads (shared between graphs)
  StepStatusQueue::Captured status;  // the static outputs it writes
  // Host-side counters the captured forward advances on the host (BatchNorm's
  // num_batches_tracked), which a replay does not run: each replay adds the capture's deltas.
  std::vector<std::pair<Tensor, int64_t>> host_counters;
};

}  // namespace kestrel::yolo
