// A run the reference started, finished by Kestrel: `kestrel train --resume last.pt` on the
// reference's own mid-run last.pt continues as the reference's --resume continues it.
//
// The reference (YOLOv5 v7.0) trained tests/data/micro.yaml from scratch on coco128 (img 160,
// batch 16, 3 epochs, seed 0, CPU); its last.pt after epoch 0 is
// tests/data/micro_coco128_epoch0.pt, with the run's opt.yaml beside it as train.py wrote it. The
// reference's results for epochs 1 and 2 come two ways: from the uninterrupted run, and from
// train.py --resume of that last.pt. They differ only by the random draws of augmentation, which
// a resume starts afresh (init_seeds(seed + 1 + RANK) again): that difference is the seed noise.
// Kestrel resumes the same file, and each of its losses (train and val: box, obj, cls) must lie
// within three times the largest such difference in that column from the reference's resumed
// value; its learning rates (the schedule: epoch, warm-up, lambda) must equal the reference's.
// The val losses are computed with the EMA, so they also check that the EMA and its `updates`
// carried over; the train losses check the optimizer's momentum and the model.
//
// - RecordedReference: against tests/scripts/resume_parity_reference.txt (needs only coco128).
// - LiveReference: the same, with the reference run now (reference_fixture.py train_resume),
//   where PyTorch and the reference's source are present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "tests/support/cli.h"
#include "tests/support/coco128.h"

namespace fs = std::filesystem;
using kestrel::testing::CliResult;
using kestrel::testing::kCoco128;
using kestrel::testing::run_command;
using kestrel::testing::run_kestrel;
using kestrel::testing::scratch_coco128;

namespace {

// results.csv: epoch -> column -> value (header names trimmed).
using Results = std::map<int, std::map<std::string, double>>;

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string cell; std::getline(ss, cell, ',');) out.push_back(trim(cell));
  return out;
}

