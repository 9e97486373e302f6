#include "dist/timeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/json.h"

namespace kestrel::dist {

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

namespace {

bool finished(const BucketTiming& b) { return b.launch_us >= 0 && b.done_us >= b.launch_us; }

}  // namespace

namespace {

// The communication stream's busy intervals: the buckets' [launch, done] spans merged. Collectives
// run one after another, so summing each bucket's launch-to-done would count queueing time again
// for every bucket waiting behind another.
std::vector<std::pair<double, double>> busy_intervals(const StepTimeline& t) {
  std::vector<std::pair<double, double>> spans;
  for (const BucketTiming& b : t.buckets)
    if (finished(b)) spans.emplace_back(b.launch_us, b.done_us);
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& s : spans) {
    if (!merged.empty() && s.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, s.second);
    else
      merged.push_back(s);
  }
  return merged;
}

}  // namespace

double communication_us(const StepTimeline& t) {
  double total = 0;
  for (const auto& [start, end] : busy_intervals(t)) total += end - start;
  return total;
}

double exposed_communication_us(const StepTimeline& t) {
  double exposed = 0;
  for (const auto& [start, end] : busy_intervals(t))
    exposed += std::max(0.0, end - std::max(start, t.backward_end_us));
  return exposed;
}

double overlap_efficiency(const StepTimeline& t) {
  const double total = communication_us(t);
  if (total <= 0) return 1.0;
  return std::clamp(1.0 - exposed_communication_us(t) / total, 0.0, 1.0);
}

void TraceWriter::add(const StepTimeline& t) { steps_.push_back(t); }

std::string TraceWriter::json() const {
  using json::Array;
  using json::Object;
  using json::Value;
  const double origin = steps_.empty() ? 0.0 : steps_.front().backward_start_us;
  const auto event = [&](const std::string& name, const char* phase, int tid, double start,
                         double end, Object args) {
    Object e{{"name", Value(name)},
             {"ph", Value(phase)},
             {"pid", Value(static_cast<int64_t>(rank_))},
             {"tid", Value(static_cast<int64_t>(tid))},
             {"ts", Value(start - origin)}};
    if (phase[0] == 'X') e.emplace_back("dur", Value(std::max(0.0, end - start)));
    if (phase[0] == 'i') e.emplace_back("s", Value("t"));
    if (!args.empty()) e.emplace_back("args", Value(std::move(args)));
    return Value(std::move(e));
  };
  Array events;
  const auto name_thread = [&](int tid, const char* name) {
    events.push_back(Value(Object{{"name", Value("thread_name")},
                                  {"ph", Value("M")},
                                  {"pid", Value(static_cast<int64_t>(rank_))},
                                  {"tid", Value(static_cast<int64_t>(tid))},
                                  {"args", Value(Object{{"name", Value(name)}})}}));
  };
  name_thread(0, "compute");
  name_thread(1, "communication");
  for (const StepTimeline& s : steps_) {
    const Object step_args{{"step", Value(s.step)},
                           {"overlap_efficiency", Value(overlap_efficiency(s))}};
    if (s.backward_start_us >= 0 && s.backward_end_us >= 0)
      events.push_back(
          event("backward", "X", 0, s.backward_start_us, s.backward_end_us, step_args));
    if (s.backward_end_us >= 0 && s.finalize_end_us >= 0)
      events.push_back(
          event("wait for gradients", "X", 0, s.backward_end_us, s.finalize_end_us, {}));
    for (size_t i = 0; i < s.buckets.size(); ++i) {
      const BucketTiming& b = s.buckets[i];
      const std::string name = "bucket " + std::to_string(i);
      const Object args{{"bytes", Value(b.bytes)},
                        {"params", Value(static_cast<int64_t>(b.num_params))}};
      if (b.ready_us >= 0) events.push_back(event(name + " ready", "i", 0, b.ready_us, 0, {}));
      if (finished(b))
        events.push_back(event(name + " all_reduce", "X", 1, b.launch_us, b.done_us, args));
    }
  }
  return json::dump(
      Value(Object{{"traceEvents", Value(std::move(events))}, {"displayTimeUnit", Value("ms")}}));
}

void TraceWriter::write(const std::string& path) const {
  const std::string tmp = unique_temp_path(path);  // ranks or runs may share a --trace path
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    KESTREL_CHECK(out.good(), "trace: cannot open ", tmp, " for writing; check that the directory ",
                  "exists and is writable");
    out << json();
    out.flush();
    KESTREL_CHECK(out.good(), "trace: writing ", tmp, " failed (disk full?)");
  }
  KESTREL_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "trace: cannot rename ", tmp, " to ",
                path);
}

}  // namespace kestrel::dist
