// The few values a training job's ranks exchange outside the step: rank 0's string, how many ranks
// raised a flag, and the wait while rank 0 works alone. Each is a no-op in a single process.
#pragma once
#include <string>
#include <vector>

#include "engine/device.h"
#include "yolo/train/rank_info.h"

namespace kestrel::yolo {

// Rank 0's value on every rank.
std::string broadcast_string(const RankInfo& r, Device device, const std::string& s);
// For each flag, how many ranks raised it (one all-reduce; every rank must call it at the same
// point). A single process gets its own flags back as 0/1.
std::vector<int> ranks_raising(const RankInfo& r, Device device, const std::vector<bool>& flags);
// The other ranks wait here while rank 0 finishes `phase` alone (every rank calls it at the same
// point): up to --dist-phase-timeout, outside the collectives' timeout, with nothing pending.
void wait_for_rank0(const RankInfo& r, const std::string& phase);

}  // namespace kestrel::yolo
