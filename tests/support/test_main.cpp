// main() for every test binary: exits 77 (ctest's "skipped") when every case skipped, so a GPU
// test binary on a machine without a GPU shows as skipped rather than passed. No test reaches
// beyond 127.0.0.1: every download goes to the mirror set here, a loopback port where nothing
// listens, unless a test points it at its own loopback server (tests/support/http_server); the
// kestrel processes the tests start inherit it.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  ::setenv("KESTREL_DOWNLOAD_MIRROR", "http://127.0.0.1:1", 1);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const auto* unit = ::testing::UnitTest::GetInstance();
  if (rc == 0 && unit->test_to_run_count() > 0 &&
      unit->skipped_test_count() == unit->test_to_run_count())
    return 77;
  return rc;
}
