// --resume planning: latest_checkpoint picks the weights/last.safetensors with the newest mtime
// among several runs (mtimes set explicitly, one in the future, one at the Unix epoch), ignoring
// other files and directories, and gives "" for a missing or empty project; options_from_json
// parses TrainOptions::to_pairs back to equal pairs for every field set away from its default
// (freeze lists, a uint64 seed past the int64 range, doubles such as 0.1 and 0.1 + 0.2 exactly),
// and a damaged number is an Error naming the checkpoint and the option; plan_resume on a real
// checkpoint (yolo::save_checkpoint) takes every run-shaping option from the file, device and
// workers (and the other plumbing) from the request only where the request changed them from the
// defaults, lists what it overrode or changed in its notes, resumes in the checkpoint's own run
// directory, finds the checkpoint under --project when --resume is bare, and names the project or
// path when there is nothing to resume.
#include "yolo/train/train_resume.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "layers/conv.h"

using namespace kestrel;
using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

class TrainResume : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kestrel_train_resume_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file (or directory) at dir_/rel with the given mtime.
  fs::path touch(const std::string& rel, fs::file_time_type when, bool directory = false) const {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    if (directory) fs::create_directories(p);
    else std::ofstream(p) << rel;
    fs::last_write_time(p, when);
    return p;
  }

  fs::path dir_;
};

const fs::file_time_type kNow = fs::file_time_type::clock::now();
const fs::file_time_type kUnixEpoch = fs::file_time_type::clock::from_sys(std::chrono::sys_seconds{});

// Every field of to_pairs set away from its default.
TrainOptions unusual_options() {
  TrainOptions o;
  o.weights = "yolov5s.safetensors";
  o.cfg = "models/yolov5n.yaml";
  o.data = "data/coco128.yaml";
  o.hyp = "data/hyps/hyp.scratch-high.yaml";
  o.epochs = 7;
  o.batch_size = 48;
  o.img_size = 320;
  o.rect = true;
  o.nosave = true;
  o.noval = true;
  o.noautoanchor = true;
  o.noplots = true;
  o.cache = CacheMode::Ram;
  o.device = "0,1";
  o.multi_scale = true;
  o.single_cls = true;
  o.image_weights = true;
  o.quad = true;
  o.optimizer = OptimizerKind::AdamW;
  o.sync_bn = true;
  o.tf32 = false;
  o.workers = 3;
  o.project = "/data/runs/train";
  o.name = "ablation";
  o.exist_ok = true;
  o.cos_lr = true;
  o.label_smoothing = 0.1;
  o.patience = 17;
  o.freeze = {0, 3, 17};
  o.save_period = 5;
  o.seed = 18446744073709551557ull;  // past INT64_MAX
  o.deterministic = true;
  o.amp = AmpMode::Fp16;
  o.bucket_cap_mb = 0.1 + 0.2;
  o.edge_bucket_mb = 0.5;
  o.no_overlap = true;
  o.timed_buckets = true;
  o.grad_compress = dist::GradCompress::BF16;
  o.check_sync = true;
  o.cuda_graph = CudaGraphMode::Off;
  o.max_batches = 9;
  o.evolve = 5;
  o.no_tensorboard = true;
  o.no_pt = true;
  return o;
}

