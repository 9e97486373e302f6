// The run directory: exp, exp2, ... named as the reference names them, and claimed atomically:
// runs that start together each get a directory of their own (mkdir decides), a name taken with
// --exist-ok by a live run is refused naming its pid; results.csv in the
// reference's format, and keep_through (a resumed run redoing epochs) drops exactly the later rows,
// keeps the header and earlier rows byte-identical, leaves the file alone (not rewritten) when there
// is nothing to drop, and appending afterwards gives the file an uninterrupted run writes;
// opt.yaml pairs are written atomically (no temporary left).
#include "yolo/common/run_dir.h"

#include <stdlib.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/support/testing.h"

using namespace kestrel::yolo;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A fresh directory per test: other checkouts may run these tests at the same time.
class RunDirFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kestrel_rundir_files_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Row values distinct per epoch, so that a dropped or reordered row shows.
  static std::vector<double> row(int epoch) {
    std::vector<double> v(ResultsCsv::columns().size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01 * static_cast<double>(i + 1) + epoch;
    return v;
  }

  fs::path dir_;
};

}  // namespace

TEST(RunDir, IncrementsLikeTheReference) {
  const fs::path base = fs::temp_directory_path() / "kestrel_rundir_test";
  fs::remove_all(base);
  fs::create_directories(base);
  const std::string exp = (base / "exp").string();
  EXPECT_EQ(increment_path(exp), exp);
  fs::create_directories(exp);
  EXPECT_EQ(increment_path(exp), exp + "2");
  EXPECT_EQ(increment_path(exp, /*exist_ok=*/true), exp);
  fs::create_directories(exp + "2");
  EXPECT_EQ(increment_path(exp), exp + "3");
  fs::remove_all(base);
}

TEST_F(RunDirFiles, ClaimNumbersAsTheReferenceAndCreatesWhatItNames) {
  const std::string exp = (dir_ / "project" / "exp").string();  // the project is made too
  {
    ClaimedRunDir first = claim_run_dir(exp, false);
    EXPECT_EQ(first.path, exp);
    EXPECT_TRUE(first.created);
    EXPECT_TRUE(fs::is_directory(exp));
  }
  // Released, exp is still taken by name: the next run gets exp2, then exp3 past a gap-free list.
  EXPECT_EQ(claim_run_dir(exp, false).path, exp + "2");
  EXPECT_EQ(claim_run_dir(exp, false).path, exp + "3");
  // A gap is filled first, as the reference's increment_path does.
  fs::remove_all(exp + "2");
  EXPECT_EQ(claim_run_dir(exp, false).path, exp + "2");
  // A plain file of that name is skipped like a directory.
  std::ofstream(exp + "4") << "not a run";
  EXPECT_EQ(claim_run_dir(exp, false).path, exp + "5");

  // exist_ok: the name itself, made or found.
  ClaimedRunDir reused = claim_run_dir(exp, true);
  EXPECT_EQ(reused.path, exp);
  EXPECT_FALSE(reused.created);
  ClaimedRunDir fresh = claim_run_dir((dir_ / "project" / "other").string(), true);
  EXPECT_TRUE(fresh.created);
  EXPECT_THROW(claim_run_dir(exp + "4", true), kestrel::Error) << "a file is no run directory";
}

TEST_F(RunDirFiles, ExistOkIntoALockedDirectoryIsRefusedWithTheHoldersPid) {
  const std::string exp = (dir_ / "exp").string();
  ClaimedRunDir holder = claim_run_dir(exp, true);
  try {
    claim_run_dir(exp, true);
    ADD_FAILURE() << "a second run was let into a locked run directory";
  } catch (const kestrel::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("pid " + std::to_string(::getpid())), std::string::npos) << message;
    EXPECT_NE(message.find("choose another --name, or drop --exist-ok"), std::string::npos) << message;
  }
  // Without --exist-ok a new run does not wait for it: it takes the next name.
  EXPECT_EQ(claim_run_dir(exp, false).path, exp + "2");
}

// Runs that start at the same moment: each thread claims at once after a common start line. With
// check-then-create numbering two of them could name the same directory; mkdir lets one win.
TEST_F(RunDirFiles, ClaimsStartedTogetherGetDistinctDirectories) {
  constexpr int kRuns = 8, kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    const std::string exp = (dir_ / ("round" + std::to_string(round)) / "exp").string();
    std::atomic<int> waiting{kRuns};
    std::vector<std::optional<ClaimedRunDir>> claims(kRuns);
    std::vector<std::thread> runs;
    for (int t = 0; t < kRuns; ++t)
      runs.emplace_back([&, t] {
        --waiting;
        while (waiting.load() > 0) std::this_thread::yield();
        claims[t] = claim_run_dir(exp, false);
      });
    for (auto& r : runs) r.join();
    std::set<std::string> paths;
    for (const auto& c : claims) {
      ASSERT_TRUE(c.has_value());
      EXPECT_TRUE(c->created);
      paths.insert(c->path);
    }
    std::set<std::string> expected = {exp};
    for (int n = 2; n <= kRuns; ++n) expected.insert(exp + std::to_string(n));
    EXPECT_EQ(paths, expected) << "round " << round;
  }
}

