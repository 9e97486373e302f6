#include "bench/linkem/link_emulator.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <stdexcept>
#include <vector>

namespace kestrel::linkem {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string describe(const LinkEnd& end) {
  return "'" + end.device + "' in " + (end.netns.empty() ? std::string("this namespace") : "namespace " + end.netns);
}

// Enters a network namespace for its lifetime (this thread only) and returns to the one it left.
class InNamespace {
 public:
  explicit InNamespace(const std::string& netns) {
    if (netns.empty()) return;
    home_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const std::string path = "/run/netns/" + netns;
    const int target = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const bool ok = home_ >= 0 && target >= 0 && ::setns(target, CLONE_NEWNET) == 0;
    const std::string why = errno_text();
    if (target >= 0) ::close(target);
    if (!ok) {
      if (home_ >= 0) ::close(home_);
      throw std::runtime_error("linkem: cannot enter network namespace " + netns + " (" + path + "): " + why +
                               "; does it exist (ip netns list), and are we root?");
    }
  }
  ~InNamespace() {
    if (home_ < 0) return;
    ::setns(home_, CLONE_NEWNET);
    ::close(home_);
  }
  InNamespace(const InNamespace&) = delete;
  InNamespace& operator=(const InNamespace&) = delete;

 private:
  int home_ = -1;
};

using Clock = std::chrono::steady_clock;
int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// The virtio-net header a TAP device with IFF_VNET_HDR puts before each frame (linux/virtio_net.h,
// not included: it does not compile as C++ here; the layout is fixed by the virtio spec, native
// little-endian on the hosts we run on).
struct VnetHeader {
  uint8_t flags;
  uint8_t gso_type;  // 0: not a GSO packet
  uint16_t hdr_len;
  uint16_t gso_size;  // payload bytes per segment
  uint16_t csum_start;
  uint16_t csum_offset;
};
static_assert(sizeof(VnetHeader) == 10);
constexpr size_t kVnetHeader = sizeof(VnetHeader);
constexpr size_t kMaxFrame = 256 * 1024;  // a GSO super-packet is at most 64 KB plus headers

struct Frame {
  int64_t due_ns;
  std::vector<unsigned char> bytes;
};

// One direction of the link: frames read from `in`, written to `out` when due.
struct Direction {
  int in, out;
  std::deque<Frame> queue;
  int64_t free_ns = 0;  // when the link finishes serialising what it has accepted
  RelayStats* stats;
};

// splitmix64: the loss draws, reproducible from the seed.
double uniform(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0;  // 2^53
}

void accept_frame(Direction& d, const unsigned char* frame, size_t length, const LinkParams& p, uint64_t& rng,
                  int64_t now) {
  d.stats->frames++;
  const uint64_t wire = wire_bytes(frame, length);
  d.stats->wire_bytes += wire;
  if (p.loss_percent > 0 && uniform(rng) * 100.0 < p.loss_percent) {
    d.stats->lost++;
    return;
  }
  int64_t last_bit = now;
  if (p.rate_bits > 0) {
    const int64_t start = std::max(now, d.free_ns);
    if (static_cast<double>(start - now) > p.queue_ms * 1e6) {
      d.stats->overflowed++;
      return;
    }
    d.free_ns = start + static_cast<int64_t>(std::llround(static_cast<double>(wire) * 8.0 / p.rate_bits * 1e9));
    last_bit = d.free_ns;
  }
  const int64_t due = last_bit + static_cast<int64_t>(std::llround(p.delay_ms * 1e6));
  d.queue.push_back({due, std::vector<unsigned char>(frame, frame + length)});
}

// Writes the frames that are due. A device that is down (a pulled cable) or gone drops them; a
// descriptor that is momentarily full (a TAP device never is; the tests' socket pairs can be) is
// waited for, up to a second.
void deliver(Direction& d, int64_t now) {
  while (!d.queue.empty() && d.queue.front().due_ns <= now) {
    const std::vector<unsigned char>& bytes = d.queue.front().bytes;
    for (int tries = 0; ::write(d.out, bytes.data(), bytes.size()) < 0 && tries < 100; ++tries) {
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) break;
      pollfd p{d.out, POLLOUT, 0};
      if (errno != EINTR) ::poll(&p, 1, 10);
    }
    d.queue.pop_front();
  }
}

// Reads what the device has; false when it is gone (its namespace deleted).
bool drain(Direction& d, std::vector<unsigned char>& buffer, const LinkParams& p, uint64_t& rng) {
  for (;;) {
    const ssize_t n = ::read(d.in, buffer.data(), buffer.size());
    if (n > 0) {
      accept_frame(d, buffer.data(), static_cast<size_t>(n), p, rng, now_ns());
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && (errno == EBADFD || errno == EIO || errno == ENODEV)) return false;
    if (n == 0) return false;
    throw std::runtime_error("linkem: reading a frame failed: " + errno_text());
  }
}

}  // namespace

