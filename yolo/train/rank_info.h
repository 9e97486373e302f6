// Where this process stands in a training job: its rank, the world size, its local rank on the
// node, the job's process group (none in a single process) and the wait allowed while rank 0
// works alone.
#pragma once
#include <chrono>
#include <memory>

#include "dist/process_group.h"

namespace kestrel::yolo {

struct RankInfo {
  int rank = 0, world = 1, local = 0;
  std::shared_ptr<dist::ProcessGroup> group;
  std::chrono::milliseconds phase_limit{0};  // --dist-phase-timeout
  bool main() const { return rank == 0; }
};

}  // namespace kestrel::yolo
