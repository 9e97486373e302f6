// `kestrel train`'s launcher side: usage errors found before any worker starts (exit 2, naming
// the numbers), --sync-bn reaching the workers of a multi-process job, and --resume with
// --evolve continuing an evolution. Run directories: runs started together into one project
// each own a directory or are refused naming the owner's pid, and no file mixes two runs; a
// run failing at start-up leaves no directory; a multi-process --resume writes its rank logs
// beside the resumed run, not into ./runs/train.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "tests/dist/spawn.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"
#include "tests/yolo/train/training_state.h"
#include "yolo/data/image_codec.h"

namespace fs = std::filesystem;

namespace {

using kestrel::testing::kestrel_binary;

kestrel::testing::CliResult run(const std::string& args) { return kestrel::testing::run_kestrel(args); }

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_train_command_test_" + name);
  fs::remove_all(p);
  return p;
}

const std::string kTiny =
    "train --cfg models/yolov5n.yaml --device cpu --img-size 64 --epochs 1 --workers 1"
    " --max-batches 2 --noplots";

}  // namespace

TEST(TrainCommand, RefusesALaunchThatEveryWorkerWouldFail) {
  const fs::path project = scratch("usage");
  auto r = run(kTiny + " --batch-size 4 --nproc-per-node 3 --project " + project.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--batch-size 4 must be a multiple of the world size 3"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(project)) << "a worker started";

  EXPECT_EQ(run(kTiny + " --max-restarts -1").code, 2);
  EXPECT_EQ(run(kTiny + " --nproc-per-node 2 --max-restarts x").code, 2);
}

TEST(TrainCommand, SyncBnReachesTheWorkers) {
  const fs::path project = scratch("syncbn");
  const auto r = run(kTiny + " --batch-size 4 --sync-bn --nproc-per-node 2 --max_restarts 0" +
                       " --master-port " + std::to_string(kestrel::testing::free_port()) +
                       " --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(project / "exp/weights/last.safetensors"));
  EXPECT_FALSE(fs::exists(project / "exp2")) << r.out;
  fs::remove_all(project);
}

// The reference's spellings: a bare --cache means ram, and argparse abbreviations name their
// flag (--batch for --batch-size). Checked up to the launch check, which reads both.
TEST(TrainCommand, BareCacheAndAbbreviationsParseAsTheReference) {
  auto r = run("train --cache --batch 5 --nproc-per-node 2 --device cpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--batch-size 5 must be a multiple of the world size 2"), std::string::npos) << r.out;
  r = run("train --cache tape --device cpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--cache supports ram"), std::string::npos) << r.out;
}

// --cuda-graph: a bad value is a usage error; "on" where graphs cannot run says why; "off" and
// "auto" train on the CPU (auto turns graphs off there).
TEST(TrainCommand, CudaGraphFlag) {
  auto r = run(kTiny + " --cuda-graph maybe");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--cuda-graph must be auto, on or off, got 'maybe'"), std::string::npos) << r.out;
  const fs::path project = scratch("cuda_graph");
  r = run(kTiny + " --cuda-graph on --project " + project.string());
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--cuda-graph on: it needs a CUDA device; use --cuda-graph off"), std::string::npos) << r.out;
  r = run(kTiny + " --cuda-graph off --project " + project.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("CUDA graphs:"), std::string::npos) << r.out;
  fs::remove_all(project);
}

namespace {

struct StartedRun {
  std::string optimizer;
  std::string pid;
  int code = -1;
  std::string out;
};

// Starts one `kestrel train` per optimizer at the same moment (background jobs of one shell) into
// `project`, and waits for all of them.
std::vector<StartedRun> train_together(const fs::path& project, const std::string& extra) {
  const std::vector<std::string> optimizers = {"SGD", "Adam", "AdamW"};
  const std::string run =
      "OMP_NUM_THREADS=1 " + kestrel_binary().string() +  // three runs share the cores
      " train --cfg models/yolov5n.yaml --device cpu --img-size 64 --epochs 3 --batch-size 2"
      " --workers 0 --max-batches 2 --noplots --project " + project.string() + " " + extra;
  const fs::path logs = project.string() + ".logs";
  fs::create_directories(logs);
  std::string script;
  for (size_t i = 0; i < optimizers.size(); ++i)
    script += run + " --optimizer " + optimizers[i] + " >" + (logs / std::to_string(i)).string() +
              " 2>&1 & p" + std::to_string(i) + "=$!; ";
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const std::string n = std::to_string(i), base = (logs / n).string();
    script += "wait $p" + n + "; echo $? >" + base + ".rc; echo $p" + n + " >" + base + ".pid; ";
  }
  kestrel::testing::run_command(script);
  std::vector<StartedRun> runs;
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const fs::path base = logs / std::to_string(i);
    StartedRun r;
    r.optimizer = optimizers[i];
    r.out = kestrel::testing::read_file(base);
    std::ifstream(base.string() + ".rc") >> r.code;
    std::ifstream(base.string() + ".pid") >> r.pid;
    runs.push_back(r);
  }
  fs::remove_all(logs);
  return runs;
}