// to_pairs as a checkpoint's "options" object of strings, through JSON text as in the file.
json::Value as_json(const TrainOptions& o) {
  json::Object obj;
  for (const auto& [k, v] : o.to_pairs()) obj.emplace_back(k, v);
  return json::parse(json::dump(json::Value(std::move(obj))));
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

bool has_note(const ResumePlan& plan, const std::string& needle) {
  for (const auto& n : plan.notes)
    if (n.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_F(TrainResume, LatestCheckpointPicksTheNewestLast) {
  using std::chrono::hours;
  const fs::path project = dir_ / "runs";
  touch("runs/exp/weights/last.safetensors", kNow - hours(2));
  const fs::path future = touch("runs/exp2/weights/last.safetensors", kNow + hours(1));
  touch("runs/exp3/weights/last.safetensors", kUnixEpoch);
  // Newer still, but none of them is a last checkpoint.
  touch("runs/exp4/weights/best.safetensors", kNow + hours(5));
  touch("runs/exp4/weights/last.safetensors.tmp", kNow + hours(5));
  touch("runs/exp4/weights/last.pt", kNow + hours(5));
  touch("runs/exp5/weights/last.safetensors", kNow + hours(5), /*directory=*/true);
  EXPECT_EQ(latest_checkpoint(project.string()), future.string());

  // Moving exp's mtime past exp2's moves the choice: it is by time, not by name or order.
  const fs::path newer = dir_ / "runs/exp/weights/last.safetensors";
  fs::last_write_time(newer, kNow + hours(2));
  EXPECT_EQ(latest_checkpoint(project.string()), newer.string());
}

TEST_F(TrainResume, LatestCheckpointAtTheUnixEpochIsStillFound) {
  // A checkpoint dated 1970 (a restored backup, a clock reset) is older than any default
  // "newest so far" except the clock's minimum: it must still be found when it is the only one.
  const fs::path only = touch("runs/exp/weights/last.safetensors", kUnixEpoch);
  EXPECT_EQ(latest_checkpoint((dir_ / "runs").string()), only.string());
}

TEST_F(TrainResume, LatestCheckpointOfMissingOrEmptyProjectIsEmpty) {
  EXPECT_EQ(latest_checkpoint((dir_ / "nothing_here").string()), "");
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(latest_checkpoint((dir_ / "empty").string()), "");
  touch("other/exp/weights/best.safetensors", kNow);
  touch("other/exp/results.csv", kNow);
  EXPECT_EQ(latest_checkpoint((dir_ / "other").string()), "");
  const fs::path file = touch("a_file", kNow);
  EXPECT_EQ(latest_checkpoint(file.string()), "");
}

// plan_resume takes the run directory as the checkpoint's grandparent, so only a last checkpoint
// inside a weights/ directory is one of a run (the header's contract).
TEST_F(TrainResume, LatestCheckpointOnlyCountsWeightsDirectories) {
  using std::chrono::hours;
  const fs::path run = touch("runs/exp/weights/last.safetensors", kNow);
  touch("runs/backup/last.safetensors", kNow + hours(1));
  EXPECT_EQ(latest_checkpoint((dir_ / "runs").string()), run.string());
}

TEST(TrainResumeOptions, ToPairsRoundTripsEveryField) {
  const TrainOptions o = unusual_options();
  const auto plain = TrainOptions{}.to_pairs(), pairs = o.to_pairs();
  ASSERT_EQ(plain.size(), pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i)
    EXPECT_NE(pairs[i].second, plain[i].second)
        << pairs[i].first << " is at its default in unusual_options(): set it, or the round trip "
        << "cannot show that it is parsed";
  const TrainOptions back = options_from_json(as_json(o), "last.safetensors");
  EXPECT_EQ(back.to_pairs(), pairs);
  // Beyond the text: the values themselves.
  EXPECT_EQ(back.label_smoothing, 0.1);
  EXPECT_EQ(back.bucket_cap_mb, 0.1 + 0.2);
  EXPECT_EQ(back.seed, 18446744073709551557ull);
  EXPECT_EQ(back.freeze, (std::vector<int>{0, 3, 17}));
  EXPECT_EQ(back.img_size, 320);
  EXPECT_EQ(back.device, "0,1");

  // options_json (what the trainer stores: the pairs plus cfg_yaml, nc and names) parses the same.
  const json::Value stored = json::parse(json::dump(options_json(o, "nc: 80\n", 80, {"person", "car"})));
  EXPECT_EQ(options_from_json(stored, "last.safetensors").to_pairs(), pairs);
}

TEST(TrainResumeOptions, FreezeListsAndDoublesRoundTrip) {
  for (const std::vector<int>& freeze :
       {std::vector<int>{}, std::vector<int>{10}, std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 24}}) {
    TrainOptions o;
    o.freeze = freeze;
    EXPECT_EQ(options_from_json(as_json(o), "c").freeze, freeze) << options_from_json(as_json(o), "c").to_pairs().size();
  }
  for (double v : {0.1, 0.1 + 0.2, 1.0 / 3.0, 1e-7, 0.05, 0.0}) {
    TrainOptions o;
    o.label_smoothing = v;
    o.edge_bucket_mb = v * 100;  // --bucket-cap-mb must be positive; the edge buckets may be 0
    const TrainOptions back = options_from_json(as_json(o), "c");
    EXPECT_EQ(back.label_smoothing, v);
    EXPECT_EQ(back.edge_bucket_mb, v * 100);
  }
}

TEST(TrainResumeOptions, MissingKeysKeepDefaultsAndNonStringsAreIgnored) {
  const TrainOptions back =
      options_from_json(json::parse(R"({"epochs":"5","nc":80,"names":["a"],"cfg_yaml":"x: 1"})"), "old");
  TrainOptions expected;
  expected.epochs = 5;
  EXPECT_EQ(back.to_pairs(), expected.to_pairs());
  EXPECT_THROW(options_from_json(json::parse("[1, 2]"), "old"), Error);
}

TEST(TrainResumeOptions, DamagedNumbersNameTheCheckpoint) {
  const std::string path = "runs/train/exp/weights/last.safetensors";
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"epochs", "7x"},          {"epochs", ""},       {"batch_size", "1e3"},
      {"imgsz", "six hundred"},  {"workers", " 8"},    {"label_smoothing", "0.1.2"},
      {"label_smoothing", "x"},  {"seed", "-1"},       {"seed", "18446744073709551616"},
      {"patience", "99999999999"}, {"bucket_cap_mb", "4MB"}, {"max_batches", "+3"},
      {"freeze", "[99999999999]"}, {"save_period", "1.5"},
      // Beyond the numbers: every typed option refuses what it cannot be.
      {"epochs", "0"}, {"imgsz", "16"}, {"cache", "tape"}, {"optimizer", "Lion"}, {"amp", "fp32"},
      {"grad_compress", "int8"}, {"cuda_graph", "maybe"}, {"rect", "yes"}, {"evolve", "0"},
  };
  for (const auto& [key, value] : damaged) {
    json::Object obj;
    for (const auto& [k, v] : TrainOptions{}.to_pairs()) obj.emplace_back(k, k == key ? value : v);
    try {
      options_from_json(json::Value(obj), path);
      ADD_FAILURE() << key << " = '" << value << "' was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(path), std::string::npos) << m;
      EXPECT_NE(m.find(key), std::string::npos) << m;
    }
  }
}