TEST(RunDir, ResultsCsvFormat) {
  const fs::path path = fs::temp_directory_path() / "kestrel_results_test.csv";
  fs::remove(path);
  ResultsCsv csv(path.string());
  std::vector<double> v(13, 0.0);
  v[0] = 0.123456789;
  csv.append(0, v);
  csv.append(1, v);
  std::ifstream in(path);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(header.substr(0, 41), "               epoch,      train/box_loss");
  EXPECT_EQ(row.substr(0, 42), "                   0,             0.12346,");
  EXPECT_THROW(csv.append(2, {1.0}), kestrel::Error);
  fs::remove(path);
}

TEST_F(RunDirFiles, KeepThroughDropsLaterRowsAndKeepsTheRestByteIdentical) {
  const fs::path path = dir_ / "results.csv";
  ResultsCsv csv(path.string());
  for (int e = 0; e <= 2; ++e) csv.append(e, row(e));
  const std::string through2 = read_bytes(path);
  for (int e = 3; e <= 4; ++e) csv.append(e, row(e));
  const std::string through4 = read_bytes(path);
  ASSERT_EQ(through4.rfind(through2, 0), 0u) << "append must only add rows";

  EXPECT_EQ(csv.keep_through(2), 2);
  EXPECT_EQ(read_bytes(path), through2);
  EXPECT_TRUE(kestrel::testing::temporaries_of(path.string()).empty());

  // Appending after the cut continues as an uninterrupted run would write.
  csv.append(3, row(3));
  csv.append(4, row(4));
  EXPECT_EQ(read_bytes(path), through4);

  // keep_through(-1): every row goes, the header stays, and the next append adds no second header.
  EXPECT_EQ(csv.keep_through(-1), 5);
  const std::string header = read_bytes(path);
  EXPECT_EQ(header, through2.substr(0, through2.find('\n') + 1));
  csv.append(0, row(0));
  EXPECT_EQ(read_bytes(path), through4.substr(0, through4.find('\n', header.size()) + 1));
}

TEST_F(RunDirFiles, KeepThroughWithNothingToDropDoesNotRewrite) {
  const fs::path path = dir_ / "results.csv";
  ResultsCsv csv(path.string());
  EXPECT_EQ(csv.keep_through(3), 0) << "no file yet";
  EXPECT_FALSE(fs::exists(path)) << "keep_through must not create the file";

  for (int e = 0; e <= 2; ++e) csv.append(e, row(e));
  const std::string before = read_bytes(path);
  // A second name for the file's inode: an atomic rewrite would give `path` another inode (and
  // the witness keeps the old one allocated, so a rewrite cannot land on the same number).
  const fs::path witness = dir_ / "witness";
  fs::create_hard_link(path, witness);
  EXPECT_EQ(csv.keep_through(2), 0);
  EXPECT_TRUE(fs::equivalent(path, witness)) << "keep_through(2) rewrote a file with nothing to drop";
  EXPECT_EQ(csv.keep_through(100), 0);
  EXPECT_TRUE(fs::equivalent(path, witness)) << "keep_through(100) rewrote a file with nothing to drop";
  EXPECT_EQ(read_bytes(path), before);
  // The witness itself shows a rewrite when there is one.
  EXPECT_EQ(csv.keep_through(1), 1);
  EXPECT_FALSE(fs::equivalent(path, witness));
}

TEST_F(RunDirFiles, WriteYamlPairsIsAtomic) {
  const fs::path path = dir_ / "opt.yaml";
  write_yaml_pairs(path.string(), {{"weights", "a much longer value than the next one"}, {"epochs", "300"}});
  write_yaml_pairs(path.string(), {{"epochs", "3"}, {"imgsz", "640"}, {"freeze", "[0, 1]"}});
  EXPECT_EQ(read_bytes(path), "epochs: 3\nimgsz: 640\nfreeze: [0, 1]\n");
  EXPECT_TRUE(kestrel::testing::temporaries_of(path.string()).empty());
  write_yaml_pairs(path.string(), {});
  EXPECT_EQ(read_bytes(path), "");
  EXPECT_THROW(write_yaml_pairs((dir_ / "missing" / "opt.yaml").string(), {{"a", "b"}}), kestrel::Error);
}
