#include "tests/support/netns_hosts.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "bench/linkem/link_emulator.h"

extern char** environ;

namespace kestrel::testing {
namespace {

constexpr const char* kPrefix = "kestrel-mh-";

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

void check(const std::vector<std::string>& argv) {
  const CommandResult r = run_command(argv);
  if (r.code != 0)
    throw std::runtime_error("netns harness: `" + joined(argv) + "` failed (exit " +
                             std::to_string(r.code) + "): " + r.output);
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// Every namespace whose name starts with `start`.
std::vector<std::string> namespaces_starting(const std::string& start) {
  std::vector<std::string> out;
  std::stringstream lines(run_command({"ip", "netns", "list"}).output);
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(0, line.find(' '));  // "NAME (id: 3)"
    if (name.rfind(start, 0) == 0) out.push_back(name);
  }
  return out;
}

std::vector<pid_t> pids_in(const std::string& ns) {
  std::vector<pid_t> out;
  std::stringstream words(run_command({"ip", "netns", "pids", ns}).output);
  for (pid_t pid; words >> pid;) out.push_back(pid);
  return out;
}

// Kills what runs inside the namespace, then deletes it (its veth ends go with it).
void delete_namespace(const std::string& ns) {
  for (int round = 0; round < 50; ++round) {
    const std::vector<pid_t> pids = pids_in(ns);
    if (pids.empty()) break;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    for (pid_t pid : pids) ::waitpid(pid, nullptr, WNOHANG);  // ours: reap; others: their parent's
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run_command({"ip", "netns", "del", ns});
}

// Namespaces left by harnesses of test processes that are gone.
void remove_leftovers() {
  for (const std::string& ns : namespaces_starting(kPrefix)) {
    const std::string rest = ns.substr(std::string(kPrefix).size());
    const pid_t owner = static_cast<pid_t>(std::atol(rest.substr(0, rest.find('-')).c_str()));
    if (owner > 0 && !alive(owner)) delete_namespace(ns);
  }
}

// The bridge's end of host `host`'s link.
std::string bridge_port(int host) {
  std::string name = "h";
  name += std::to_string(host);
  return name;
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {-1, "pipe() failed"};
  std::vector<std::string> args = argv;
  std::vector<char*> cargs = c_strings(args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    ::execvp(cargs[0], cargs.data());
    ::_exit(127);
  }
  ::close(out[1]);
  CommandResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return {-1, "fork/wait failed"};
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string NetnsHosts::unavailable() {
  if (::geteuid() != 0) return "the multi-host harness needs root (network namespaces); skipped";
  for (const char* tool : {"ip", "tc"})
    if (run_command({tool, "-V"}).code != 0)
      return std::string("`") + tool + "` (iproute2) is missing; install iproute2 to run multi-host tests";
  const std::string probe = kPrefix + std::to_string(::getpid()) + "-probe";
  const CommandResult r = run_command({"ip", "netns", "add", probe});
  run_command({"ip", "netns", "del", probe});
  if (r.code != 0) return "cannot create a network namespace here (" + r.output + "); skipped";
  return "";
}

std::string NetnsHosts::netem_unavailable() {
  const std::string probe = kPrefix + std::to_string(::getpid()) + "-netem";
  std::string why;
  if (run_command({"ip", "netns", "add", probe}).code != 0) return "cannot create a network namespace";
  run_command({"ip", "-n", probe, "link", "set", "lo", "up"});
  const CommandResult r = run_command({"tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"});
  if (r.code != 0)
    why = "the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM; tc says: " + r.output.substr(0, r.output.find('\n')) +
          "): links cannot be given delay or loss here";
  run_command({"ip", "netns", "del", probe});
  return why;
}

std::string NetnsHosts::emulator_unavailable() {
  const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return std::string("the link emulator needs /dev/net/tun (CONFIG_TUN; in a container, the device passed in): ") +
           std::strerror(errno);
  ::close(fd);
  return "";
}

std::string NetnsHosts::delay_unavailable() {
  const std::string netem = netem_unavailable();
  if (netem.empty()) return "";
  const std::string emulator = emulator_unavailable();
  return emulator.empty() ? "" : netem + "; " + emulator;
}

NetnsHosts::NetnsHosts(int hosts, const LinkShape& shape) : hosts_(hosts) {
  if (hosts < 1 || hosts > 250) throw std::runtime_error("netns harness: 1..250 hosts, got " + std::to_string(hosts));
  emulators_.assign(static_cast<size_t>(hosts), 0);
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count() % 1000000;
  prefix_ = kPrefix + std::to_string(::getpid()) + "-" + std::to_string(stamp);
  remove_leftovers();
  try {
    create(shape);
  } catch (...) {
    remove_all();
    throw;
  }
}

NetnsHosts::~NetnsHosts() { remove_all(); }

std::string NetnsHosts::address(int host) const { return "10.77.0." + std::to_string(host + 1); }
std::string NetnsHosts::unused_address() const { return "10.77.0.254"; }
std::string NetnsHosts::namespace_name(int host) const { return prefix_ + "-h" + std::to_string(host); }

void NetnsHosts::create(const LinkShape& shape) {
  const std::string br = bridge_namespace();
  check({"ip", "netns", "add", br});
  check({"ip", "-n", br, "link", "set", "lo", "up"});
  check({"ip", "-n", br, "link", "add", "br0", "type", "bridge"});
  check({"ip", "-n", br, "link", "set", "br0", "up"});
  const bool emulated = wants_emulator(shape);
  for (int h = 0; h < hosts_; ++h) {
    const std::string ns = namespace_name(h);
    check({"ip", "netns", "add", ns});
    check({"ip", "-n", ns, "link", "set", "lo", "up"});
    connect(h, emulated);
    this->shape(h, shape);
  }
}

bool NetnsHosts::wants_emulator(const LinkShape& s) {
  if (s.emulate) return true;
  if (s.delay_ms <= 0 && s.loss_percent <= 0) return false;
  if (netem_ < 0) netem_ = netem_unavailable().empty() ? 1 : 0;
  return netem_ == 0;
}

void NetnsHosts::connect(int host, bool emulated) {
  const std::string ns = namespace_name(host), br = bridge_namespace(), port = bridge_port(host);
  if (emulated) {
    // Persistent TAP devices, made here so that they can be configured before any emulator runs;
    // each emulator the link gets attaches to them.
    ::close(linkem::open_tap({ns, "eth0"}));
    ::close(linkem::open_tap({br, port}));
    emulators_[static_cast<size_t>(host)] = -1;
  } else {
    // Both ends are born in their namespaces: the machine's own namespace never sees them.
    check({"ip", "-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns});
  }
  check({"ip", "-n", br, "link", "set", port, "master", "br0"});
  check({"ip", "-n", br, "link", "set", port, "up"});
  // A fixed address per host, so that a link rebuilt as the other kind keeps it and the other
  // hosts' neighbour caches stay right (a new one would leave them sending to the old one for
  // seconds).
  char mac[18];
  std::snprintf(mac, sizeof mac, "02:00:0a:4d:00:%02x", host + 1);
  check({"ip", "-n", ns, "link", "set", "eth0", "address", mac});
  check({"ip", "-n", ns, "addr", "add", address(host) + "/24", "dev", "eth0"});
  check({"ip", "-n", ns, "link", "set", "eth0", "up"});
}

void NetnsHosts::disconnect(int host) {
  const bool emulated = this->emulated(host);
  stop_emulator(host);
  check({"ip", "-n", bridge_namespace(), "link", "del", bridge_port(host)});  // a veth pair goes whole
  if (emulated) check({"ip", "-n", namespace_name(host), "link", "del", "eth0"});
  emulators_[static_cast<size_t>(host)] = 0;
}

void NetnsHosts::shape(int host, const LinkShape& s) {
  const bool emulated = wants_emulator(s);
  if (emulated != this->emulated(host)) {
    disconnect(host);
    connect(host, emulated);
  }
  if (emulated) start_emulator(host, s);
  else tc_shape(host, s);
}

// The child enters the bridge's namespace (so that deleting it kills the emulator too), attaches
// to both TAP devices, says so through a pipe, and carries frames until killed or until the
// devices are deleted; it dies with the harness's process.
void NetnsHosts::start_emulator(int host, const LinkShape& s) {
  stop_emulator(host);
  linkem::LinkParams params;
  params.rate_bits = s.rate_mbit * 1e6;
  params.delay_ms = s.delay_ms;
  params.loss_percent = s.loss_percent;
  params.seed = static_cast<uint64_t>(host) + 1;
  const linkem::LinkEnd host_end{namespace_name(host), "eth0"}, bridge_end{bridge_namespace(), bridge_port(host)};
  const std::string bridge_path = "/run/netns/" + bridge_namespace();
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw std::runtime_error("netns harness: pipe() failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Only its pipe: an inherited write end of a test's pipe, held for the emulator's lifetime,
    // would keep that test's reader from ever seeing end-of-file.
    ::close_range(3, static_cast<unsigned>(ready[1]) - 1, 0);
    ::close_range(static_cast<unsigned>(ready[1]) + 1, ~0U, 0);
    try {
      const int fd = ::open(bridge_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) ::_exit(126);
      const int a = linkem::open_tap(host_end), b = linkem::open_tap(bridge_end);
      const char ok = 1;
      if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
      ::close(ready[1]);
      linkem::relay(a, b, params);
      ::_exit(0);
    } catch (const std::exception& e) {
      const std::string why = e.what();
      if (::write(ready[1], why.data(), why.size()) < 0) ::_exit(1);
      ::_exit(1);
    }
  }
  ::close(ready[1]);
  if (pid < 0) {
    ::close(ready[0]);
    throw std::runtime_error("netns harness: fork() failed");
  }
  emulators_[static_cast<size_t>(host)] = pid;
  std::string answer;
  pollfd p{ready[0], POLLIN, 0};
  char buf[512];
  while (::poll(&p, 1, 10000) > 0) {
    const ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
    if (answer == "\1") break;
  }
  ::close(ready[0]);
  if (answer != "\1")
    throw std::runtime_error("netns harness: the link emulator of host " + std::to_string(host) +
                             " did not start: " + (answer.empty() ? "no answer within 10 s" : answer));
}

void NetnsHosts::stop_emulator(int host) noexcept {
  pid_t& pid = emulators_[static_cast<size_t>(host)];
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

void NetnsHosts::tc_shape(int host, const LinkShape& s) {
  const std::string port = bridge_port(host);
  for (const auto& [ns, dev] : {std::pair{namespace_name(host), std::string("eth0")},
                                std::pair{bridge_namespace(), port}}) {
    run_command({"tc", "-n", ns, "qdisc", "del", "dev", dev, "root"});  // none yet is fine
    const bool netem = s.delay_ms > 0 || s.loss_percent > 0;
    if (netem) {
      std::vector<std::string> add = {"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem"};
      if (s.delay_ms > 0) add.insert(add.end(), {"delay", number(s.delay_ms) + "ms"});
      if (s.loss_percent > 0) add.insert(add.end(), {"loss", number(s.loss_percent) + "%"});
      check(add);
    }
    // tbf under netem, or alone at the root.
    if (s.rate_mbit > 0) {
      std::vector<std::string> add = {"tc", "-n", ns, "qdisc", "add", "dev", dev};
      if (netem) add.insert(add.end(), {"parent", "1:", "handle", "2:"});
      else add.insert(add.end(), {"root", "handle", "1:"});
      add.insert(add.end(), {"tbf", "rate", number(s.rate_mbit) + "mbit", "burst", "64kb", "latency", "100ms"});
      check(add);
    }
  }
}

void NetnsHosts::cut(int host) {
  check({"ip", "-n", bridge_namespace(), "link", "set", bridge_port(host), "down"});
}

void NetnsHosts::restore(int host) {
  check({"ip", "-n", bridge_namespace(), "link", "set", bridge_port(host), "up"});
}

pid_t NetnsHosts::spawn(int host, const std::vector<std::string>& argv, const std::filesystem::path& log,
                        const std::vector<std::string>& env) const {
  std::vector<std::string> args = {"ip", "netns", "exec", namespace_name(host)};
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<std::string> environment = env;
  for (char** e = environ; *e; ++e) environment.push_back(*e);  // the first occurrence wins
  std::vector<char*> cargs = c_strings(args), cenv = c_strings(environment);
  const std::string path = log.string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execvpe(cargs[0], cargs.data(), cenv.data());
    ::_exit(127);
  }
  if (pid < 0) throw std::runtime_error("netns harness: fork() failed");
  return pid;
}

pid_t NetnsHosts::fork_in(int host, const std::function<int()>& body) const {
  const std::string path = "/run/netns/" + namespace_name(host);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) ::_exit(126);
    ::_exit(body());
  }
  if (pid < 0) throw std::runtime_error("netns harness: fork() failed");
  return pid;
}

std::vector<std::string> NetnsHosts::namespaces_of(pid_t pid) {
  return namespaces_starting(kPrefix + std::to_string(pid) + "-");
}

void NetnsHosts::remove_all() noexcept {
  for (int h = 0; h < static_cast<int>(emulators_.size()); ++h) stop_emulator(h);
  try {
    // Hosts first: their processes die and their veth ends (with the bridge's peers) go.
    for (const std::string& ns : namespaces_starting(prefix_ + "-"))
      if (ns != bridge_namespace()) delete_namespace(ns);
    delete_namespace(bridge_namespace());
  } catch (...) {
    std::fprintf(stderr, "netns harness: could not remove every namespace of %s\n", prefix_.c_str());
  }
}

}  // namespace kestrel::testing
