// linkem: a shaped link between two network namespaces, in user space (link_emulator.h), for
// kernels without netem. Root only.
//
//   linkem --a NS_A:DEV_A --b NS_B:DEV_B [--rate 1gbit] [--delay-ms 0.2] [--loss-percent 0]
//          [--queue-ms 100] [--seed 1] [--ready FILE]
//
// Creates (or attaches to) the persistent TAP devices, writes FILE once both are open, then
// carries frames until killed or until a device is deleted. Give the devices their addresses and
// bring them up with `ip -n NS addr add ... dev DEV; ip -n NS link set DEV up` (they keep both
// when a later linkem with other parameters takes over). bench/dist/overlap_bandwidth.sh uses it
// for settings with a delay.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "bench/linkem/link_emulator.h"

namespace {

using kestrel::linkem::LinkEnd;

constexpr const char* kUsage =
    "usage: linkem --a NS_A:DEV_A --b NS_B:DEV_B [--rate R] [--delay-ms D] [--loss-percent L]\n"
    "              [--queue-ms Q] [--seed S] [--ready FILE]\n"
    "  NS: a namespace of `ip netns list` (empty: this one); DEV: a TAP device name;\n"
    "  R: tc units (1gbit, 200mbit; default unlimited); D: one way, ms; L: percent of frames;\n"
    "  Q: backlog in ms beyond which frames drop (default 100)\n";

LinkEnd parse_end(const std::string& flag, const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size())
    throw std::runtime_error(flag + " '" + text + "': write NAMESPACE:DEVICE (e.g. " + flag.substr(2) + "ns:tap0)");
  return {text.substr(0, colon), text.substr(colon + 1)};
}

double parse_number(const std::string& flag, const std::string& text, double low) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= low))
    throw std::runtime_error(flag + " '" + text + "': expected a number >= " + std::to_string(low));
  return v;
}

int run(int argc, char** argv) {
  LinkEnd a, b;
  kestrel::linkem::LinkParams params;
  std::string ready;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value\n" + kUsage);
    const std::string value = argv[++i];
    if (flag == "--a") a = parse_end(flag, value);
    else if (flag == "--b") b = parse_end(flag, value);
    else if (flag == "--rate") params.rate_bits = kestrel::linkem::parse_rate(value);
    else if (flag == "--delay-ms") params.delay_ms = parse_number(flag, value, 0);
    else if (flag == "--loss-percent") params.loss_percent = parse_number(flag, value, 0);
    else if (flag == "--queue-ms") params.queue_ms = parse_number(flag, value, 0);
    else if (flag == "--seed") params.seed = static_cast<uint64_t>(parse_number(flag, value, 0));
    else if (flag == "--ready") ready = value;
    else throw std::runtime_error("unknown flag " + flag + "\n" + kUsage);
  }
  if (a.device.empty() || b.device.empty()) throw std::runtime_error(std::string("--a and --b are required\n") + kUsage);
  if (params.loss_percent > 100) throw std::runtime_error("--loss-percent is at most 100");
  const int fd_a = kestrel::linkem::open_tap(a);
  const int fd_b = kestrel::linkem::open_tap(b);
  if (!ready.empty()) {
    const std::string partial = ready + ".partial";
    const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::close(fd) != 0 || std::rename(partial.c_str(), ready.c_str()) != 0)
      throw std::runtime_error("cannot write the --ready file " + ready);
  }
  std::printf("linkem: %s:%s <-> %s:%s, rate %s, delay %g ms, loss %g %%, queue %g ms\n", a.netns.c_str(),
              a.device.c_str(), b.netns.c_str(), b.device.c_str(),
              params.rate_bits > 0 ? (std::to_string(params.rate_bits / 1e6) + " Mbit/s").c_str() : "unlimited",
              params.delay_ms, params.loss_percent, params.queue_ms);
  std::fflush(stdout);
  kestrel::linkem::relay(fd_a, fd_b, params);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linkem: %s\n", e.what());
    return 2;
  }
}
