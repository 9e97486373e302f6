// Several "hosts" on one machine, for multi-host tests: each host is a network namespace with an
// address of its own (10.77.0.1, 10.77.0.2, ... /24), joined by a link to a bridge that sits in a
// namespace of its own, so nothing touches the machine's real network. Each link is shaped in both
// directions, and can be cut (`ip link set down` on the bridge's end, as if the cable were pulled).
// A link is one of two kinds:
// - a veth pair shaped with tc (tbf: rate; netem: delay and loss, where the kernel has netem);
// - a pair of TAP devices joined by the user-space link emulator (bench/linkem: rate, delay and
//   loss), run by a child process of the harness. A link takes this kind when it needs delay or
//   loss and the kernel has no netem (CONFIG_NET_SCH_NETEM; this project's CI machine), or when
//   its shape asks for it (LinkShape::emulate). shape() switches a link's kind as needed.
//
//   bridge namespace <prefix>-br:   br0 ── h0 ── h1 ── h2 (veth or TAP ends)
//   host namespace   <prefix>-hK:   eth0 (10.77.0.K+1/24), lo
//
// Needs root and iproute2 (`ip`, `tc`); unavailable() says why not, for GTEST_SKIP. Namespaces are
// named kestrel-mh-<pid>-..., so concurrent test processes never collide; the destructor kills
// whatever still runs inside them and deletes them (a failing test included), and the constructor
// first removes leftovers of test processes that no longer exist (one killed with SIGKILL).
// Processes run in a host through `ip netns exec`.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kestrel::testing {

// One direction's shaping; zeros leave that part out. Applied to both directions of a link.
struct LinkShape {
  double delay_ms = 0;      // one way: netem delay, or the link emulator's where there is no netem
  double loss_percent = 0;  // netem loss, likewise
  double rate_mbit = 0;     // tbf rate, or the link emulator's
  bool emulate = false;     // the user-space link emulator even where the kernel has netem
};

class NetnsHosts {
 public:
  // Why the harness cannot run here ("" when it can): not root, no `ip`/`tc`, or namespaces refused.
  static std::string unavailable();
  // Why tc cannot give links delay or loss here ("" when it can): the kernel lacks netem. Links
  // then get them from the user-space link emulator.
  static std::string netem_unavailable();
  // Why the user-space link emulator cannot run here ("" when it can): no /dev/net/tun.
  static std::string emulator_unavailable();
  // Why links cannot be given delay or loss at all ("" when netem or the emulator can).
  static std::string delay_unavailable();

  // Creates `hosts` (1..250) hosts, every link shaped as given. Throws std::runtime_error naming
  // the command and its output when a step fails (after removing what it made).
  explicit NetnsHosts(int hosts, const LinkShape& shape = {});
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  int size() const { return hosts_; }
  std::string address(int host) const;  // "10.77.0.<host + 1>"
  std::string unused_address() const;   // in the subnet, held by no host: nothing answers there
  std::string namespace_name(int host) const;
  std::string bridge_namespace() const { return prefix_ + "-br"; }

  // (Re)shapes both directions of a host's link, rebuilding it as the other kind when it must
  // change (its address and bridge port stay; connections through it are cut).
  void shape(int host, const LinkShape& shape);
  // Whether the host's link is the user-space emulator's (else a veth pair shaped with tc).
  bool emulated(int host) const { return emulators_.at(static_cast<size_t>(host)) != 0; }
  // Pulls the host's cable (its bridge port goes down) and plugs it back in.
  void cut(int host);
  void restore(int host);

  // Starts argv in the host's namespace (through `ip netns exec`), stdout and stderr to `log`,
  // with `env` added to this process's environment. The pid is the program's own after exec.
  pid_t spawn(int host, const std::vector<std::string>& argv, const std::filesystem::path& log,
              const std::vector<std::string>& env = {}) const;
  // Forks a child that enters the host's namespace and exits with body()'s value.
  pid_t fork_in(int host, const std::function<int()>& body) const;

  // The namespaces that harnesses of process `pid` made and that still exist: for a test that
  // checks nothing leaked.
  static std::vector<std::string> namespaces_of(pid_t pid);

 private:
  void create(const LinkShape& shape);
  void remove_all() noexcept;
  bool wants_emulator(const LinkShape& shape);
  void connect(int host, bool emulated);  // builds the link, addresses it, brings it up
  void disconnect(int host);              // stops its emulator and deletes its devices
  void start_emulator(int host, const LinkShape& shape);
  void stop_emulator(int host) noexcept;
  void tc_shape(int host, const LinkShape& shape);

  int hosts_;
  int netem_ = -1;               // -1: not probed yet; 0, 1
  std::vector<pid_t> emulators_;  // per host: its link emulator's pid (-1: stopped), 0 for a veth link
  std::string prefix_;  // kestrel-mh-<pid>-<a number from the clock>
};

// Runs a program (argv[0] looked up in PATH), returning its exit code and output together.
struct CommandResult {
  int code = -1;
  std::string output;
};
CommandResult run_command(const std::vector<std::string>& argv);

}  // namespace kestrel::testing
