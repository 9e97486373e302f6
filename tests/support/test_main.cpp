// main() for every test binary: exits 77 (ctest's "skipped") when every case skipped, so a GPU
// test binary on a machine without a GPU shows as skipped rather than passed.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const auto* unit = ::testing::UnitTest::GetInstance();
  if (rc == 0 && unit->test_to_run_count() > 0 &&
      unit->skipped_test_count() == unit->test_to_run_count())
    return 77;
  return rc;
}
