#include "engine/profiler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

namespace kestrel::profiler {
namespace {

struct Registry {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::map<std::string, Row> rows;
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local int t_depth = 0;  // open scopes on this thread

}  // namespace

void enable(bool on) { registry().on.store(on, std::memory_order_relaxed); }
bool enabled() { return registry().on.load(std::memory_order_relaxed); }

void reset() {
  std::lock_guard lock(registry().mutex);
  registry().rows.clear();
}

std::vector<Row> rows() {
  std::vector<Row> out;
  {
    std::lock_guard lock(registry().mutex);
    for (const auto& [name, row] : registry().rows) out.push_back(row);
  }
  std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.total_ms() > b.total_ms(); });
  return out;
}

std::string table(int steps) {
  const std::vector<Row> all = rows();
  double total = 0;
  for (const Row& r : all) total += r.total_ms();
  const double per = steps > 0 ? 1.0 / steps : 1.0;
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %12s %12s %12s %12s %7s\n", "op", "forward ms", "backward ms",
                "update ms", "total ms", "share");
  std::string out = line;
  for (const Row& r : all) {
    std::snprintf(line, sizeof line, "%-22s %12.2f %12.2f %12.2f %12.2f %6.1f%%\n", r.op.c_str(), r.ms[0] * per,
                  r.ms[1] * per, r.ms[2] * per, r.total_ms() * per, total > 0 ? 100.0 * r.total_ms() / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-22s %12s %12s %12s %12.2f  (per step, host wall time)\n", "all ops", "", "",
                "", total * per);
  return out + line;
}

Scope::Scope(const char* op, Phase phase) : phase_(phase) {
  if (!enabled()) return;
  counted_ = true;
  if (t_depth++ > 0) return;
  op_ = op;
  active_ = true;
  start_ = std::chrono::steady_clock::now();
}

Scope::Scope(const std::string& op, Phase phase) : Scope(op.c_str(), phase) {}

Scope::~Scope() {
  if (counted_) --t_depth;
  if (!active_) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard lock(registry().mutex);
  Row& row = registry().rows[op_];
  row.op = op_;
  row.ms[static_cast<int>(phase_)] += ms;
  ++row.calls[static_cast<int>(phase_)];
}

}  // namespace kestrel::profiler
