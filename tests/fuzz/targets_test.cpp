// Every checked-in fuzz input (seeds, and the regression inputs of every finding) through its
// target without libFuzzer, so builds without clang check them too. A target lets through only
// crashes, unexpected exceptions and property violations, so each file must pass quietly.
#include "fuzz/targets.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

namespace fs = std::filesystem;
using kestrel::fuzz::Target;

namespace {

const fs::path kCorpusRoot = "fuzz/corpus";  // tests run from the source root

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FuzzCorpus : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzCorpus, EveryInputPassesItsTarget) {
  const Target& target = GetParam();
  const fs::path dir = kCorpusRoot / target.name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing: every target has a seed corpus";
  int inputs = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    ++inputs;
    const std::string bytes = read_all(entry.path());
    try {
      target.run(bytes);
    } catch (const std::exception& e) {
      ADD_FAILURE() << entry.path() << ": " << e.what();
    }
  }
  EXPECT_GE(inputs, 2) << dir << ": keep at least a valid seed and a hostile one";
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(kestrel::fuzz::all_targets().begin(),
                                                                  kestrel::fuzz::all_targets().end()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FuzzCorpusLayout, EveryCorpusFolderAndDictionaryNamesATarget) {
  std::set<std::string> names;
  for (const Target& t : kestrel::fuzz::all_targets()) names.insert(t.name);
  for (const auto& entry : fs::directory_iterator(kCorpusRoot))
    EXPECT_TRUE(names.count(entry.path().filename().string())) << entry.path() << " has no target";
  for (const auto& entry : fs::directory_iterator("fuzz/dict"))
    EXPECT_TRUE(names.count(entry.path().stem().string())) << entry.path() << " has no target";
}

}  // namespace