class PlanResume : public TrainResume {
 protected:
  void SetUp() override {
    TrainResume::SetUp();
    project_ = (dir_ / "runs").string();
    ckpt_ = (dir_ / "runs/exp/weights/last.safetensors").string();
    fs::create_directories(fs::path(ckpt_).parent_path());
    saved_.epochs = 7;
    saved_.batch_size = 32;
    saved_.img_size = 320;
    saved_.freeze = {2};
    saved_.hyp = "data/hyps/hyp.scratch-med.yaml";
    saved_.seed = 5;
    saved_.amp = AmpMode::Off;
    saved_.multi_scale = true;
    saved_.cache = CacheMode::Ram;
    saved_.optimizer = OptimizerKind::Adam;
    saved_.label_smoothing = 0.1;
    saved_.patience = 9;
    saved_.device = "cpu";
    saved_.workers = 2;
    saved_.project = project_;
    saved_.name = "exp";
    Generator g(3);
    layers::Conv model(3, 4, 3, 1, std::nullopt, g);
    CheckpointInfo info;
    info.epoch = 3;
    info.best_fitness = 0.25;
    info.options = options_json(saved_, "nc: 1\n", 1, {"thing"});
    save_checkpoint(ckpt_, {&model}, info);
  }

  // The checkpoint's run-shaping options arrived.
  void expect_checkpoint_options(const TrainOptions& o) const {
    EXPECT_EQ(o.epochs, 7);
    EXPECT_EQ(o.batch_size, 32);
    EXPECT_EQ(o.img_size, 320);
    EXPECT_EQ(o.freeze, std::vector<int>{2});
    EXPECT_EQ(o.hyp, "data/hyps/hyp.scratch-med.yaml");
    EXPECT_EQ(o.seed, 5u);
    EXPECT_EQ(o.amp, AmpMode::Off);
    EXPECT_TRUE(o.multi_scale);
    EXPECT_EQ(o.cache, CacheMode::Ram);
    EXPECT_EQ(o.optimizer, OptimizerKind::Adam);
    EXPECT_EQ(o.label_smoothing, 0.1);
    EXPECT_EQ(o.patience, 9);
    EXPECT_EQ(o.name, "exp");
  }

  std::string project_, ckpt_;
  TrainOptions saved_;
};

