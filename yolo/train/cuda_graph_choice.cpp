#include "yolo/train/cuda_graph_choice.h"

#include <string>

#include "base/error.h"

namespace kestrel::yolo {

bool cuda_graphs_wanted(const TrainOptions& o, Device device, const RankInfo& rank,
                        const std::string& task_obstacle) {
  if (o.cuda_graph == CudaGraphMode::Off) return false;
  std::string why_not;
  if (device.is_cpu()) why_not = "it needs a CUDA device";
  else if (!task_obstacle.empty()) why_not = task_obstacle;
  else if (o.multi_scale) why_not = "--multi-scale changes the input shape every batch";
  else if (o.rect) why_not = "--rect gives the batches of an epoch many shapes, a graph each";
  else if (!o.trace.empty()) why_not = "--trace times every collective from the host";
  else if (rank.world > 1 && rank.group->backend() != "nccl") why_not = "the process group is not NCCL";
  if (why_not.empty()) return true;
  KESTREL_CHECK(o.cuda_graph == CudaGraphMode::Auto, "--cuda-graph on: ", why_not, "; use --cuda-graph off");
  return false;
}

}  // namespace kestrel::yolo
