#include "bench/overlap/measure.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "dist/env.h"
#include "dist/reducer.h"
#include "dist/timeline.h"
#include "engine/ops/layout.h"
#include "engine/random.h"
#include "yolo/common/hyp.h"
#include "yolo/model/model.h"
#include "yolo/train/loss.h"

namespace kestrel::bench::overlap {
namespace {

namespace fs = std::filesystem;

std::string model_path(const std::string& model) {
  if (fs::exists(model)) return model;
  const std::string under = "models/" + model + (model.ends_with(".yaml") ? "" : ".yaml");
  KESTREL_CHECK(fs::exists(under), "overlap --model: neither '", model, "' nor '", under,
                "' exists; give a model yaml or a name such as yolov5n (run from the repository root)");
  return under;
}

// Random images and 4 boxes per image; each rank its own (seeded by rank) as in real DDP.
std::pair<Tensor, Tensor> random_batch(int batch, int img_size, int nc, uint64_t seed) {
  Generator gen(seed, 5);
  std::vector<uint8_t> pixels(static_cast<size_t>(batch) * img_size * img_size * 3);
  for (auto& p : pixels) p = static_cast<uint8_t>(gen.next_u32() & 0xFF);
  std::vector<float> t;
  for (int i = 0; i < batch; ++i)
    for (int k = 0; k < 4; ++k)
      t.insert(t.end(), {static_cast<float>(i), static_cast<float>(gen.randint(static_cast<uint64_t>(nc))),
                         static_cast<float>(gen.uniform(0.3, 0.7)), static_cast<float>(gen.uniform(0.3, 0.7)),
                         static_cast<float>(gen.uniform(0.05, 0.4)), static_cast<float>(gen.uniform(0.05, 0.4))});
  return {Tensor::from_vector(pixels, {batch, img_size, img_size, 3}),
          Tensor::from_vector(t, {static_cast<int64_t>(batch) * 4, 6})};
}

// Per-parameter gradient arrival, recorded by grad-ready hooks next to the Reducer's own.
struct ArrivalLog {
  double backward_start_us = 0;
  std::vector<double> ready_us;  // per parameter, since backward_start_us, of the current step
  std::vector<std::vector<double>> steps;
};

// The simulator's view of a step: how long the single communication thread was busy (each
// collective from when it could start, launched and its predecessor done, to done) and how much of
// it stuck out after backward. dist::communication_us and exposed_communication_us sum
// launch-to-done per bucket, which counts queueing behind earlier buckets again for every bucket.
double busy_us(const dist::StepTimeline& t) {
  double busy = 0, previous_done = -1e300;
  for (const dist::BucketTiming& b : t.buckets) {
    busy += b.done_us - std::max(b.launch_us, previous_done);
    previous_done = b.done_us;
  }
  return busy;
}

double exposed_us(const dist::StepTimeline& t) {
  double last_done = t.backward_end_us;
  for (const dist::BucketTiming& b : t.buckets) last_done = std::max(last_done, b.done_us);
  return last_done - t.backward_end_us;
}

// The buckets of one layout all-reduced back to back with nothing else running, `reps` times after
// a barrier each; rank 0 appends one row per bucket and repetition to `csv`. Each bucket's time
// runs from its predecessor's finish, as on the Reducer's single communication thread.
void time_alone(dist::ProcessGroup& group, const std::vector<int64_t>& bucket_bytes, int reps, int world,
                double cap, std::ostream* csv) {
  std::vector<Tensor> buffers;
  for (int64_t bytes : bucket_bytes) buffers.push_back(Tensor::zeros({bytes / 4}, DType::F32));
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up, not recorded
    group.barrier()->synchronize();
    std::vector<std::shared_ptr<dist::Work>> works;
    const double t0 = dist::now_us();
    for (const Tensor& b : buffers) works.push_back(group.all_reduce(b, dist::ReduceOp::Average));
    double previous = t0;
    for (size_t i = 0; i < works.size(); ++i) {
      works[i]->synchronize();
      const double done = dist::now_us();
      if (csv && r >= 0)
        *csv << world << ',' << cap << ',' << r << ',' << i << ',' << bucket_bytes[i] << ',' << done - previous << '\n';
      previous = done;
    }
  }
}

}  // namespace