Results parse_results(const std::vector<std::string>& lines) {
  Results out;
  if (lines.empty()) return out;
  const std::vector<std::string> header = split(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = split(lines[i]);
    if (cells.size() != header.size()) continue;
    auto& row = out[std::stoi(cells[0])];
    for (size_t c = 1; c < cells.size(); ++c) row[header[c]] = std::stod(cells[c]);
  }
  return out;
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The recorded file's "== full" and "== resume" sections.
std::map<std::string, Results> read_recorded(const fs::path& file) {
  std::map<std::string, std::vector<std::string>> sections;
  std::string current;
  for (const std::string& line : read_lines(file)) {
    if (line.rfind("== ", 0) == 0) current = line.substr(3);
    else if (!current.empty() && !line.empty() && line[0] != '#') sections[current].push_back(line);
  }
  return {{"full", parse_results(sections["full"])}, {"resume", parse_results(sections["resume"])}};
}

const char* kLosses[] = {"train/box_loss", "train/obj_loss", "train/cls_loss",
                         "val/box_loss",   "val/obj_loss",   "val/cls_loss"};
const char* kRates[] = {"x/lr0", "x/lr1", "x/lr2"};

void expect_within_seed_noise(const Results& kestrel, const Results& full, const Results& resume) {
  ASSERT_EQ(kestrel.size(), 3u) << "Kestrel's results.csv should hold epoch 0 (the reference's) and 1, 2";
  for (const char* column : kLosses) {
    double noise = 0;
    for (int e : {1, 2}) noise = std::max(noise, std::abs(full.at(e).at(column) - resume.at(e).at(column)));
    // Printed to five significant digits: half a unit of the last one on each side.
    const double tolerance = 3 * noise + 1e-5 * std::abs(resume.at(1).at(column));
    for (int e : {1, 2}) {
      const double k = kestrel.at(e).at(column), r = resume.at(e).at(column);
      EXPECT_LE(std::abs(k - r), tolerance)
          << column << " epoch " << e << ": Kestrel " << k << ", the reference's resume " << r
          << ", its uninterrupted run " << full.at(e).at(column) << " (seed noise " << noise << ")";
    }
  }
  for (const char* column : kRates)
    for (int e : {1, 2})
      EXPECT_NEAR(kestrel.at(e).at(column), resume.at(e).at(column), 1e-6 * resume.at(e).at(column) + 1e-9)
          << column << " epoch " << e;
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_resume_parity_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A run folder as the reference left it after epoch 0 (weights/last.pt, opt.yaml, hyp.yaml,
// results.csv's header and first row), with opt.yaml's data and save_dir pointing here, as a
// user who moved the run would edit them. Kestrel resumes it; returns its results.csv.
Results kestrel_resume(const fs::path& dir, const fs::path& pt, const fs::path& opt_yaml, const std::string& data,
                       const std::vector<std::string>& epoch0_rows) {
  const fs::path run = dir / "run";
  fs::create_directories(run / "weights");
  fs::copy_file(pt, run / "weights" / "last.pt");
  {
    std::ofstream out(run / "opt.yaml");
    for (const std::string& line : read_lines(opt_yaml)) {
      if (line.rfind("data:", 0) == 0) out << "data: " << data << "\n";
      else if (line.rfind("save_dir:", 0) == 0) out << "save_dir: " << run.string() << "\n";
      else out << line << "\n";
    }
    std::ofstream csv(run / "results.csv");
    for (const std::string& row : epoch0_rows) csv << row << "\n";
  }
  const CliResult r = run_kestrel("train --resume " + (run / "weights" / "last.pt").string() + " --workers 2");
  EXPECT_EQ(r.code, 0) << r.out;
  return parse_results(read_lines(run / "results.csv"));
}

std::vector<std::string> first_rows(const fs::path& csv) {
  std::vector<std::string> lines = read_lines(csv);
  lines.resize(std::min<size_t>(lines.size(), 2));
  return lines;
}

TEST(ResumeParity, RecordedReference) {
  if (!fs::exists(kCoco128 / "coco128.yaml")) GTEST_SKIP() << "coco128 not found at " << kCoco128;
  const auto recorded = read_recorded("tests/scripts/resume_parity_reference.txt");
  ASSERT_EQ(recorded.at("full").size(), 3u);
  ASSERT_EQ(recorded.at("resume").size(), 3u);
  const fs::path dir = scratch("recorded");
  // The epoch-0 row the reference wrote before it stopped, as its results.csv holds it.
  std::vector<std::string> rows;
  bool in_full = false;
  for (const std::string& line : read_lines("tests/scripts/resume_parity_reference.txt")) {
    if (line.rfind("== ", 0) == 0) in_full = line == "== full";
    else if (in_full && rows.size() < 2) rows.push_back(line);
  }
  const Results kestrel = kestrel_resume(dir, "tests/data/micro_coco128_epoch0.pt", "tests/data/micro_coco128_opt.yaml",
                                         scratch_coco128(dir / "coco128"), rows);
  expect_within_seed_noise(kestrel, recorded.at("full"), recorded.at("resume"));
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(ResumeParity, LiveReference) {
  kestrel::testing::Reference ref;
  const std::string missing = kestrel::testing::find_reference(ref, {"torch", "yaml", "pandas", "tqdm", "cv2"}, "train.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  if (!fs::exists(kCoco128 / "coco128.yaml")) GTEST_SKIP() << "coco128 not found at " << kCoco128;

  const fs::path dir = scratch("live");
  const std::string data = scratch_coco128(dir / "coco128");
  const fs::path out = dir / "reference";
  fs::create_directories(out);
  const CliResult r = kestrel::testing::run_reference_python(
      ref, "tests/scripts/reference_fixture.py train_resume " + data + " " +
               fs::absolute("tests/data/micro.yaml").string() + " 160 16 3 0 " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const Results full = parse_results(read_lines(out / "full" / "results.csv"));
  const Results resume = parse_results(read_lines(out / "resume" / "results.csv"));
  ASSERT_EQ(full.size(), 3u) << r.out;
  ASSERT_EQ(resume.size(), 3u) << r.out;
  const Results kestrel = kestrel_resume(dir / "kestrel", out / "last_epoch0.pt", out / "full" / "opt.yaml", data,
                                         first_rows(out / "full" / "results.csv"));
  expect_within_seed_noise(kestrel, full, resume);
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
