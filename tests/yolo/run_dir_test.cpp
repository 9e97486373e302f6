#include "yolo/run_dir.h"

#include <filesystem>
#include <fstream>

#include "tests/support/testing.h"

using namespace kestrel::yolo;
namespace fs = std::filesystem;

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
