#include "dist/env.h"

#include <charconv>
#include <cstdlib>

#include "base/error.h"

namespace kestrel::dist {
namespace {

// A resolved value and where it came from, so errors can name the flag or variable.
struct Sourced {
  int value;
  std::string source;
};

int parse_int(const std::string& text, const std::string& source) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  KESTREL_CHECK(ec == std::errc() && p == text.data() + text.size() && !text.empty(), source,
                " must be an integer, got '", text, "'");
  return v;
}

// The flag if given, else the first variable in `names` that is set, else nothing.
std::optional<Sourced> pick(const std::optional<int>& flag, const std::string& flag_name,
                            const std::vector<std::string>& names, const EnvLookup& env) {
  if (flag) return Sourced{*flag, flag_name + " " + std::to_string(*flag)};
  for (const std::string& name : names)
    if (auto v = env(name)) return Sourced{parse_int(*v, name), name + "=" + *v};
  return std::nullopt;
}

// Splits on commas that are not inside brackets.
std::vector<std::string> split_top_level(const std::string& s) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

void expand_name(const std::string& name, const std::string& whole, std::vector<std::string>& out) {
  const size_t open = name.find('[');
  if (open == std::string::npos) {
    KESTREL_CHECK(name.find(']') == std::string::npos, "host list '", whole,
                  "': unmatched ']' in '", name, "'");
    out.push_back(name);
    return;
  }
  const size_t close = name.find(']', open);
  KESTREL_CHECK(close != std::string::npos, "host list '", whole, "': unmatched '[' in '", name,
                "'");
  const std::string prefix = name.substr(0, open);
  std::vector<std::string> tails;
  expand_name(name.substr(close + 1), whole, tails);
  for (const std::string& range : split_top_level(name.substr(open + 1, close - open - 1))) {
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    const std::string what = "host list '" + whole + "': range '" + range + "'";
    const int a = parse_int(lo, what), b = parse_int(hi, what);
    KESTREL_CHECK(a >= 0 && a <= b, what, " must be ascending non-negative numbers");
    for (int i = a; i <= b; ++i) {
      std::string digits = std::to_string(i);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      for (const std::string& tail : tails) out.push_back(prefix + digits + tail);
    }
  }
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::string detect_launcher(const EnvLookup& env) {
  if (env("RANK") || env("WORLD_SIZE")) return "torchrun";
  if (env("OMPI_COMM_WORLD_RANK")) return "Open MPI";
  if (env("SLURM_PROCID")) return "SLURM";
  return "";
}

int local_world_size(const EnvLookup& env) {
  const std::optional<Sourced> n =
      pick(std::nullopt, "", {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}, env);
  if (!n) return 1;
  KESTREL_CHECK(n->value >= 1, n->source, ": the local world size must be at least 1");
  return n->value;
}

std::vector<std::string> expand_host_list(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_top_level(list))
    if (!item.empty()) expand_name(item, list, hosts);
  return hosts;
}

DistOptions resolve_dist_options(const DistFlags& flags, const EnvLookup& env) {
  const std::string launcher = detect_launcher(env);
  std::vector<std::string> rank_vars, world_vars, local_vars;
  if (launcher == "torchrun") {
    KESTREL_CHECK(env("RANK") && env("WORLD_SIZE"),
                  "torchrun-style environment: RANK and WORLD_SIZE must be set together (found ",
                  env("RANK") ? "RANK" : "WORLD_SIZE", " alone)");
    rank_vars = {"RANK"}, world_vars = {"WORLD_SIZE"}, local_vars = {"LOCAL_RANK"};
  } else if (launcher == "Open MPI") {
    rank_vars = {"OMPI_COMM_WORLD_RANK"}, world_vars = {"OMPI_COMM_WORLD_SIZE"};
    local_vars = {"OMPI_COMM_WORLD_LOCAL_RANK"};
  } else if (launcher == "SLURM") {
    rank_vars = {"SLURM_PROCID"}, world_vars = {"SLURM_NTASKS"}, local_vars = {"SLURM_LOCALID"};
  }
  const auto rank = pick(flags.rank, "--rank", rank_vars, env);
  const auto world = pick(flags.world_size, "--world-size", world_vars, env);
  const auto local = pick(flags.local_rank, "--local-rank", local_vars, env);
  const auto port = pick(flags.master_port, "--master-port", {"MASTER_PORT"}, env);

  DistOptions o;
  o.world_size = world ? world->value : 1;
  o.rank = rank ? rank->value : 0;
  // Without a local rank the job is taken to run on one node, where local rank equals rank.
  o.local_rank = local ? local->value : o.rank;
  o.master_port = port ? port->value : 29500;
  std::string port_src = port ? port->source : "the default port 29500";
  // torchrun's agent serves a store of its own (PyTorch's protocol) at MASTER_PORT and tells its
  // workers so: rank 0 then hosts ours on a port the kernel picks and posts it there.
  o.torch_agent_store = !flags.master_port && port && launcher == "torchrun" &&
                        env("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
  o.timeout = flags.timeout;
  // Kestrel's launcher numbers its attempts; so does torchrun (its --max-restarts).
  std::vector<std::string> restart_vars = {"KESTREL_RESTART_COUNT"};
  if (launcher == "torchrun") restart_vars.push_back("TORCHELASTIC_RESTART_COUNT");
  for (const std::string& name : restart_vars) {
    if (auto restart = env(name)) {
      o.restart_count = parse_int(*restart, name);
      KESTREL_CHECK(o.restart_count >= 0, name, " must not be negative, got ", *restart);
      break;
    }
  }
  const std::string rank_src = rank ? rank->source : "the default rank 0";
  const std::string world_src = world ? world->source : "the default world size 1";
  KESTREL_CHECK(o.world_size >= 1, "the world size must be at least 1, got ", world_src);
  KESTREL_CHECK(o.rank >= 0 && o.rank < o.world_size, "the rank must lie in [0, world size): got ",
                rank_src, " with ", world_src);
  KESTREL_CHECK(o.local_rank >= 0, "the local rank must not be negative, got ", local->source);
  KESTREL_CHECK(o.master_port > 0 && o.master_port < 65536,
                "the master port must lie in 1..65535, got ", port_src);
  KESTREL_CHECK(o.timeout.count() > 0, "the distributed timeout must be positive, got ",
                o.timeout.count(), " s");

  if (flags.master_addr) {
    o.master_addr = *flags.master_addr;
  } else if (auto addr = env("MASTER_ADDR")) {
    o.master_addr = *addr;
  } else if (launcher == "SLURM") {
    auto nodes = env("SLURM_JOB_NODELIST");
    if (!nodes) nodes = env("SLURM_NODELIST");
    KESTREL_CHECK(nodes,
                  "SLURM environment without SLURM_JOB_NODELIST or SLURM_NODELIST: set "
                  "MASTER_ADDR or pass --master-addr");
    const auto hosts = expand_host_list(*nodes);
    KESTREL_CHECK(!hosts.empty(), "SLURM node list '", *nodes, "' names no host");
    o.master_addr = hosts.front();
  } else if (launcher == "Open MPI") {
    // One node: loopback works. Several nodes: only the user knows which host is rank 0's.
    auto local_size = env("OMPI_COMM_WORLD_LOCAL_SIZE");
    KESTREL_CHECK(
        !local_size || parse_int(*local_size, "OMPI_COMM_WORLD_LOCAL_SIZE") == o.world_size,
        "this Open MPI job spans several nodes: tell the ranks where rank 0 runs with "
        "--master-addr HOST or mpirun -x MASTER_ADDR=HOST");
  }
  KESTREL_CHECK(!o.master_addr.empty(), "the master address is empty; pass --master-addr HOST");
  return o;
}

}  // namespace kestrel::dist
