#include "yolo/train/rank_collectives.h"

#include <cstdint>

#include "base/error.h"
#include "engine/tensor.h"

namespace kestrel::yolo {

// The same string on every rank (rank 0's).
std::string broadcast_string(const RankInfo& r, Device device, const std::string& s) {
  if (r.world == 1) return s;
  constexpr int64_t kMax = 4096;
  KESTREL_CHECK(static_cast<int64_t>(s.size()) < kMax, "path too long to share between ranks");
  std::vector<int32_t> bytes(kMax, 0);
  for (size_t i = 0; i < s.size(); ++i) bytes[i] = static_cast<unsigned char>(s[i]);
  Tensor t = Tensor::from_vector(bytes, {kMax}, device);
  r.group->broadcast(t, 0)->synchronize();
  std::string out;
  for (int32_t b : t.to_vector<int32_t>()) {
    if (!b) break;
    out += static_cast<char>(b);
  }
  return out;
}

std::vector<int> ranks_raising(const RankInfo& r, Device device, const std::vector<bool>& flags) {
  std::vector<float> counts(flags.begin(), flags.end());
  if (r.world > 1) {
    Tensor t = Tensor::from_vector(counts, {static_cast<int64_t>(counts.size())}, device);
    r.group->all_reduce(t, dist::ReduceOp::Sum)->synchronize();
    counts = t.to_vector<float>();
  }
  return std::vector<int>(counts.begin(), counts.end());
}

void wait_for_rank0(const RankInfo& r, const std::string& phase) {
  if (r.world > 1) r.group->wait_for_all_ranks(phase, r.phase_limit);
}

}  // namespace kestrel::yolo
