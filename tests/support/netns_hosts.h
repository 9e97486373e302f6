// Several "hosts" on one machine, for multi-host tests: each host is a network namespace with an
// address of its own (10.77.0.1, 10.77.0.2, ... /24), joined by a veth pair to a bridge that sits
// in a namespace of its own, so nothing touches the machine's real network. Each link can be
// shaped with tc in both directions (tbf: rate; netem: delay and loss, where the kernel has it:
// kernels built without CONFIG_NET_SCH_NETEM, as this project's CI machine, cannot add delay or
// loss), and cut (`ip link set down` on the bridge's end, as if the cable were pulled).
//
//   bridge namespace <prefix>-br:   br0 ── h0 ── h1 ── h2 (veth ends)
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
  double delay_ms = 0;      // netem delay (needs netem_unavailable() to be "")
  double loss_percent = 0;  // netem loss (likewise)
  double rate_mbit = 0;     // tbf rate
};

class NetnsHosts {
 public:
  // Why the harness cannot run here ("" when it can): not root, no `ip`/`tc`, or namespaces refused.
  static std::string unavailable();
  // Why links cannot be given delay or loss here ("" when they can): the kernel lacks netem.
  static std::string netem_unavailable();

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

  // (Re)shapes both directions of a host's link; delay or loss without netem throws, saying so.
  void shape(int host, const LinkShape& shape);
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

  int hosts_;
  std::string prefix_;  // kestrel-mh-<pid>-<a number from the clock>
};

// Runs a program (argv[0] looked up in PATH), returning its exit code and output together.
struct CommandResult {
  int code = -1;
  std::string output;
};
CommandResult run_command(const std::vector<std::string>& argv);

}  // namespace kestrel::testing