TEST_F(PlanResume, OptionsComeFromTheCheckpointAndNotesSayWhatWasOverridden) {
  TrainOptions r;
  r.resume = ckpt_;
  r.batch_size = 8;  // shapes the run: the checkpoint's 32 wins
  r.workers = 3;     // may change
  r.weights = "yolov5s.safetensors";
  r.trace = (dir_ / "trace.json").string();
  r.dist_timeout = 60;
  r.interrupt_after = 5;
  const ResumePlan plan = plan_resume(r);
  EXPECT_EQ(plan.path, ckpt_);
  EXPECT_EQ(plan.save_dir, (dir_ / "runs/exp").string());
  EXPECT_EQ(plan.info.epoch, 3);
  EXPECT_EQ(plan.info.best_fitness, 0.25);
  expect_checkpoint_options(plan.options);
  EXPECT_EQ(plan.options.device, "cpu") << "the request left --device at its default";
  EXPECT_EQ(plan.options.workers, 3);
  EXPECT_EQ(plan.options.trace, r.trace);
  EXPECT_EQ(plan.options.dist_timeout, 60);
  EXPECT_EQ(plan.options.interrupt_after, 5);
  EXPECT_EQ(plan.options.resume, ckpt_);
  EXPECT_EQ(plan.options.weights, "") << "a resumed run starts from the checkpoint, not --weights";

  const std::string notes = join(plan.notes);
  EXPECT_EQ(plan.notes.size(), 2u) << notes;
  EXPECT_TRUE(has_note(plan, "keeping the checkpoint's batch_size '32'")) << notes;
  EXPECT_TRUE(has_note(plan, "'8'")) << notes;
  EXPECT_TRUE(has_note(plan, "workers changed from '2' to '3'")) << notes;
  EXPECT_FALSE(has_note(plan, "epochs")) << "the request left --epochs at its default:\n" << notes;
  EXPECT_FALSE(has_note(plan, "weights")) << notes;
}

TEST_F(PlanResume, BareResumeFindsTheCheckpointUnderTheProject) {
  TrainOptions r;
  r.resume = "";
  r.project = project_;
  r.device = "0";
  r.no_overlap = true;
  r.bucket_cap_mb = 8;
  r.epochs = 300;
  const ResumePlan plan = plan_resume(r);
  EXPECT_EQ(plan.path, ckpt_);
  EXPECT_EQ(plan.save_dir, (dir_ / "runs/exp").string());
  expect_checkpoint_options(plan.options);
  EXPECT_EQ(plan.options.resume, ckpt_);
  EXPECT_EQ(plan.options.device, "0");
  EXPECT_EQ(plan.options.workers, 2) << "the request left --workers at its default";
  EXPECT_TRUE(plan.options.no_overlap);
  EXPECT_EQ(plan.options.bucket_cap_mb, 8);

  const std::string notes = join(plan.notes);
  EXPECT_EQ(plan.notes.size(), 4u) << notes;
  EXPECT_TRUE(has_note(plan, "device changed from 'cpu' to '0'")) << notes;
  EXPECT_TRUE(has_note(plan, "no_overlap changed")) << notes;
  EXPECT_TRUE(has_note(plan, "bucket_cap_mb changed")) << notes;
  EXPECT_TRUE(has_note(plan, "keeping the checkpoint's epochs '7'")) << notes;
  EXPECT_FALSE(has_note(plan, "workers")) << notes;
  EXPECT_FALSE(has_note(plan, "project")) << notes;
}

TEST_F(PlanResume, RequestEqualToTheCheckpointHasNoNotes) {
  TrainOptions r = saved_;
  r.resume = ckpt_;
  const ResumePlan plan = plan_resume(r);
  EXPECT_TRUE(plan.notes.empty()) << join(plan.notes);
  expect_checkpoint_options(plan.options);
  EXPECT_EQ(plan.options.device, "cpu");
  EXPECT_EQ(plan.options.workers, 2);
}

TEST_F(PlanResume, NothingToResumeNamesTheProjectOrPath) {
  TrainOptions r;
  r.resume = "";
  r.project = (dir_ / "no_such_project").string();
  try {
    plan_resume(r);
    ADD_FAILURE() << "planned a resume from an empty project";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(r.project), std::string::npos) << e.what();
  }
  r.resume = (dir_ / "runs/exp9/weights/last.safetensors").string();
  try {
    plan_resume(r);
    ADD_FAILURE() << "planned a resume from a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(*r.resume), std::string::npos) << e.what();
  }
  TrainOptions no_resume;
  EXPECT_THROW(plan_resume(no_resume), Error);
}
