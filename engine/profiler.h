// Where a step's time goes, per op: host wall time of each op's forward call and of each autograd
// node's backward, for `train_step --profile`. Off by default, when a scope costs one relaxed
// atomic load. Only the outermost scope on a thread counts, so an op built from other ops (or a
// backward that calls forward ops) is charged once, to itself. On CUDA the times are launch
// costs unless the work is synchronised; the CPU is where this table means compute.
//
// The table is process-wide by nature (ops are called from everywhere): one registry behind a
// mutex, like the allocators, and the one piece of mutable global state here besides them.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::profiler {

enum class Phase { Forward, Backward, Update };

void enable(bool on);
bool enabled();
void reset();

struct Row {
  std::string op;
  double ms[3] = {0, 0, 0};     // per Phase
  int64_t calls[3] = {0, 0, 0};
  double total_ms() const { return ms[0] + ms[1] + ms[2]; }
};
std::vector<Row> rows();  // largest total first
// A fixed-width table of rows(), times divided by `steps`, with each op's share of the total.
std::string table(int steps);

class Scope {
 public:
  Scope(const char* op, Phase phase);
  Scope(const std::string& op, Phase phase);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string op_;
  Phase phase_;
  bool counted_ = false;  // raised this thread's depth
  bool active_ = false;   // the outermost scope: records its time
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kestrel::profiler
