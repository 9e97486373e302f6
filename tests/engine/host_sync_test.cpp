// HostSyncGuard: every call that would make the host wait for a CUDA device reports itself, on
// every build; the guard counts them or throws at the first; guards nest and are per thread;
// plain host memory access and device-ordered waits are no host reads.
#include "engine/host_sync.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/error.h"
#include "engine/stream.h"
#include "engine/tensor.h"

namespace kestrel {
namespace {

TEST(HostSyncGuard, CountsEveryBlockingReadOnTheCpuToo) {
  const Tensor t = Tensor::full({3}, 2.0);
  HostSyncGuard guard(HostSyncGuard::Policy::Count);
  EXPECT_EQ(t.to_vector<float>().size(), 3u);
  EXPECT_EQ(Tensor::scalar(4.0).item(), 4.0);
  (void)t.to_double_vector();
  Stream().synchronize();
  Event(Device::cpu()).synchronize();
  ASSERT_EQ(guard.count(), 5);
  EXPECT_EQ(guard.sites()[0], "Tensor::to_vector");
  EXPECT_EQ(guard.sites()[3], "Stream::synchronize");
  EXPECT_EQ(guard.sites()[4], "Event::synchronize");
}

TEST(HostSyncGuard, HostMemoryAndDeviceOrderedWaitsAreNotReads) {
  const Tensor t = Tensor::full({4}, 1.5);
  HostSyncGuard guard(HostSyncGuard::Policy::Throw);
  EXPECT_EQ(t.data<float>()[2], 1.5f);  // a CPU kernel's own memory
  Event e(Device::cpu());
  e.record(Stream());
  e.wait(Stream());  // orders a stream after another: the host does not wait
  EXPECT_TRUE(e.query());
  const Tensor u = t.clone();
  u.copy_(t);
  EXPECT_EQ(guard.count(), 0);
}

TEST(HostSyncGuard, ThrowPolicyNamesTheCall) {
  const Tensor t = Tensor::scalar(1.0);
  HostSyncGuard guard;
  try {
    (void)t.item();
    ADD_FAILURE() << "item() passed a Throw guard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("item"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HostSyncGuard"), std::string::npos) << e.what();
  }
  EXPECT_EQ(guard.count(), 1);
}

TEST(HostSyncGuard, InnermostGuardCountsAndNoGuardMeansNothing) {
  const Tensor t = Tensor::scalar(1.0);
  (void)t.item();  // no guard: nothing to record, nothing thrown
  HostSyncGuard outer(HostSyncGuard::Policy::Count);
  (void)t.item();
  {
    HostSyncGuard inner(HostSyncGuard::Policy::Count);
    (void)t.item();
    (void)t.item();
    EXPECT_EQ(inner.count(), 2);
  }
  (void)t.item();
  EXPECT_EQ(outer.count(), 2);
}

TEST(HostSyncGuard, EachThreadHasItsOwn) {
  HostSyncGuard guard(HostSyncGuard::Policy::Throw);
  int64_t other = -1;
  std::thread worker([&] {
    HostSyncGuard mine(HostSyncGuard::Policy::Count);
    (void)Tensor::scalar(3.0).item();
    other = mine.count();
  });
  worker.join();
  EXPECT_EQ(other, 1);
  EXPECT_EQ(guard.count(), 0);
}

}  // namespace
}  // namespace kestrel
