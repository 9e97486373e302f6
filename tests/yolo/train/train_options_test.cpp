// The training options' one table: each row names one option once (flag, opt.yaml key), the rows
// that hold a field read and write it, the reference's flags come in the reference's order, and
// reading refuses every value an option cannot take (as the command line and a checkpoint both
// read through it), with a message that says what is wrong.
#include "yolo/train/train_options.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

using namespace kestrel::yolo;

namespace {

const TrainOptionSpec& row(const std::string& flag) {
  for (const TrainOptionSpec& s : train_option_specs())
    if (s.flag && flag == s.flag) return s;
  throw std::runtime_error("no row --" + flag);
}

// What reading `text` into a default TrainOptions says ("" when it is accepted).
std::string refusal(const std::string& flag, const std::string& text) {
  TrainOptions o;
  try {
    row(flag).read(o, text);
  } catch (const OptionError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TrainOptionTable, EachOptionIsNamedOnceAndFieldRowsReadAndWrite) {
  std::set<std::string> flags, keys;
  for (const TrainOptionSpec& s : train_option_specs()) {
    ASSERT_NE(s.flag, nullptr);
    EXPECT_TRUE(flags.insert(s.flag).second) << "--" << s.flag << " twice";
    EXPECT_EQ(s.read == nullptr, s.write == nullptr) << s.flag;
    if (s.key) {
      EXPECT_TRUE(keys.insert(s.key).second) << s.key << " twice";
      EXPECT_NE(s.read, nullptr) << s.key << " is recorded but has no field";
    }
    ASSERT_NE(s.help, nullptr) << s.flag;
  }
  // opt.yaml holds exactly the recorded rows, in the table's order.
  std::vector<std::string> recorded;
  for (const auto& [k, v] : TrainOptions{}.to_pairs()) recorded.push_back(k);
  EXPECT_EQ(recorded.size(), keys.size());
  EXPECT_EQ(recorded.front(), "weights");
}

TEST(TrainOptionTable, TheReferencesFlagsComeInItsOrder) {
  // train.py's parse_opt, in its order.
  const std::vector<std::string> reference = {
      "weights", "cfg", "data", "hyp", "epochs", "batch-size", "img-size", "rect", "resume", "nosave", "noval",
      "noautoanchor", "noplots", "evolve", "bucket", "cache", "image-weights", "device", "multi-scale", "single-cls",
      "optimizer", "sync-bn", "workers", "project", "name", "exist-ok", "quad", "cos-lr", "label-smoothing",
      "patience", "freeze", "save-period", "seed", "local-rank", "entity", "upload-dataset", "bbox-interval",
      "artifact-alias"};
  std::vector<std::string> got;
  const std::set<std::string> wanted(reference.begin(), reference.end());
  for (const TrainOptionSpec& s : train_option_specs())
    if (wanted.count(s.flag)) got.push_back(s.flag);
  EXPECT_EQ(got, reference);
}

TEST(TrainOptionTable, ReadingChecksEveryValueOnce) {
  EXPECT_EQ(refusal("img-size", "640"), "");
  EXPECT_EQ(refusal("img-size", "16"), "must be >= 32, got 16");
  EXPECT_EQ(refusal("img-size", "9000"), "9000 is above the limit of 8192 pixels a side");
  EXPECT_EQ(refusal("epochs", "4294967304"), "4294967304 is out of range (at most 2147483647)");
  EXPECT_EQ(refusal("epochs", "0"), "must be >= 1, got 0");
  EXPECT_EQ(refusal("epochs", "12x"), "expects an integer, got '12x'");
  EXPECT_EQ(refusal("seed", "-1"), "expects an integer, got '-1'");
  EXPECT_EQ(refusal("label-smoothing", "1"), "must be in [0, 1), got 1");
  EXPECT_EQ(refusal("label-smoothing", "x"), "expects a number, got 'x'");
  EXPECT_EQ(refusal("cache", "tape").rfind("supports ram", 0), 0u);
  EXPECT_EQ(refusal("optimizer", "Lion"), "must be SGD, Adam or AdamW, got 'Lion'");
  EXPECT_EQ(refusal("amp", "fp32"), "must be bf16, fp16, bf16-emulated or off, got 'fp32'");
  EXPECT_EQ(refusal("grad-compress", "int8"), "must be none, fp16 or bf16, got 'int8'");
  EXPECT_EQ(refusal("cuda-graph", "maybe"), "must be auto, on or off, got 'maybe'");
  EXPECT_EQ(refusal("edge-bucket-mb", "-1"), "must be >= 0 (0 turns edge buckets off), got -1");
  EXPECT_EQ(refusal("bucket-cap-mb", "0"), "must be positive, got 0");
  EXPECT_EQ(refusal("dist-phase-timeout", "0"), "must be positive, got 0");
  EXPECT_EQ(refusal("evolve", "0"), "N needs N >= 1 generations, got 0");
  EXPECT_EQ(refusal("freeze", "1,x"), "expects integers like 10 or 0,1,2, got '1,x'");
  EXPECT_EQ(refusal("rect", "yes"), "expects true or false, got 'yes'");
}

TEST(TrainOptionTable, ReadValuesAreTyped) {
  TrainOptions o;
  row("optimizer").read(o, "AdamW");
  row("cache").read(o, "ram");
  row("amp").read(o, "bf16-emulated");
  row("grad-compress").read(o, "bf16");
  row("cuda-graph").read(o, "off");
  row("freeze").read(o, "0,3,17");
  EXPECT_EQ(o.optimizer, OptimizerKind::AdamW);
  EXPECT_EQ(o.cache, CacheMode::Ram);
  EXPECT_EQ(o.amp, AmpMode::Bf16Emulated);
  EXPECT_EQ(o.grad_compress, kestrel::dist::GradCompress::BF16);
  EXPECT_EQ(o.cuda_graph, CudaGraphMode::Off);
  EXPECT_EQ(o.freeze, (std::vector<int>{0, 3, 17}));
  // opt.yaml's spelling of a list reads back as the flag's.
  row("freeze").read(o, row("freeze").write(o));
  EXPECT_EQ(o.freeze, (std::vector<int>{0, 3, 17}));
  row("freeze").read(o, "[]");
  EXPECT_TRUE(o.freeze.empty());
}
