#include "yolo/train_support.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "dist/device_plan.h"
#include "engine/random.h"
#include "yolo/data/synthetic.h"
#include "yolo/dataset_download.h"
#include "yolo/shipped_files.h"
#include "yolo/loss.h"

namespace kestrel::yolo {

Device pick_device(const std::string& spec, int local_rank) {
  const std::vector<int> gpus = dist::parse_device_list(spec);
  if (spec == "cpu" || (gpus.empty() && !cuda_available())) return Device::cpu();
  const int count = cuda_device_count();
  const int id = dist::worker_gpu(gpus, local_rank, count);
  KESTREL_CHECK(id < count, "--device ", spec, ": GPU ", id, " not found (", count,
                " CUDA devices); use --device cpu");
  return Device::cuda(id);
}

DType pick_compute_dtype(const std::string& amp, Device device) {
  if (amp == "off" || (amp.empty() && device.is_cpu())) return DType::F32;
  KESTREL_CHECK(device.is_cuda(), "--amp ", amp, " needs a CUDA device; use --amp off on the CPU");
  if (amp == "fp16") return DType::F16;
  if (amp == "bf16") return DType::BF16;
  KESTREL_CHECK(amp.empty(), "--amp must be bf16, fp16 or off, got '", amp, "'");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device.index);
  return prop.major >= 8 ? DType::BF16 : DType::F16;
}

bool cuda_graphs_wanted(const TrainOptions& o, Device device, const RankInfo& rank) {
  const std::string& m = o.cuda_graph;
  KESTREL_CHECK(m == "auto" || m == "on" || m == "off", "--cuda-graph must be auto, on or off, got '", m, "'");
  if (m == "off") return false;
  std::string why_not;
  if (device.is_cpu()) why_not = "it needs a CUDA device";
  else if (o.multi_scale) why_not = "--multi-scale changes the input shape every batch";
  else if (o.rect) why_not = "--rect gives the batches of an epoch many shapes, a graph each";
  else if (!o.trace.empty()) why_not = "--trace times every collective from the host";
  else if (rank.world > 1 && rank.group->backend() != "nccl") why_not = "the process group is not NCCL";
  if (why_not.empty()) return true;
  KESTREL_CHECK(m == "auto", "--cuda-graph on: ", why_not, "; use --cuda-graph off");
  return false;
}

int64_t run_target_rows(const std::vector<data::ImageRecord>& records, int64_t batch,
                        const Hyp& hyp, bool rect) {
  size_t most = 0;
  for (const data::ImageRecord& r : records) most = std::max(most, r.boxes.size());
  const bool mosaic = hyp.mosaic > 0 && !rect;
  const int64_t images = mosaic ? (hyp.mixup > 0 ? 8 : 4) : 1;
  return padded_target_rows(batch * images * static_cast<int64_t>(most));
}

Tensor pad_batch_targets(const Tensor& targets, int64_t run_rows, int64_t ni) {
  const int64_t m = targets.size(0);
  const int64_t rows = run_rows > 0 ? run_rows : padded_target_rows(m);
  KESTREL_CHECK(m <= rows, "batch ", ni, " holds ", m, " labels, more than the ", rows,
                " rows the graphed step was sized for; train with --cuda-graph off");
  return pad_targets(targets, rows);
}

std::string resolve_data(const std::string& data) {
  if (data.empty() || data == "synthetic")
    return data::ensure_synthetic_dataset(data::default_synthetic_dir());
  const std::string yaml = find_shipped_file(data, "--data");
  fetch_missing_dataset(yaml);
  return yaml;
}

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

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

std::vector<std::string> freeze_prefixes(const std::vector<int>& freeze, int layer_count) {
  std::vector<int> layers = freeze;
  if (freeze.size() == 1) {
    layers.clear();
    // Layers past the model's last match nothing: --freeze 2000000000 must not list them all.
    for (int i = 0; i < std::min(freeze[0], layer_count); ++i) layers.push_back(i);
  }
  std::vector<std::string> out;
  for (int i : layers) out.push_back("model." + std::to_string(i) + ".");
  return out;
}

// Host-side resize of a u8 NHWC batch (--multi-scale); boxes are normalised, so they stay.
Tensor resize_batch(const Tensor& images, int64_t size) {
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2);
  const double gain = static_cast<double>(size) / std::max(h, w);
  const int nh = static_cast<int>(std::ceil(h * gain / 32.0) * 32), nw = static_cast<int>(std::ceil(w * gain / 32.0) * 32);
  Tensor out = Tensor::empty({n, nh, nw, 3}, DType::U8, Device::cpu(), images.is_pinned());
  for (int64_t i = 0; i < n; ++i) {
    cv::Mat src(static_cast<int>(h), static_cast<int>(w), CV_8UC3, images.data<uint8_t>() + i * h * w * 3);
    cv::Mat dst(nh, nw, CV_8UC3, out.data<uint8_t>() + i * nh * nw * 3);
    cv::resize(src, dst, {nw, nh}, 0, 0, cv::INTER_LINEAR);
  }
  return out;
}

int64_t multi_scale_size(uint64_t seed, int rank, int64_t epoch, int64_t batch, int64_t img_size, int64_t gs) {
  // The top bit keeps these streams apart from the per-sample ones ((epoch << 32) + index).
  Generator g(seed + 1 + static_cast<uint64_t>(rank),
              (uint64_t{1} << 63) | (static_cast<uint64_t>(epoch) << 32) | static_cast<uint64_t>(batch));
  const int64_t lo = img_size / 2, hi = img_size * 3 / 2 + gs;
  return (lo + static_cast<int64_t>(g.uniform() * static_cast<double>(hi - lo))) / gs * gs;
}

json::Value options_json(const TrainOptions& o, const std::string& cfg_text, int nc,
                         const std::vector<std::string>& names) {
  json::Object obj;
  for (const auto& [k, v] : o.to_pairs()) obj.emplace_back(k, v);
  obj.emplace_back("cfg_yaml", cfg_text);
  obj.emplace_back("nc", static_cast<int64_t>(nc));
  json::Array name_list;
  for (const auto& n : names) name_list.emplace_back(n);
  obj.emplace_back("names", name_list);
  return obj;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  KESTREL_CHECK(in, "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kestrel::yolo
