// numpy_argsort against orderings recorded from numpy 1.24's np.argsort
// (tests/yolo/data/numpy_argsort_orders.txt, written by scripts/record_numpy_argsort.py): arrays
// full of ties at the sizes around the insertion-sort cut (5, 16, 17) and beyond (100, 128, 1000),
// all-equal keys, COCO-like 0.75 runs, NaN and infinities, and adversarial keys that exhaust the
// depth budget so the heapsort fallback orders ties.
#include "yolo/data/numpy_argsort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

using namespace kestrel::yolo::data;

namespace {

struct Recorded {
  std::string name;
  std::vector<double> keys;
  std::vector<int64_t> order;
};

std::vector<Recorded> read_recorded(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path << " (tests run from the source root)";
  std::vector<Recorded> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string tag;
    fields >> tag;
    if (tag == "case") {
      out.emplace_back();
      fields >> out.back().name;
    } else if (tag == "keys") {
      // strtod reads Python's repr, "nan" and "inf" included, to the same double.
      for (std::string word; fields >> word;) out.back().keys.push_back(std::strtod(word.c_str(), nullptr));
    } else if (tag == "order") {
      for (int64_t i; fields >> i;) out.back().order.push_back(i);
    }
  }
  return out;
}

std::vector<int64_t> stable_order(const std::vector<double>& keys) {
  std::vector<int64_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  return order;
}

}  // namespace

TEST(NumpyArgsort, MatchesRecordedNumpyOrderings) {
  const std::vector<Recorded> cases = read_recorded("tests/yolo/data/numpy_argsort_orders.txt");
  ASSERT_GE(cases.size(), 13u);
  for (const Recorded& c : cases) {
    ASSERT_EQ(c.keys.size(), c.order.size()) << c.name;
    EXPECT_EQ(numpy_argsort(c.keys), c.order) << c.name;
  }
}

TEST(NumpyArgsort, TiesDifferFromAStableSortBeyondTheInsertionSortCut) {
  // Up to 16 elements numpy only insertion-sorts, which keeps ties in order; from 17 on the
  // partitioning moves them. (Guards the recorded data: a stable sort must fail the test above.)
  for (const Recorded& c : read_recorded("tests/yolo/data/numpy_argsort_orders.txt")) {
    if (c.name == "ties_5" || c.name == "ties_16" || c.name == "distinct_300") {
      EXPECT_EQ(stable_order(c.keys), c.order) << c.name;
    } else if (c.name != "nan_inf_20") {  // NaN breaks the strict weak order std::stable_sort needs
      EXPECT_NE(stable_order(c.keys), c.order) << c.name;
    }
  }
}

TEST(NumpyArgsort, EdgeSizes) {
  EXPECT_TRUE(numpy_argsort({}).empty());
  EXPECT_EQ(numpy_argsort({3.0}), (std::vector<int64_t>{0}));
  EXPECT_EQ(numpy_argsort({2.0, 1.0}), (std::vector<int64_t>{1, 0}));
  // NaN after +inf; -0.0 and 0.0 tie.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(numpy_argsort({nan, inf, -0.0, 0.0, -inf}), (std::vector<int64_t>{4, 2, 3, 1, 0}));
}
