// A network link emulated in user space, for kernels without netem (this project's CI machine):
// two TAP devices, each in a network namespace of its choice, joined by a process that carries
// every Ethernet frame from one to the other after the link's serialisation time at its rate, its
// one-way propagation delay, and a random loss. It stands in for a veth pair shaped with
// `tc ... netem delay D loss L` over `tbf rate R`:
//
//   namespace A: tap (end a) ── linkem ── tap (end b) :namespace B
//
// - Frames travel as the kernel hands them over, GSO super-packets included (IFF_VNET_HDR with
//   TSO offloads, as QEMU's tap backend): a 64 KB TCP burst is one read and one write, so 1 Gbit/s
//   costs a few thousand frames a second, not 80000. The rate is charged on the bytes the segments
//   would have on the wire (the headers repeated per segment), as tc charges a GSO packet; loss,
//   like netem's, drops a whole GSO packet.
// - Each direction is a FIFO: a frame starts serialising when the link is free, is delivered
//   delay after its last bit, and is dropped when the backlog exceeds queue_ms (tbf's `latency`).
// - The devices are persistent: they outlive the emulator, keep their addresses, bridge ports and
//   state, and a new emulator with other parameters attaches to them; while none runs the link
//   carries nothing. Deleting the namespace (or `ip link del`) removes them.
// - Delays are kept to within the scheduler's wake-up latency (timer slack set to 1 ns); on a busy
//   machine a frame may be late by the time the process waits for a core.
#pragma once
#include <cstdint>
#include <string>

namespace kestrel::linkem {

struct LinkParams {
  double rate_bits = 0;     // bit/s; 0: unlimited
  double delay_ms = 0;      // one way, each direction
  double loss_percent = 0;  // of frames (GSO packets), each direction
  double queue_ms = 100;    // backlog beyond which frames are dropped (at a rate only)
  uint64_t seed = 1;        // of the loss draws
};

// One end: a TAP device `device` in the network namespace /run/netns/<netns> ("" = this
// process's own namespace).
struct LinkEnd {
  std::string netns;
  std::string device;
};

// Opens the TAP device (creating it, persistent, when it does not exist yet) in the end's
// namespace, with GSO offloads, and brings it up; returns its descriptor. Throws
// std::runtime_error naming the end and the failing step (needs CAP_NET_ADMIN).
int open_tap(const LinkEnd& end);

// Carries frames between the two descriptors until stop_fd (when >= 0) becomes readable, or
// forever. Throws std::runtime_error on a read error other than the device going away.
void relay(int fd_a, int fd_b, const LinkParams& params, int stop_fd = -1);

// What relay() counted, for tests: frames read and dropped (loss, backlog), per direction a->b.
struct RelayStats {
  uint64_t frames = 0, lost = 0, overflowed = 0, wire_bytes = 0;
};
void relay(int fd_a, int fd_b, const LinkParams& params, int stop_fd, RelayStats* a_to_b, RelayStats* b_to_a);

// "1gbit", "200mbit", "64kbit", "1000bit" (tc's units) -> bit/s; throws naming the text.
double parse_rate(const std::string& text);

// The bytes a frame occupies on the wire: its length, plus, for a GSO super-packet of TCP over
// IPv4/IPv6, its Ethernet, IP and TCP headers once more for every segment after the first.
// `frame` starts with the virtio-net header the TAP device adds (10 bytes).
uint64_t wire_bytes(const unsigned char* frame, size_t length);

}  // namespace kestrel::linkem
