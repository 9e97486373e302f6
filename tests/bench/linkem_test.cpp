// The user-space link emulator (bench/linkem) without root: its relay loop driven through
// socket pairs that stand in for the two TAP devices (a SEQPACKET socket keeps frame boundaries,
// as a TAP descriptor does), so its delay, serialisation at a rate, loss and backlog limit are
// checked here; the TAP devices themselves are exercised by tests/dist/multihost_test.cpp (root).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bench/linkem/link_emulator.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace linkem = kestrel::linkem;

constexpr size_t kVnet = 10;

// A frame as a TAP device with IFF_VNET_HDR hands it over: no GSO, `length` bytes after the header.
std::vector<unsigned char> plain_frame(size_t length) {
  std::vector<unsigned char> f(kVnet + length, 0);
  return f;
}

// The relay between two socket pairs, on a thread, stopped (and its counts collected) at the end.
class Relay {
 public:
  explicit Relay(const linkem::LinkParams& params) {
    for (int* pair : {a_, b_})
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) throw std::runtime_error("socketpair");
    if (::pipe2(stop_, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    for (int fd : {a_[1], b_[1]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    thread_ = std::thread([this, params] { linkem::relay(a_[1], b_[1], params, stop_[0], &a_to_b, &b_to_a); });
  }
  ~Relay() {
    stop();
    for (int fd : {a_[0], a_[1], b_[0], b_[1], stop_[0], stop_[1]}) ::close(fd);
  }
  void stop() {
    if (!thread_.joinable()) return;
    if (::write(stop_[1], "s", 1) != 1) std::abort();
    thread_.join();
  }
  void send_a(const std::vector<unsigned char>& frame) const {
    ASSERT_EQ(::send(a_[0], frame.data(), frame.size(), 0), static_cast<ssize_t>(frame.size()));
  }
  // The length of the next frame out of end b (its virtio-net header included) within `limit`, or -1.
  ssize_t receive_b(Clock::duration limit) const {
    pollfd p{b_[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(limit).count())) <= 0)
      return -1;
    std::vector<unsigned char> buf(1 << 17);
    return ::recv(b_[0], buf.data(), buf.size(), 0);
  }

  linkem::RelayStats a_to_b, b_to_a;

 private:
  int a_[2], b_[2], stop_[2];
  std::thread thread_;
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

TEST(Linkem, ParsesTcRates) {
  EXPECT_DOUBLE_EQ(linkem::parse_rate("1gbit"), 1e9);
  EXPECT_DOUBLE_EQ(linkem::parse_rate("200Mbit"), 200e6);
  EXPECT_DOUBLE_EQ(linkem::parse_rate("64kbit"), 64e3);
  for (const char* bad : {"", "fast", "-1gbit", "0mbit", "1gb", "mbit"})
    EXPECT_THROW(linkem::parse_rate(bad), std::runtime_error) << bad;
}

// A GSO super-packet of TCP over IPv4 is charged its segments' headers again, as tc charges it.
TEST(Linkem, ChargesAGsoPacketItsSegmentsHeaders) {
  EXPECT_EQ(linkem::wire_bytes(plain_frame(1514).data(), kVnet + 1514), 1514u);
  const size_t headers = 14 + 20 + 32, payload = 10 * 1448 - 100;  // 10 segments, the last short
  std::vector<unsigned char> f(kVnet + headers + payload, 0);
  f[1] = 1;                                   // gso_type: TCPv4
  const uint16_t gso_size = 1448;
  std::memcpy(&f[4], &gso_size, 2);
  unsigned char* eth = f.data() + kVnet;
  eth[12] = 0x08, eth[13] = 0x00;             // IPv4
  eth[14] = 0x45, eth[14 + 9] = 6;            // 20-byte header, TCP
  eth[14 + 20 + 12] = 8 << 4;                 // 32-byte TCP header
  EXPECT_EQ(linkem::wire_bytes(f.data(), f.size()), headers + payload + 9 * headers);
  f[1] = 0;  // the same bytes without GSO: one frame
  EXPECT_EQ(linkem::wire_bytes(f.data(), f.size()), headers + payload);
}

TEST(Linkem, DelaysEachFrameByTheOneWayDelay) {
  linkem::LinkParams p;
  p.delay_ms = 30;
  Relay relay(p);
  for (int i = 0; i < 3; ++i) {
    const auto sent = Clock::now();
    relay.send_a(plain_frame(100));
    EXPECT_EQ(relay.receive_b(2s), static_cast<ssize_t>(kVnet + 100)) << "frame " << i;
    const double ms = ms_since(sent);
    EXPECT_GE(ms, 30.0);
    EXPECT_LT(ms, 230.0);
  }
}

// 40 frames of 12500 bytes at 100 Mbit/s: 1 ms of serialisation each, one after the other.
TEST(Linkem, SerialisesFramesAtTheRate) {
  linkem::LinkParams p;
  p.rate_bits = 100e6;
  Relay relay(p);
  const auto start = Clock::now();
  for (int i = 0; i < 40; ++i) relay.send_a(plain_frame(12500));
  for (int i = 0; i < 40; ++i) ASSERT_EQ(relay.receive_b(2s), static_cast<ssize_t>(kVnet + 12500)) << "frame " << i;
  const double ms = ms_since(start);
  EXPECT_GE(ms, 40.0);
  EXPECT_LT(ms, 400.0);
  relay.stop();
  EXPECT_EQ(relay.a_to_b.frames, 40u);
  EXPECT_EQ(relay.a_to_b.wire_bytes, 40u * 12500);
}

TEST(Linkem, LosesTheGivenShareOfFrames) {
  linkem::LinkParams p;
  p.loss_percent = 30;
  p.seed = 7;
  Relay relay(p);
  int received = 0;
  for (int i = 0; i < 4000; ++i) {
    relay.send_a(plain_frame(60));
    if (i % 100 == 99)
      while (relay.receive_b(50ms) > 0) ++received;
  }
  while (relay.receive_b(100ms) > 0) ++received;
  relay.stop();
  EXPECT_EQ(relay.a_to_b.frames, 4000u);
  EXPECT_EQ(static_cast<uint64_t>(received) + relay.a_to_b.lost, 4000u);
  EXPECT_NEAR(static_cast<double>(relay.a_to_b.lost), 1200.0, 120.0);  // binomial sd 29
}

// At 1 Mbit/s a 1250-byte frame takes 10 ms: with a 25 ms backlog limit, a burst of 20 keeps
// the frames that start within 25 ms of arriving (3) and drops the rest, as tbf's latency does.
TEST(Linkem, DropsWhatExceedsTheBacklogLimit) {
  linkem::LinkParams p;
  p.rate_bits = 1e6;
  p.queue_ms = 25;
  Relay relay(p);
  for (int i = 0; i < 20; ++i) relay.send_a(plain_frame(1250));
  int received = 0;
  while (relay.receive_b(300ms) > 0) ++received;
  relay.stop();
  EXPECT_GE(received, 3);
  EXPECT_LE(received, 5);  // a slow reader may let a little time pass between arrivals
  EXPECT_EQ(relay.a_to_b.overflowed + static_cast<uint64_t>(received), 20u);
}

// A device that goes away (its namespace deleted) ends the relay instead of spinning.
TEST(Linkem, EndsWhenADeviceGoesAway) {
  int a[2], b[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, a), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, b), 0);
  for (int fd : {a[1], b[1]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::thread t([&] { linkem::relay(a[1], b[1], linkem::LinkParams{}); });
  ::close(a[0]);
  t.join();  // returns: the test would hang otherwise
  for (int fd : {a[1], b[0], b[1]}) ::close(fd);
}

}  // namespace