double parse_rate(const std::string& text) {
  std::string s;
  for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  double scale = 0;
  if (unit == "bit") scale = 1;
  else if (unit == "kbit") scale = 1e3;
  else if (unit == "mbit") scale = 1e6;
  else if (unit == "gbit") scale = 1e9;
  if (used == 0 || scale == 0 || !(value > 0))
    throw std::runtime_error("'" + text + "' is no tc rate; write a positive number and bit, kbit, mbit or gbit (e.g. 200mbit)");
  return value * scale;
}

uint64_t wire_bytes(const unsigned char* frame, size_t length) {
  if (length < kVnetHeader) return 0;
  VnetHeader h;
  std::memcpy(&h, frame, sizeof h);
  const unsigned char* eth = frame + kVnetHeader;
  const size_t frame_length = length - kVnetHeader;
  if (h.gso_type == 0 || h.gso_size == 0 || frame_length < 14) return frame_length;
  size_t headers = 14, l4 = 0;
  const unsigned ethertype = (eth[12] << 8) | eth[13];
  int protocol = -1;
  if (ethertype == 0x0800 && frame_length >= 14 + 20) {
    const size_t ip = (eth[14] & 0x0f) * 4u;
    protocol = eth[14 + 9];
    headers += ip;
  } else if (ethertype == 0x86dd && frame_length >= 14 + 40) {
    protocol = eth[14 + 6];
    headers += 40;
  } else {
    return frame_length;
  }
  if (protocol == 6 && frame_length >= headers + 20) l4 = (eth[headers + 12] >> 4) * 4u;
  else if (protocol == 17) l4 = 8;
  else return frame_length;
  headers += l4;
  if (frame_length <= headers) return frame_length;
  const size_t segments = (frame_length - headers + h.gso_size - 1) / h.gso_size;
  return frame_length + (segments - 1) * headers;
}

int open_tap(const LinkEnd& end) {
  if (end.device.empty() || end.device.size() >= IFNAMSIZ)
    throw std::runtime_error("linkem: '" + end.device + "' is no device name (1 to 15 characters)");
  InNamespace in(end.netns);
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("linkem: cannot open /dev/net/tun for " + describe(end) + ": " + errno_text() +
                             "; the kernel needs CONFIG_TUN, and we need CAP_NET_ADMIN");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::strncpy(ifr.ifr_name, end.device.c_str(), IFNAMSIZ - 1);
  const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
  const char* step = nullptr;
  if (::ioctl(fd, TUNSETIFF, &ifr) != 0) step = "TUNSETIFF (create or attach; an existing device of another kind, or one another emulator holds, refuses)";
  else if (::ioctl(fd, TUNSETPERSIST, 1) != 0) step = "TUNSETPERSIST";
  else if (::ioctl(fd, TUNSETOFFLOAD, offloads) != 0) step = "TUNSETOFFLOAD";
  if (step) {
    const std::string why = errno_text();
    ::close(fd);
    throw std::runtime_error("linkem: TAP device " + describe(end) + ": " + step + " failed: " + why);
  }
  return fd;
}

void relay(int fd_a, int fd_b, const LinkParams& params, int stop_fd) {
  RelayStats a, b;
  relay(fd_a, fd_b, params, stop_fd, &a, &b);
}

void relay(int fd_a, int fd_b, const LinkParams& p, int stop_fd, RelayStats* a_to_b, RelayStats* b_to_a) {
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // wake at the due time, not up to 50 us after it
  Direction dirs[2] = {{fd_a, fd_b, {}, 0, a_to_b}, {fd_b, fd_a, {}, 0, b_to_a}};
  std::vector<unsigned char> buffer(kMaxFrame);
  uint64_t rng = p.seed;
  for (;;) {
    const int64_t now = now_ns();
    int64_t next = std::numeric_limits<int64_t>::max();
    for (Direction& d : dirs) {
      deliver(d, now);
      if (!d.queue.empty()) next = std::min(next, d.queue.front().due_ns);
    }
    timespec wait{};
    if (next != std::numeric_limits<int64_t>::max()) {
      const int64_t ns = std::max<int64_t>(0, next - now);
      wait = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    }
    pollfd fds[3] = {{fd_a, POLLIN, 0}, {fd_b, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int n = ::ppoll(fds, stop_fd >= 0 ? 3 : 2, next == std::numeric_limits<int64_t>::max() ? nullptr : &wait, nullptr);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error("linkem: ppoll failed: " + errno_text());
    if (stop_fd >= 0 && fds[2].revents) return;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) return;  // the device is gone
      if ((fds[i].revents & POLLIN) && !drain(dirs[i], buffer, p, rng)) return;
    }
  }
}

}  // namespace kestrel::linkem