int run_measure_worker(const MeasureOptions& o) {
  const dist::DistOptions dopt = dist::resolve_dist_options(dist::DistFlags{}, dist::process_environment());
  KESTREL_CHECK(dopt.world_size >= 2, "overlap worker: needs WORLD_SIZE >= 2 (start it through `overlap measure`)");
  auto group = dist::init_process_group("gloo", dopt, Device::cpu());
  const bool main_rank = dopt.rank == 0;
  const yolo::ModelConfig mcfg = yolo::load_model_config(model_path(o.model));
  fs::create_directories(o.out_dir);
  // Every rank its own timeline: comparing the ranks' clock readings (one steady clock on one
  // machine) shows when a collective waited for the other rank rather than for the wire.
  const std::string csv_path = o.out_dir + (main_rank ? "/timeline.csv" : "/timeline_rank" + std::to_string(dopt.rank) + ".csv");
  std::ofstream csv;
  {
    const bool fresh = !fs::exists(csv_path);
    csv.open(csv_path, std::ios::app);
    KESTREL_CHECK(csv, "overlap: cannot write ", csv_path);
    if (fresh)
      csv << "world,cap_mb,overlap,step,step_us,pre_us,backward_us,finalize_us,bucket,bytes,num_params,ready_us,"
             "launch_us,done_us,start_us\n";
  }

  const std::string alone_path = o.out_dir + "/alone.csv";
  std::ofstream alone;
  if (main_rank && o.alone_reps > 0) {
    const bool fresh = !fs::exists(alone_path);
    alone.open(alone_path, std::ios::app);
    KESTREL_CHECK(alone, "overlap: cannot write ", alone_path);
    if (fresh) alone << "world,cap_mb,rep,bucket,bytes,us\n";
  }

  bool profile_written = false;
  // Overlap on and off alternate per cap so that load changes on the machine hit both alike.
  for (double cap : o.caps_mb)
    for (bool overlap : {false, true}) {
      // A fresh model per configuration: the same seed gives every rank the same weights, and no
      // stale hooks or bucket views of an earlier Reducer stay on the parameters.
      yolo::DetectionModel model(mcfg, std::nullopt, 0);
      model.train(true);
      const auto named = model.named_parameters();
      auto log = std::make_shared<ArrivalLog>();
      log->ready_us.assign(named.size(), -1);
      for (size_t i = 0; i < named.size(); ++i) {
        Tensor p = named[i].second;
        p.register_grad_ready_hook([weak = std::weak_ptr<ArrivalLog>(log), i](const Tensor&) {
          if (auto l = weak.lock()) l->ready_us[i] = dist::now_us() - l->backward_start_us;
        });
      }
      dist::ReducerOptions ropt;
      ropt.bucket_cap_mb = cap;
      ropt.edge_bucket_cap_mb = o.edge_bucket_mb;
      ropt.timed_buckets = o.timed_buckets;
      ropt.overlap = overlap;
      dist::Reducer reducer(named, group, ropt);
      const int nc = static_cast<int>(model.detect().nc);
      const yolo::ComputeLoss loss_fn(model.detect(),
                                      yolo::scale_loss_hyp(yolo::Hyp{}, static_cast<int>(model.detect().nl), nc, o.img_size));
      const auto [images, targets] = random_batch(o.batch, o.img_size, nc, 1000 + dopt.rank);

      std::vector<double> step_us, pre_us, bwd_us, fin_us, comm_us, exposed, eff, dist_eff;
      dist::TraceWriter trace(dopt.rank);
      for (int s = 0; s < o.warmup + o.steps; ++s) {
        const double t0 = dist::now_us();
        std::vector<Tensor> preds = model.forward(ops::images_to_input(images, DType::F32));
        yolo::LossResult loss = loss_fn(preds, targets);
        // Armed after forward so the timeline's backward_start is the real start of backward.
        reducer.prepare_for_backward();
        log->backward_start_us = dist::now_us();
        const double pre = log->backward_start_us - t0;
        loss.total.backward();
        reducer.finalize();
        const double t1 = dist::now_us();
        const dist::StepTimeline& tl = reducer.last_timeline();
        reducer.zero_grad();
        if (s < o.warmup) continue;
        const double b0 = tl.backward_start_us;
        step_us.push_back(t1 - t0);
        pre_us.push_back(pre);
        bwd_us.push_back(tl.backward_end_us - b0);
        fin_us.push_back(tl.finalize_end_us - b0);
        comm_us.push_back(busy_us(tl));
        exposed.push_back(exposed_us(tl));
        eff.push_back(comm_us.back() > 0 ? std::clamp(1.0 - exposed.back() / comm_us.back(), 0.0, 1.0) : 1.0);
        dist_eff.push_back(dist::overlap_efficiency(tl));  // what `kestrel train` logs
        log->steps.push_back(log->ready_us);
        for (size_t b = 0; b < tl.buckets.size(); ++b) {
          const dist::BucketTiming& bt = tl.buckets[b];
          csv << dopt.world_size << ',' << cap << ',' << overlap << ',' << s - o.warmup << ',' << step_us.back()
              << ',' << pre << ',' << bwd_us.back() << ',' << fin_us.back() << ',' << b << ',' << bt.bytes << ','
              << bt.num_params << ',' << bt.ready_us - b0 << ',' << bt.launch_us - b0 << ',' << bt.done_us - b0
              << ',' << std::fixed << t0 << std::defaultfloat << '\n';
        }
        if (main_rank) trace.add(tl);
      }
      csv.flush();
      if (overlap && o.alone_reps > 0) {
        std::vector<int64_t> sizes;
        for (const dist::BucketTiming& b : reducer.last_timeline().buckets) sizes.push_back(b.bytes);
        time_alone(*group, sizes, o.alone_reps, dopt.world_size, cap, main_rank ? &alone : nullptr);
        if (main_rank) alone.flush();
      }
      if (!main_rank) continue;
      if (overlap) {
        std::ostringstream name;
        name << o.out_dir << "/trace_cap" << cap << ".json";
        trace.write(name.str());
      }
      std::printf(
          "{\"bench\":\"overlap\",\"world\":%d,\"model\":\"%s\",\"img_size\":%d,\"batch_per_rank\":%d,\"cap_mb\":%g,"
          "\"overlap\":%s,\"buckets\":%zu,\"steps\":%d,\"step_ms\":%.3f,\"forward_loss_ms\":%.3f,\"backward_ms\":%.3f,"
          "\"backward_plus_comm_ms\":%.3f,\"allreduce_ms\":%.3f,\"exposed_allreduce_ms\":%.3f,"
          "\"overlap_efficiency\":%.4f,\"dist_overlap_efficiency\":%.4f}\n",
          dopt.world_size, o.model.c_str(), o.img_size, o.batch, cap, overlap ? "true" : "false",
          reducer.bucket_layout().size(), o.steps, median(step_us) / 1e3, median(pre_us) / 1e3, median(bwd_us) / 1e3,
          median(fin_us) / 1e3, median(comm_us) / 1e3, median(exposed) / 1e3, median(eff), median(dist_eff));
      std::fflush(stdout);
      if (!overlap && !profile_written) {
        // Median arrival per parameter over the timed steps, in arrival order.
        std::vector<std::pair<double, size_t>> order;
        for (size_t i = 0; i < named.size(); ++i) {
          std::vector<double> at;
          for (const auto& st : log->steps) at.push_back(st[i]);
          order.emplace_back(median(at), i);
        }
        std::sort(order.begin(), order.end());
        std::ofstream prof(o.out_dir + "/profile_w" + std::to_string(dopt.world_size) + ".csv");
        prof << "kind,name,bytes,us\npre,,0," << median(pre_us) << "\nbackward,,0," << median(bwd_us) << '\n';
        for (const auto& [t, i] : order)
          prof << "grad," << named[i].first << ',' << named[i].second.numel() * named[i].second.element_size() << ','
               << t << '\n';
        profile_written = true;
      }
    }
  group->barrier()->synchronize();
  return 0;
}

