// A segmentation run's best.pt and last.pt (issues 38 and 41): `kestrel segment train` writes them
// as segment/train.py does, its model a models.yolo.SegmentationModel. Read back through Kestrel's
// own .pt reader, last.pt equals the epoch's safetensors checkpoint (weights rounded to float16,
// momentum buffers, group rates, epoch, EMA updates); when the run ends both are stripped, and
// load_segmentation_weights reads them into the stripped safetensors' weights. Live, where Python
// with torch and the v7.0 tree exist: torch.load of best.pt gives a SegmentationModel whose eval
// forward is Kestrel's, the reference's segment/val.py validates best.pt, segment/train.py
// --resume finishes a run Kestrel started, and Kestrel continues a run the reference's
// segment/train.py started (`kestrel segment train --resume last.pt`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/autograd.h"
#include "engine/safetensors_tensors.h"
#include "tests/support/cli.h"
#include "tests/yolo/train/seg_dataset.h"
#include "yolo/model/pt_checkpoint.h"
#include "yolo/model/segmentation_file.h"
#include "yolo/model/weights.h"
#include "yolo/model/weights_file.h"
#include "yolo/train/checkpoint.h"
#include "yolo/train/trainer.h"

using namespace kestrel;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("kestrel_seg_reference_files_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

yolo::TrainOptions tiny_run(const fs::path& project, const fs::path& data) {
  yolo::TrainOptions o = yolo::train_defaults(yolo::TrainTaskKind::Segment);
  o.cfg = "models/yolov5n-seg.yaml";
  o.data = data.string();
  o.device = "cpu";
  o.img_size = 64;
  o.batch_size = 4;
  o.epochs = 2;
  o.workers = 1;
  o.noplots = true;
  o.no_tensorboard = true;
  o.save_period = 1;
  o.project = project.string();
  o.name = "exp";
  return o;
}

std::vector<float> floats(const SafetensorsFile& f, const std::string& name) {
  Tensor t = safetensors_tensor(f, name).to(DType::F32).contiguous();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<float> floats(const Tensor& source) {
  Tensor t = source.to(Device::cpu()).to(DType::F32).contiguous();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::vector<float> rounded_half(std::vector<float> v) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(DType::F16).to(DType::F32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// pt_writer_check.py's image and sums: decoded detections, |raw|, prototypes, |prototypes|.
std::vector<double> forward_sums(yolo::SegmentationModel& m, int64_t h, int64_t w) {
  std::vector<float> pixels;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) pixels.push_back(static_cast<float>((y * 7 + x * 3 + c * 5) % 17) / 16.0f);
  m.train(false);
  autograd::NoGradGuard no_grad;
  const yolo::SegmentationModel::Prediction p = m.predict(Tensor::from_vector(pixels, {1, h, w, 3}));
  std::vector<double> sums(4, 0.0);
  for (float v : floats(p.boxes)) sums[0] += v;
  for (const Tensor& r : p.raw)
    for (float v : floats(r)) sums[1] += std::abs(v);
  for (float v : floats(p.protos)) {
    sums[2] += v;
    sums[3] += std::abs(v);
  }
  return sums;
}

}  // namespace

TEST(SegmentReferenceFiles, LastPtIsTheEpochsCheckpointAndBothReadBackStripped) {
  const fs::path dir = scratch("run");
  const fs::path data = kestrel::testing::write_seg_dataset(dir / "data", 8);
  yolo::TrainOptions first = tiny_run(dir / "runs", data);
  first.interrupt_after = 3;  // epoch 1's first batch (2 batches an epoch)
  ASSERT_EQ(yolo::train(first), 130);
  const fs::path w = dir / "runs/exp/weights";
  // last.pt is epoch 0's: the reference's segment/train.py checkpoint.
  const yolo::PtCheckpoint raw = yolo::parse_pt_checkpoint(yolo::read_file_bytes((w / "last.pt").string()), (w / "last.pt").string());
  EXPECT_TRUE(raw.model->is_call("models.yolo.SegmentationModel"));
  ASSERT_NE(raw.ema, nullptr);
  EXPECT_TRUE(raw.ema->is_call("models.yolo.SegmentationModel"));
  const pickle::Value* opt = raw.root->find("opt");
  EXPECT_EQ(opt->find("mask_ratio")->integer, 4);
  EXPECT_TRUE(opt->find("no_overlap")->is(pickle::Value::Kind::Bool));
  const SafetensorsFile pt = yolo::read_checkpoint_file((w / "last.pt").string());
  const SafetensorsFile st = yolo::read_checkpoint_file((w / "epoch0.safetensors").string());
  EXPECT_EQ(pt.metadata().at("epoch"), "0");
  EXPECT_EQ(pt.metadata().at("ema_updates"), st.metadata().at("ema_updates"));
  EXPECT_EQ(json::parse(pt.metadata().at("best_fitness")).as_real(), json::parse(st.metadata().at("best_fitness")).as_real());
  EXPECT_EQ(json::dump(json::parse(pt.metadata().at("optimizer"))), json::dump(json::parse(st.metadata().at("optimizer"))));
  // The options Kestrel resumes with: a segmentation run's.
  const json::Value options = json::parse(pt.metadata().at("options"));
  EXPECT_EQ(options.find("task")->as_string(), "segment");
  EXPECT_EQ(options.find("mask_ratio")->as_string(), "4");
  EXPECT_EQ(options.find("no_overlap")->as_string(), "false");
  int weights = 0, buffers = 0;
  for (const std::string& name : st.names()) {
    if (name.rfind("grad.", 0) == 0 || name.ends_with("num_batches_tracked")) continue;
    ASSERT_TRUE(pt.contains(name)) << name;
    if (name.rfind("optimizer.", 0) == 0) {
      EXPECT_EQ(floats(pt, name), floats(st, name)) << name;
      ++buffers;
    } else {
      EXPECT_EQ(floats(pt, name), rounded_half(floats(st, name))) << name;
      ++weights;
    }
  }
  EXPECT_GT(weights, 300);
  EXPECT_GT(buffers, 177);  // detection's yolov5n has 177 parameters; Proto adds its own
  EXPECT_TRUE(fs::exists(w / "best.pt"));
  EXPECT_TRUE(fs::exists(w / "epoch0.pt"));

  // A copy of the run as Kestrel left it, for the reference's segment/train.py --resume below.
  const fs::path copy = dir / "copy";
  fs::create_directories(copy);
  fs::copy(dir / "runs", copy / "runs", fs::copy_options::recursive);
  {  // opt.yaml names the run's own directory: the copy's, as a user moving a run would edit it.
    std::ifstream in(copy / "runs/exp/opt.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::ofstream(copy / "runs/exp/opt.yaml")
        << std::regex_replace(text.str(), std::regex((dir / "runs").string()), (copy / "runs").string());
  }

  // The run's end: both .pt stripped to the EMA in float16, read by load_segmentation_weights.
  yolo::TrainOptions again = first;
  again.interrupt_after = 0;
  again.resume = (w / "last.safetensors").string();
  ASSERT_EQ(yolo::train(again), 0);
  for (const char* name : {"last", "best"}) {
    const fs::path path = w / (std::string(name) + ".pt");
    const yolo::PtCheckpoint ckpt = yolo::parse_pt_checkpoint(yolo::read_file_bytes(path.string()), path.string());
    EXPECT_EQ(ckpt.root->find("epoch")->integer, -1) << path;
    EXPECT_TRUE(ckpt.root->find("optimizer")->is(pickle::Value::Kind::None)) << path;
    const yolo::LoadedSegmenter loaded = yolo::load_segmentation_weights(path.string(), Device::cpu());
    EXPECT_EQ(loaded.names, (std::vector<std::string>{"square", "triangle"}));
    // The stripped safetensors (float16 already) read the same way hold the same weights.
    const yolo::LoadedSegmenter st_model =
        yolo::load_segmentation_weights((w / (std::string(name) + ".safetensors")).string(), Device::cpu());
    const std::vector<layers::StateEntry> got = loaded.model->state_entries(), want = st_model.model->state_entries();
    ASSERT_EQ(got.size(), want.size());
    int compared = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].name, want[i].name);
      if (got[i].name.ends_with("num_batches_tracked")) continue;
      EXPECT_EQ(floats(*got[i].slot), rounded_half(floats(*want[i].slot))) << path << " " << got[i].name;
      ++compared;
    }
    EXPECT_GT(compared, 300);
    // And the file's tensors, as Kestrel's .pt reader gives them, are the stripped safetensors'.
    const SafetensorsFile pt_file = yolo::read_weights_file(path.string());
    const SafetensorsFile stripped = yolo::read_weights_file((w / (std::string(name) + ".safetensors")).string());
    for (const std::string& n : stripped.names())
      if (!n.ends_with("num_batches_tracked")) EXPECT_EQ(floats(pt_file, n), floats(stripped, n)) << path << " " << n;
  }

  kestrel::testing::Reference ref;
  if (const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml", "cv2", "pandas"}, "segment/val.py");
      !missing.empty()) {
    std::cout << "[  SKIPPED ] the reference's torch.load and segment/val.py: " << missing << "\n";
    fs::remove_all(dir);
    return;
  }
  // torch.load: a SegmentationModel as the reference builds one, computing Kestrel's outputs.
  const kestrel::testing::CliResult check =
      kestrel::testing::run_reference_python(ref, "tests/scripts/pt_writer_check.py " + (w / "best.pt").string() + " 64 64");
  ASSERT_EQ(check.code, 0) << check.out;
  const size_t at = check.out.rfind("sums "), pat = check.out.rfind("protos ");
  ASSERT_TRUE(at != std::string::npos && pat != std::string::npos) << check.out;
  std::istringstream line(check.out.substr(at + 5)), protos(check.out.substr(pat + 7));
  std::vector<double> theirs(4);
  int nc = 0;
  std::string names;
  line >> theirs[0] >> theirs[1] >> nc >> names;
  protos >> theirs[2] >> theirs[3];
  EXPECT_EQ(nc, 2);
  EXPECT_EQ(names, "square,triangle");
  yolo::LoadedSegmenter best = yolo::load_segmentation_weights((w / "best.pt").string(), Device::cpu());
  const std::vector<double> ours = forward_sums(*best.model, 64, 64);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(ours[i], theirs[i], 1e-3 * std::abs(theirs[i]) + 1e-3) << i << "\n" << check.out;

  // The reference's segment/train.py --resume continues the copy of the interrupted run (its
  // last.pt after epoch 0, opt.yaml, hyp.yaml) to its end.
  const kestrel::testing::CliResult resumed = kestrel::testing::run_reference_python(
      ref, "tests/scripts/reference_resume.py " + (copy / "runs/exp/weights/last.pt").string());
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("task segment"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("checkpoint epoch 0 updates"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("Resuming training from"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("reference resume done"), std::string::npos) << resumed.out;

  // The reference's segment/val.py reads best.pt.
  const kestrel::testing::CliResult val = kestrel::testing::run_reference_python(
      ref, "tests/scripts/seg_val_reference.py val " + (w / "best.pt").string() + " " + data.string() + " 64 8 0.001 " +
               (dir / "val").string());
  ASSERT_EQ(val.code, 0) << val.out;
  EXPECT_NE(val.out.find("full precision: "), std::string::npos) << val.out;
  fs::remove_all(dir);
}

// The reference's segment/train.py runs 2 epochs with --save-period 1; its epoch0.pt put back as
// last.pt is the run stopped after epoch 0, which `kestrel segment train --resume last.pt`
// continues for its one remaining epoch, writing the run's stripped best.pt and last.pt.
TEST(SegmentReferenceFiles, KestrelResumesTheReferencesSegmentationRun) {
  kestrel::testing::Reference ref;
  if (const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml", "cv2", "pandas"}, "segment/train.py");
      !missing.empty())
    GTEST_SKIP() << missing;
  const fs::path dir = scratch("resume");
  const fs::path data = kestrel::testing::write_seg_dataset(dir / "data", 8);
  const fs::path run = dir / "reference";
  const kestrel::testing::CliResult made = kestrel::testing::run_reference_python(
      ref, "tests/scripts/seg_val_reference.py resumable " + data.string() + " 64 4 " + run.string());
  ASSERT_EQ(made.code, 0) << made.out;
  const fs::path last = run / "weights/last.pt";
  ASSERT_TRUE(fs::exists(last)) << made.out;

  // What Kestrel reads of it: epoch 0 of a segmentation run with segment/train.py's options.
  const SafetensorsFile ckpt = yolo::read_checkpoint_file(last.string());
  EXPECT_EQ(ckpt.metadata().at("epoch"), "0");
  const json::Value options = json::parse(ckpt.metadata().at("options"));
  EXPECT_EQ(options.find("task")->as_string(), "segment");
  EXPECT_EQ(options.find("mask_ratio")->as_string(), "4");
  EXPECT_EQ(options.find("no_overlap")->as_string(), "false");
  EXPECT_EQ(options.find("epochs")->as_string(), "2");

  yolo::TrainOptions resume = yolo::train_defaults(yolo::TrainTaskKind::Segment);
  resume.resume = last.string();
  resume.device = "cpu";
  resume.workers = 1;
  resume.no_tensorboard = true;
  ASSERT_EQ(yolo::train(resume), 0);
  // One more epoch, in the reference's run folder: its results.csv row, and the run's end.
  const auto rows = kestrel::testing::read_results_csv(run / "results.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1][0], 1);
  for (const char* name : {"last.pt", "best.pt"}) {
    const fs::path path = run / "weights" / name;
    const yolo::PtCheckpoint done = yolo::parse_pt_checkpoint(yolo::read_file_bytes(path.string()), path.string());
    EXPECT_EQ(done.root->find("epoch")->integer, -1) << path;
    EXPECT_TRUE(done.model->is_call("models.yolo.SegmentationModel")) << path;
  }
  EXPECT_TRUE(fs::exists(run / "weights/last.safetensors"));
  fs::remove_all(dir);
}