std::string opt_value(const fs::path& run_dir, const std::string& key) {
  std::istringstream in(kestrel::testing::read_file(run_dir / "opt.yaml"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ": ", 0) == 0) return line.substr(key.size() + 2);
  return "";
}

// The epoch column of results.csv, row by row.
std::vector<int> result_epochs(const fs::path& run_dir) {
  std::istringstream in(kestrel::testing::read_file(run_dir / "results.csv"));
  std::vector<int> epochs;
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) epochs.push_back(std::stoi(line));
  return epochs;
}

// What a finished 3-epoch run of `optimizer` leaves in its own directory, and nothing of another.
void expect_one_runs_files(const fs::path& run_dir, const std::string& optimizer) {
  EXPECT_EQ(opt_value(run_dir, "optimizer"), optimizer) << run_dir;
  EXPECT_EQ(result_epochs(run_dir), (std::vector<int>{0, 1, 2})) << run_dir << " mixes runs:\n"
                                                                  << kestrel::testing::read_file(run_dir / "results.csv");
  EXPECT_TRUE(fs::exists(run_dir / "weights/last.safetensors")) << run_dir;
  int event_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "a temporary left: " << e.path();
    event_files += name.rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(event_files, 1) << run_dir << ": TensorBoard files of several runs";
}

}  // namespace

// Three runs given one --name with --exist-ok, started together: the first to lock the directory
// trains in it; the others are refused at once, naming its pid and the fix, and leave nothing in
// it (before the lock, all trained into exp: results.csv held two runs' rows, 0 0 1 1 2 2, and a
// run could die renaming a temporary another run had already renamed).
TEST(TrainCommand, RunsStartedTogetherWithExistOkShareNoDirectory) {
  const fs::path project = scratch("together_exist_ok");
  const std::vector<StartedRun> runs = train_together(project, "--exist-ok");
  const StartedRun* owner = nullptr;
  for (const StartedRun& r : runs)
    if (r.code == 0) {
      EXPECT_EQ(owner, nullptr) << "two runs trained in one directory:\n" << owner->out << "\n" << r.out;
      owner = &r;
    }
  ASSERT_NE(owner, nullptr) << runs[0].out << runs[1].out << runs[2].out;
  for (const StartedRun& r : runs) {
    if (&r == owner) continue;
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("is in use by another run (pid " + owner->pid + " on host "), std::string::npos)
        << "owner pid " << owner->pid << ":\n" << r.out;
    EXPECT_NE(r.out.find("choose another --name, or drop --exist-ok"), std::string::npos) << r.out;
  }
  expect_one_runs_files(project / "exp", owner->optimizer);
  EXPECT_FALSE(fs::exists(project / "exp2"));
  fs::remove_all(project);
}