std::vector<TimelineRow> read_timeline_csv(const std::string& path) {
  std::ifstream in(path);
  KESTREL_CHECK(in, "overlap: cannot read '", path, "'; run `overlap measure` first");
  std::string line;
  std::getline(in, line);  // header
  std::vector<TimelineRow> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::vector<std::string> f;
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    KESTREL_CHECK(f.size() == 14 || f.size() == 15, path, ": expected 14 or 15 columns, got ", f.size(), " in '",
                  line, "'");
    TimelineRow r;
    r.world = std::stoi(f[0]);
    r.cap_mb = std::stod(f[1]);
    r.overlap = f[2] == "1";
    r.step = std::stoi(f[3]);
    r.step_us = std::stod(f[4]);
    r.pre_us = std::stod(f[5]);
    r.backward_us = std::stod(f[6]);
    r.finalize_us = std::stod(f[7]);
    r.bucket = std::stoi(f[8]);
    r.bytes = std::stoll(f[9]);
    r.ready_us = std::stod(f[11]);
    r.launch_us = std::stod(f[12]);
    r.done_us = std::stod(f[13]);
    if (f.size() == 15) r.start_us = std::stod(f[14]);
    rows.push_back(r);
  }
  return rows;
}

std::vector<AloneRow> read_alone_csv(const std::string& path) {
  std::ifstream in(path);
  KESTREL_CHECK(in, "overlap: cannot read '", path, "'; run `overlap worker` with --alone-reps > 0 first");
  std::string line;
  std::getline(in, line);  // header
  std::vector<AloneRow> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::vector<std::string> f;
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    KESTREL_CHECK(f.size() == 6, path, ": expected 6 columns, got ", f.size(), " in '", line, "'");
    rows.push_back({std::stoi(f[0]), std::stod(f[1]), std::stoi(f[2]), std::stoi(f[3]), std::stoll(f[4]),
                    std::stod(f[5])});
  }
  return rows;
}

Profile read_profile_csv(const std::string& path) {
  std::ifstream in(path);
  KESTREL_CHECK(in, "overlap: cannot read '", path, "'; run `overlap measure` first");
  std::string line;
  std::getline(in, line);
  Profile p;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::vector<std::string> f;
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    KESTREL_CHECK(f.size() == 4, path, ": expected 4 columns in '", line, "'");
    if (f[0] == "pre") p.pre_us = std::stod(f[3]);
    else if (f[0] == "backward") p.backward_us = std::stod(f[3]);
    else p.grads.push_back({std::stod(f[3]), std::stoll(f[2])});
  }
  KESTREL_CHECK(!p.grads.empty() && p.backward_us > 0, path, ": no gradients or no backward time in the profile");
  return p;
}

}  // namespace kestrel::bench::overlap
