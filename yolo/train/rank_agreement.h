// The ranks of one job must train on the same dataset index, the same model and the same flags;
// otherwise they fail steps later with a tensor-count mismatch in an all-reduce, or worse, train
// silently on different data. At start-up every rank compares a fingerprint of each with rank 0's
// and, on any difference, every rank stops with a message naming what differs.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "yolo/data/records.h"
#include "yolo/train/rank_info.h"

namespace kestrel::yolo {

struct RunFingerprint {
  std::string dataset;  // "<n> images, <m> boxes, digest <hex>"
  std::string model;    // "<n> tensors, <m> parameters, digest <hex>"
  std::vector<std::pair<std::string, std::string>> flags;  // name, value
};

RunFingerprint run_fingerprint(const std::vector<data::ImageRecord>& train,
                               const std::vector<std::pair<std::string, Shape>>& parameters,
                               const std::vector<std::pair<std::string, std::string>>& flags);

// What differs between rank 0's fingerprint and another's, one line per part ("" when equal).
std::string fingerprint_difference(const RunFingerprint& rank0, const RunFingerprint& mine);

// Collective: every rank calls it at the same point. Throws on every rank when any differs.
void check_ranks_agree(const RankInfo& rank, Device device, const RunFingerprint& mine);

}  // namespace kestrel::yolo