// The same three without --exist-ok: each gets its own directory, exp, exp2 and exp3 (the
// reference's numbering), and each directory holds its run's files alone.
TEST(TrainCommand, RunsStartedTogetherEachGetADirectoryOfTheirOwn) {
  const fs::path project = scratch("together");
  const std::vector<StartedRun> runs = train_together(project, "");
  std::set<std::string> dirs;
  for (const StartedRun& r : runs) {
    ASSERT_EQ(r.code, 0) << r.out;
    const size_t at = r.out.find("Results saved to ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string dir = r.out.substr(at + 17, r.out.find('\n', at) - at - 17);
    dirs.insert(fs::path(dir).filename().string());
    expect_one_runs_files(dir, r.optimizer);
  }
  EXPECT_EQ(dirs, (std::set<std::string>{"exp", "exp2", "exp3"}));
  EXPECT_FALSE(fs::exists(project / "exp4"));
  fs::remove_all(project);
}

// A run that fails at start-up (here: a dataset that does not exist) leaves no exp behind; an
// existing directory given with --exist-ok stays as it was.
TEST(TrainCommand, ARunFailingAtStartUpLeavesNoRunDirectory) {
  const fs::path project = scratch("startup_failure");
  auto r = run(kTiny + " --data no_such_dataset.yaml --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no_such_dataset.yaml"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(project / "exp")) << r.out;

  fs::create_directories(project / "mine");
  std::ofstream(project / "mine" / "notes.txt") << "kept";
  r = run(kTiny + " --data no_such_dataset.yaml --name mine --exist-ok --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(kestrel::testing::read_file(project / "mine" / "notes.txt"), "kept");
  fs::remove_all(project);
}

// `--nproc-per-node 2 --resume PATH` without --project: rank 1's log goes beside the resumed run
// (its project), not into the run directory and not into ./runs/train. The resumed file is a
// finished (stripped) checkpoint, which every worker refuses at once: the log is made before.
TEST(TrainCommand, RankLogsOfAResumeGoBesideTheResumedRun) {
  const fs::path project = scratch("rank_logs");
  // One OpenMP thread: on a busy machine idle threads spinning on the few cores make it 5x slower.
  auto r = kestrel::testing::run_command("OMP_NUM_THREADS=1 " + kestrel_binary().string() + " " + kTiny +
                                         " --batch-size 2 --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path cwd = project / "elsewhere";
  fs::create_directories(cwd);
  r = kestrel::testing::run_kestrel_in(
      cwd, "train --nproc-per-node 2 --device cpu --master-port " + std::to_string(kestrel::testing::free_port()) +
               " --resume " + (project / "exp/weights/last.safetensors").string());
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("is a stripped final checkpoint"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(cwd / "runs")) << r.out;
  EXPECT_FALSE(fs::exists(project / "exp" / "rank1.log"));
  EXPECT_TRUE(fs::exists(project / "rank1.log"));
  fs::remove_all(project);
}

// As the reference, --resume with --evolve resumes no checkpoint: it continues the newest
// evolution's directory and its evolve.csv, with --cfg found by name as in any other run.
TEST(TrainCommand, ResumeWithEvolveContinuesTheLastEvolution) {
  const fs::path project = scratch("evolve_resume");
  fs::create_directories(project / "data/images");
  fs::create_directories(project / "data/labels");
  for (const char* name : {"a", "b", "c", "d"}) {  // four images: validation stays quick
    kestrel::yolo::data::write_jpeg((project / "data/images" / (std::string(name) + ".jpg")).string(),
                                    cv::Mat(64, 64, CV_8UC3, cv::Scalar(30, 90, 150)));
    std::ofstream(project / "data/labels" / (std::string(name) + ".txt")) << "0 0.5 0.5 0.4 0.4\n";
  }
  std::ofstream(project / "data/data.yaml") << "path: " << (project / "data").string()
                                            << "\ntrain: images\nval: images\nnames: [x]\n";
  const std::string evolve = "train --cfg yolov5n.yaml --data " + (project / "data/data.yaml").string() +
                             " --device cpu --img-size 64 --epochs 1 --workers 1 --max-batches 1 --noplots"
                             " --batch-size 4 --resume --evolve 1 --project " + (project / "runs").string();
  auto r = run(evolve);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run(evolve);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(project / "runs/exp2")) << r.out;
  std::ifstream csv(project / "runs/exp/evolve.csv");
  int lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, 3) << "a header and one row per generation";
  fs::remove_all(project);
}

// An image size no run could use is refused as a usage error naming the limit (it once failed
// inside OpenCV, asking for 2 TB).
TEST(TrainCommand, ImageSizesAboveTheLimitAreRefused) {
  const fs::path project = scratch("huge_img");
  const auto r = run("train --device cpu --img 1000000 --project " + project.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--img-size 1000000 is above the limit of 8192 pixels a side"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(project));
  EXPECT_EQ(run("train --device cpu --img-size 8193 --project " + project.string()).code, 2);
}

// As the reference's Model(cfg or ckpt['model'].yaml): a YOLOv5 .pt without --cfg trains its own
// model, every tensor transferred (the anchors too, as the reference keeps them then); with --cfg
// the anchors stay the yaml's. Plain weights without --cfg are refused, naming the fix.
TEST(TrainCommand, PtWeightsBringTheirModel) {
  const fs::path project = scratch("pt_weights");
  const std::string common = "train --weights tests/data/yolov5n_synthetic.pt --data synthetic --epochs 1 "
                             "--img-size 64 --batch-size 4 --max-batches 1 --device cpu --workers 1 --noval "
                             "--noplots --no-tensorboard --noautoanchor --project " + project.string();
  auto r = run(common);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Transferred 349/349 items from tests/data/yolov5n_synthetic.pt"), std::string::npos) << r.out;
  r = run(common + " --cfg yolov5n.yaml");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Transferred 348/349 items"), std::string::npos) << r.out;
  const std::string plain = (project / "plain.safetensors").string();
  ASSERT_EQ(run("model --cfg models/yolov5n.yaml --nc 4 --save " + plain).code, 0);
  r = run("train --weights " + plain + " --data synthetic --device cpu --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("carries no model yaml (plain weights): give the model with --cfg"), std::string::npos) << r.out;
  fs::remove_all(project);
}

// --resume continues a run the reference started (tests/data/tiny_train.pt: train.py's last.pt
// after epoch 1 of 3, batch 32): from epoch 2, in the checkpoint's own run directory, with its
// options; the finished run's results row is written and its last weights stripped.
TEST(TrainCommand, ResumesARunTheReferenceStarted) {
  const fs::path project = scratch("pt_resume");
  fs::create_directories(project / "exp/weights");
  const fs::path last = project / "exp/weights/last.pt";
  fs::copy_file("tests/data/tiny_train.pt", last);
  const auto r = run("train --resume " + last.string() + " --device cpu --workers 1 --no-tensorboard");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Resuming training from " + last.string() + " from epoch 2 to 3 total epochs"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("tiny summary: 214 layers"), std::string::npos) << r.out;  // the checkpoint's model
  std::ifstream csv(project / "exp/results.csv");
  std::string header, row, extra;
  ASSERT_TRUE(std::getline(csv, header) && std::getline(csv, row));
  EXPECT_FALSE(std::getline(csv, extra)) << "one epoch resumed, one row";
  EXPECT_EQ(row.substr(0, row.find(',')).find_first_not_of(' '), row.substr(0, row.find(',')).find('2'));
  EXPECT_TRUE(fs::exists(project / "exp/weights/last.safetensors"));
  fs::remove_all(project);
}

namespace {

// --edge-bucket-mb (DDP's first and last bucket cap): in the help, a negative or non-numeric value
// is a usage error before anything starts, and a valid one reaches opt.yaml (below).
TEST(TrainCommand, EdgeBucketFlag) {
  auto r = run("train --help");
  EXPECT_NE(r.out.find("--edge-bucket-mb"), std::string::npos) << r.out;
  const fs::path project = scratch("edge_bucket");
  r = run(kTiny + " --edge-bucket-mb -1 --project " + project.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--edge-bucket-mb must be >= 0 (0 turns edge buckets off), got -1"), std::string::npos)
      << r.out;
  EXPECT_EQ(run(kTiny + " --edge-bucket-mb half --project " + project.string()).code, 2);
  EXPECT_FALSE(fs::exists(project)) << "a run started";
}

// The reference's Google Cloud and W&B options are accepted, each with a note of what Kestrel
// does instead, and the run trains on; --bucket is its own flag, not --bucket-cap-mb, and
// --upload_dataset takes an optional value.
TEST(TrainCommand, CloudAndWandbOptionsGetANoteAndTrainingGoesOn) {
  const fs::path project = scratch("cloud_flags");
  auto r = run(kTiny + " --batch-size 8 --no-tensorboard --bucket my-bucket --entity me --upload_dataset"
                       " --bbox_interval 5 --artifact_alias latest --edge-bucket-mb 0.5 --timed-buckets --project " +
                       project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* note : {"--bucket my-bucket: Kestrel copies nothing to or from gs://my-bucket",
                           "--entity me: Kestrel has no Weights & Biases logging",
                           "--upload_dataset: Kestrel uploads no dataset",
                           "--bbox_interval 5: Kestrel logs no box images to W&B",
                           "--artifact_alias latest: Kestrel reads no W&B dataset artifacts"})
    EXPECT_NE(r.out.find(note), std::string::npos) << note << "\n" << r.out;
  EXPECT_EQ(opt_value(project / "exp", "bucket_cap_mb"), "4");
  EXPECT_EQ(opt_value(project / "exp", "edge_bucket_mb"), "0.5");
  EXPECT_EQ(opt_value(project / "exp", "timed_buckets"), "true");
  EXPECT_TRUE(fs::exists(project / "exp/weights/last.safetensors"));
  // A value after --upload_dataset is its own; --bucket-cap-mb alone gives no --bucket note. (The
  // run goes on to the trainer, which stops at the missing dataset.)
  r = run(kTiny + " --upload_dataset val --bucket-cap-mb 8 --data " + (project / "missing.yaml").string() +
          " --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--upload_dataset: Kestrel uploads no dataset"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("missing.yaml"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--bucket "), std::string::npos) << r.out;
  r = run(kTiny + " --data " + (project / "missing.yaml").string() + " --project " + project.string() + " --upload");
  EXPECT_EQ(r.code, 1) << r.out;  // a bare prefix, last on the line
  EXPECT_NE(r.out.find("--upload_dataset: Kestrel uploads no dataset"), std::string::npos) << r.out;
  r = run(kTiny + " --bbox_interval often --project " + project.string());  // an int, as in the reference
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--bbox-interval expects an integer, got 'often'"), std::string::npos) << r.out;
  // torch.distributed.launch's --local_rank=N is accepted (the rank comes from LOCAL_RANK); the run
  // goes on to the trainer, which stops at the missing dataset.
  r = run(kTiny + " --local_rank=0 --data " + (project / "missing.yaml").string() + " --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("missing.yaml"), std::string::npos) << r.out;
  fs::remove_all(project);
}

// --image-weights trains (its draws, unit-tested against the reference's in
// tests/yolo/data/image_weights_test.cpp, follow the validations' per-class mAPs), and is refused where the reference refuses it (DDP), or where its draw cannot form batches (--rect).
TEST(TrainCommand, ImageWeights) {
  const fs::path project = scratch("image_weights");
  auto r = run(kTiny + " --batch-size 4 --image-weights --nproc-per-node 2 --project " + project.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--image-weights is not compatible with multi-process (DDP) training"), std::string::npos) << r.out;
  r = run(kTiny + " --batch-size 4 --image-weights --rect --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("drop --rect or --image-weights"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(project / "exp")) << "a refused run left its directory";
  r = run("train --cfg models/yolov5n.yaml --device cpu --img-size 64 --epochs 2 --max-batches 2 --noplots --noval"
          " --no-tensorboard --batch-size 4 --image-weights --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(opt_value(project / "exp", "image_weights"), "true");
  EXPECT_EQ(result_epochs(project / "exp"), (std::vector<int>{0, 1}));
  fs::remove_all(project);
}

// --quad: batches of a quarter of the images at twice the size (the progress line's Size), and a
// batch per rank that is no multiple of 4 is refused.
TEST(TrainCommand, Quad) {
  const fs::path project = scratch("quad");
  auto r = run(kTiny + " --batch-size 6 --quad --project " + project.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--quad makes one image of every 4: the batch per rank (6) must be a multiple of 4"),
            std::string::npos) << r.out;
  r = run(kTiny + " --batch-size 8 --quad --no-tensorboard --project " + project.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("        128: "), std::string::npos) << "the quads are 128 px:\n" << r.out;
  EXPECT_EQ(opt_value(project / "exp", "quad"), "true");
  fs::remove_all(project);
}

// A reference run trained with --optimizer Adam (tests/data/tiny_adam.pt) resumes as the SGD one.
TEST(TrainCommand, ResumesAReferenceAdamRun) {
  const fs::path project = scratch("pt_resume_adam");
  fs::create_directories(project / "exp/weights");
  const fs::path last = project / "exp/weights/last.pt";
  fs::copy_file("tests/data/tiny_adam.pt", last);
  const auto r = run("train --resume " + last.string() + " --device cpu --workers 1 --no-tensorboard");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Resuming training from " + last.string() + " from epoch 2 to 3 total epochs"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("optimizer: Adam(lr=0.01)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(project / "exp/weights/last.safetensors"));
  fs::remove_all(project);
}

}  // namespace
