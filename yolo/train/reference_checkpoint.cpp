#include "yolo/train/reference_checkpoint.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>

#include "base/error.h"
#include "yolo/model/weights.h"

namespace kestrel::yolo {

PtOptimizerState pt_optimizer_state(const Optimizer& optimizer) {
  PtOptimizerState out;
  out.kind = optimizer_kind_name(optimizer.kind());
  KESTREL_CHECK(optimizer.kind() != OptimizerKind::RMSProp, "the reference's detection train.py has no RMSProp");
  std::map<std::string, std::vector<std::pair<std::string, Tensor>>> slots;
  for (auto& [name, t] : optimizer.state_tensors()) {
    const size_t dot = name.rfind('.');
    slots[name.substr(0, dot)].emplace_back(name.substr(dot + 1), t);
  }
  // torch's key order within a parameter's state.
  const std::vector<std::string> order = optimizer.kind() == OptimizerKind::SGD
                                             ? std::vector<std::string>{"momentum_buffer"}
                                             : std::vector<std::string>{"step", "exp_avg", "exp_avg_sq"};
  for (size_t g = 0; g < optimizer.groups().size(); ++g) {
    const Optimizer::Rates r = optimizer.rates(g);
    PtOptimizerGroup group{r.lr, r.initial_lr, r.momentum, r.weight_decay, {}};
    for (const Parameter& p : optimizer.groups()[g].params) {
      std::vector<std::pair<std::string, Tensor>> state;
      const auto it = slots.find(p.name);
      if (it != slots.end())
        for (const std::string& slot : order)
          for (const auto& [k, t] : it->second)
            if (k == slot) state.emplace_back(k, t);
      group.state.push_back(std::move(state));
    }
    out.groups.push_back(std::move(group));
  }
  return out;
}

std::string iso_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lld", static_cast<long long>(micros));
  return buf;
}

uint64_t write_stripped_pt(const std::string& stripped, const std::string& pt_path, layers::Module& scratch,
                           PtWriteOptions o) {
  load_inference_weights(scratch, stripped);
  o.best_fitness.reset();  // strip_optimizer sets it to None
  write_reference_pt(scratch, pt_path, o);
  return std::filesystem::file_size(pt_path);
}

}  // namespace kestrel::yolo
