#include "yolo/train/rank_agreement.h"

#include <cstdio>
#include <cstring>

#include "yolo/train/rank_collectives.h"

namespace kestrel::yolo {
namespace {

// FNV-1a, 64 bit: a digest to compare, not a defence against anyone.
struct Digest {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  template <class T>
  void add_value(T v) { add(&v, sizeof v); }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

// "name=value" lines <-> pairs, to send rank 0's flags to the others.
std::string encode(const RunFingerprint& f) {
  std::string out = f.dataset + "\n" + f.model + "\n";
  for (const auto& [k, v] : f.flags) out += k + "=" + v + "\n";
  return out;
}

RunFingerprint decode(const std::string& text) {
  RunFingerprint f;
  size_t line = 0, start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1, ++line) {
    const std::string s = text.substr(start, end - start);
    if (line == 0) f.dataset = s;
    else if (line == 1) f.model = s;
    else if (const size_t eq = s.find('='); eq != std::string::npos) f.flags.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  return f;
}

}  // namespace

RunFingerprint run_fingerprint(const std::vector<data::ImageRecord>& train,
                               const std::vector<std::pair<std::string, Shape>>& parameters,
                               const std::vector<std::pair<std::string, std::string>>& flags) {
  RunFingerprint f;
  Digest data;
  size_t boxes = 0;
  for (const data::ImageRecord& r : train) {
    data.add(r.image_path);
    data.add_value(r.width);
    data.add_value(r.height);
    for (const data::LabelBox& b : r.boxes) {
      data.add_value(b.cls);
      for (float v : {b.x, b.y, b.w, b.h}) data.add_value(v);
    }
    boxes += r.boxes.size();
  }
  f.dataset = str(train.size(), " images, ", boxes, " boxes, digest ", data.hex());
  Digest model;
  int64_t count = 0;
  for (const auto& [name, shape] : parameters) {
    model.add(name);
    int64_t n = 1;
    for (int64_t d : shape) {
      model.add_value(d);
      n *= d;
    }
    count += n;
  }
  f.model = str(parameters.size(), " tensors, ", count, " parameters, digest ", model.hex());
  f.flags = flags;
  return f;
}

std::string fingerprint_difference(const RunFingerprint& rank0, const RunFingerprint& mine) {
  std::string out;
  if (rank0.dataset != mine.dataset)
    out += str("  training dataset index: rank 0 has ", rank0.dataset, ", this rank ", mine.dataset,
               " (check --data and that every node sees the same files)\n");
  if (rank0.model != mine.model)
    out += str("  model: rank 0 has ", rank0.model, ", this rank ", mine.model, " (check --cfg)\n");
  for (const auto& [k, v] : mine.flags) {
    std::string theirs = "(absent)";
    for (const auto& [k0, v0] : rank0.flags)
      if (k0 == k) theirs = v0;
    if (theirs != v) out += str("  --", k, ": rank 0 has '", theirs, "', this rank '", v, "'\n");
  }
  for (const auto& [k0, v0] : rank0.flags) {
    bool mine_has = false;
    for (const auto& [k, v] : mine.flags) mine_has |= k == k0;
    if (!mine_has) out += str("  --", k0, ": rank 0 has '", v0, "', this rank (absent)\n");
  }
  return out;
}

void check_ranks_agree(const RankInfo& rank, Device device, const RunFingerprint& mine) {
  if (rank.world == 1) return;
  const RunFingerprint rank0 = decode(broadcast_string(rank, device, encode(mine)));
  const std::string difference = fingerprint_difference(rank0, mine);
  const int n = ranks_raising(rank, device, {!difference.empty()})[0];
  if (n == 0) return;
  KESTREL_CHECK(!difference.empty() || !rank.main(), n, " rank(s) were started with another dataset, model "
                "or flags than rank 0; their logs (rank<R>.log) name the difference. Start every rank "
                "with the same command and data");
  KESTREL_CHECK(difference.empty(), "rank ", rank.rank, " differs from rank 0:\n", difference,
                "Start every rank with the same command and data");
  KESTREL_FAIL("rank ", rank.rank, ": ", n, " other rank(s) were started with another dataset, model or "
               "flags than rank 0; stopping with them");
}

}  // namespace kestrel::yolo
