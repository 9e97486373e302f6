#include "yolo/train/train_resume.h"

#include <filesystem>

#include "base/error.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;
namespace {

// Options a resumed run takes from its command line: none of them changes what is computed.
// (Segmentation's no_overlap is the masks' form; DDP's is no_ddp_overlap there.)
bool may_change_on_resume(const std::string& key, TrainTaskKind task) {
  if (key == "no_overlap" && task == TrainTaskKind::Segment) return false;
  for (const char* k : {"device", "workers", "bucket_cap_mb", "edge_bucket_mb", "no_overlap", "no_ddp_overlap", "timed_buckets",
                        "check_sync", "no_tensorboard", "no_pt", "cuda_graph"})
    if (key == k) return true;
  return false;
}

}  // namespace

std::string latest_checkpoint(const std::string& project) {
  std::string best;
  fs::file_time_type newest = fs::file_time_type::min();
  std::error_code ec;
  if (!fs::is_directory(project, ec)) return best;
  for (auto it = fs::recursive_directory_iterator(project, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename() != "last.safetensors" || it->path().parent_path().filename() != "weights" ||
        !it->is_regular_file())
      continue;
    const fs::file_time_type t = it->last_write_time(ec);
    if (!ec && (best.empty() || t > newest)) {
      newest = t;
      best = it->path().string();
    }
  }
  return best;
}

static TrainTaskKind checkpoint_task(const json::Value& options) {
  const json::Value* task = options.is_object() ? options.find("task") : nullptr;
  return task && task->is_string() && task->as_string() == "segment" ? TrainTaskKind::Segment : TrainTaskKind::Detect;
}

TrainOptions options_from_json(const json::Value& options, const std::string& path) {
  KESTREL_CHECK(options.is_object(), "checkpoint '", path, "': its options are not a JSON object");
  TrainOptions o = train_defaults(checkpoint_task(options));
  for (const auto& [key, value] : options.as_object()) {
    if (!value.is_string() || key == "task") continue;  // cfg_yaml, nc, names: the model's, not the options
    for (const TrainOptionSpec& spec : train_option_specs(o.task)) {
      if (!spec.key || key != spec.key) continue;
      try {
        spec.read(o, value.as_string());
      } catch (const OptionError& e) {
        KESTREL_FAIL("checkpoint '", path, "': option ", key, " = '", value.as_string(), "' ", e.what(),
                     "; the file is damaged");
      }
    }
  }
  return o;
}

ResumePlan plan_resume(const TrainOptions& requested) {
  KESTREL_CHECK(requested.resume.has_value(), "plan_resume: --resume not given");
  ResumePlan plan;
  plan.path = *requested.resume;
  if (plan.path.empty()) {
    plan.path = latest_checkpoint(requested.project);
    KESTREL_CHECK(!plan.path.empty(), "--resume: no last.safetensors under '", requested.project,
                  "'; give the checkpoint's path (--resume runs/train/exp/weights/last.safetensors)"
                  " or the project it is in (--project DIR)");
  }
  KESTREL_CHECK(fs::is_regular_file(plan.path), "--resume: '", plan.path,
                "' is not a file; give a last.safetensors written by kestrel train");
  plan.info = read_checkpoint_info(plan.path);
  check_resumable(plan.info, plan.path);
  plan.save_dir = fs::path(plan.path).parent_path().parent_path().string();

  TrainOptions o = options_from_json(plan.info.options, plan.path);
  KESTREL_CHECK(o.task == requested.task, "--resume: '", plan.path, "' is a ",
                o.task == TrainTaskKind::Segment ? "segmentation" : "detection", " run's checkpoint; resume it with ",
                o.task == TrainTaskKind::Segment ? "kestrel segment train" : "kestrel train", " --resume ", plan.path);
  const TrainOptions defaults = train_defaults(requested.task);
  const auto saved = o.to_pairs(), asked = requested.to_pairs(), plain = defaults.to_pairs();
  for (size_t i = 0; i < saved.size(); ++i) {
    const std::string& key = saved[i].first;
    const bool given = asked[i].second != plain[i].second;
    if (!given || asked[i].second == saved[i].second || key == "project" || key == "name" ||
        key == "exist_ok" || key == "weights")
      continue;
    if (may_change_on_resume(key, o.task))
      plan.notes.push_back(str(key, " changed from '", saved[i].second, "' to '", asked[i].second, "'"));
    else
      plan.notes.push_back(str("keeping the checkpoint's ", key, " '", saved[i].second,
                               "' (the command line's '", asked[i].second,
                               "' is ignored: a resumed run continues as it was configured)"));
  }
  if (requested.device != defaults.device) o.device = requested.device;
  if (requested.workers != defaults.workers) o.workers = requested.workers;
  if (requested.bucket_cap_mb != defaults.bucket_cap_mb) o.bucket_cap_mb = requested.bucket_cap_mb;
  if (requested.edge_bucket_mb != defaults.edge_bucket_mb) o.edge_bucket_mb = requested.edge_bucket_mb;
  if (requested.no_overlap) o.no_overlap = true;
  if (requested.timed_buckets) o.timed_buckets = true;
  if (requested.check_sync) o.check_sync = true;
  if (requested.cuda_graph != defaults.cuda_graph) o.cuda_graph = requested.cuda_graph;
  if (requested.no_tensorboard) o.no_tensorboard = true;
  if (requested.no_pt) o.no_pt = true;
  o.trace = requested.trace;
  o.dist_timeout = requested.dist_timeout;
  o.dist_phase_timeout = requested.dist_phase_timeout;
  o.interrupt_after = requested.interrupt_after;
  o.resume = plan.path;
  o.weights.clear();
  plan.options = std::move(o);
  return plan;
}

}  // namespace kestrel::yolo
