#include "yolo/eval/classify_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "base/error.h"

namespace kestrel::yolo {

std::vector<int64_t> top_k(const float* row, int64_t n, int64_t k) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

void ClassifyMetrics::add(const Tensor& logits, const std::vector<int64_t>& labels) {
  KESTREL_CHECK(logits.dim() == 2 && logits.size(0) == static_cast<int64_t>(labels.size()),
                "classifier logits must be (batch, nc) for ", labels.size(), " labels, got ", logits.describe());
  const Tensor host = logits.to(Device::cpu()).to(DType::F32).contiguous();
  add(host.data<float>(), host.size(1), labels);
}

void ClassifyMetrics::add(const float* logits, int64_t nc, const std::vector<int64_t>& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::vector<int64_t> top = top_k(logits + static_cast<int64_t>(i) * nc, nc, 5);
    labels_.push_back(labels[i]);
    predicted_.push_back(top[0]);
    top1_.push_back(top[0] == labels[i]);
    top5_.push_back(std::find(top.begin(), top.end(), labels[i]) != top.end());
  }
}

int64_t ClassifyMetrics::count(int64_t cls) const {
  return std::count(labels_.begin(), labels_.end(), cls);
}

double ClassifyMetrics::mean(const std::vector<uint8_t>& hits, int64_t cls) const {
  // float32 sums, as torch's mean of a float tensor: the printed digits match the reference's
  float sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < hits.size(); ++i)
    if (cls < 0 || labels_[i] == cls) sum += static_cast<float>(hits[i]), ++n;
  return n ? static_cast<double>(sum / static_cast<float>(n)) : std::nan("");
}

std::string format_3g(double x) {
  if (std::isnan(x)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

std::string ClassifyMetrics::table(const std::vector<std::string>& names) const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%24s%12s%12s%12s\n", "Class", "Images", "top1_acc", "top5_acc");
  out += line;
  std::snprintf(line, sizeof line, "%24s%12lld%12s%12s\n", "all", static_cast<long long>(count()),
                format_3g(top1()).c_str(), format_3g(top5()).c_str());
  out += line;
  for (size_t c = 0; c < names.size(); ++c) {
    const auto k = static_cast<int64_t>(c);
    std::snprintf(line, sizeof line, "%24s%12lld%12s%12s\n", names[c].c_str(), static_cast<long long>(count(k)),
                  format_3g(top1(k)).c_str(), format_3g(top5(k)).c_str());
    out += line;
  }
  return out;
}

}  // namespace kestrel::yolo
