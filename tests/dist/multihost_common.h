// What the multi-host tests (multihost_test.cpp, multihost_training_test.cpp) share: the skip
// where namespaces cannot be made, the store's port, the check that nothing of theirs is left,
// and read_file (tests/yolo/train/training_state.h).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "tests/support/netns_hosts.h"
#include "tests/yolo/train/training_state.h"  // read_file

#define SKIP_WITHOUT_NETNS()                                                                  \
  if (const std::string why = kestrel::testing::NetnsHosts::unavailable(); !why.empty()) \
  GTEST_SKIP() << why

namespace kestrel::testing {

inline constexpr const char* kMultihostPort = "29500";  // each host has ports of its own: no clash with other jobs

inline void expect_nothing_left() {
  EXPECT_TRUE(NetnsHosts::namespaces_of(::getpid()).empty()) << "a namespace of this test is left";
}

}  // namespace kestrel::testing
