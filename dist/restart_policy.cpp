#include "dist/restart_policy.h"

#include <algorithm>
#include <system_error>

#include "dist/launcher.h"

namespace kestrel::dist {
namespace {

namespace fs = std::filesystem;

bool is_flag(const std::string& arg) { return arg.rfind("--", 0) == 0; }

// "--exist_ok=1" -> "exist-ok"; "" for a word that is no flag.
std::string flag_name(const std::string& arg) {
  if (!is_flag(arg)) return "";
  std::string name = arg.substr(2, arg.find('=') - 2);  // npos - 2 still means "to the end"
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// `command` without the flags in `names`; those in `with_value` also lose the next word when
// their value is not inline. `--resume` takes the next word only when it is no flag, as
// `kestrel train` reads it.
std::vector<std::string> without_flags(const std::vector<std::string>& command,
                                       const std::vector<std::string>& names,
                                       const std::vector<std::string>& with_value) {
  auto listed = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string name = flag_name(command[i]);
    if (name.empty() || !listed(names, name)) {
      out.push_back(command[i]);
      continue;
    }
    const bool inline_value = command[i].find('=') != std::string::npos;
    const bool optional_value = name == "resume" && i + 1 < command.size() && !is_flag(command[i + 1]);
    if (!inline_value && (listed(with_value, name) || optional_value)) ++i;
  }
  return out;
}

bool resumes(const std::vector<std::string>& command) {
  for (const std::string& arg : command)
    if (flag_name(arg) == "resume" || flag_name(arg) == "resume-from") return true;
  return false;
}

}  // namespace

CheckpointTimes find_checkpoints(const fs::path& project) {
  CheckpointTimes found;
  std::error_code ec;
  if (!fs::is_directory(project, ec)) return found;
  for (fs::recursive_directory_iterator it(project, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->path().filename() != "last.safetensors" || !it->is_regular_file(ec)) continue;
    const fs::file_time_type written = it->last_write_time(ec);
    if (!ec) found[it->path()] = written;
    ec.clear();
  }
  return found;
}

std::vector<std::string> resume_command(const std::vector<std::string>& command,
                                        const fs::path& checkpoint) {
  std::vector<std::string> out = without_flags(command, {"resume", "resume-from"}, {"resume-from"});
  out.push_back("--resume");
  out.push_back(checkpoint.string());
  return out;
}

std::vector<std::string> pinned_run_command(const std::vector<std::string>& command,
                                            const std::string& run_name) {
  std::vector<std::string> out = without_flags(command, {"name", "exist-ok"}, {"name"});
  for (const char* arg : {"--name", run_name.c_str(), "--exist-ok"}) out.push_back(arg);
  return out;
}

RestartPolicy::RestartPolicy(RestartOptions options)
    : options_(std::move(options)), before_(find_checkpoints(options_.project)) {}

fs::path RestartPolicy::newest_checkpoint() const {
  fs::path newest;
  fs::file_time_type newest_time{};
  for (const auto& [path, written] : find_checkpoints(options_.project)) {
    const auto old = before_.find(path);
    if (old != before_.end() && old->second == written) continue;  // an earlier run's, untouched
    if (newest.empty() || written > newest_time) {
      newest = path;
      newest_time = written;
    }
  }
  return newest;
}

std::optional<RestartPlan> RestartPolicy::next(const LaunchResult& attempt) {
  if (attempt.exit_code == 0 || attempt.interrupt_signal != 0) return std::nullopt;
  if (used_ >= options_.max_restarts) return std::nullopt;
  RestartPlan plan;
  plan.restart = ++used_;
  plan.checkpoint = newest_checkpoint();
  if (!plan.checkpoint.empty())
    plan.command = resume_command(options_.command, plan.checkpoint);
  else if (resumes(options_.command))  // the checkpoint it resumes from is still the one to take
    plan.command = options_.command;
  else
    plan.command = pinned_run_command(options_.command, options_.run_name);
  return plan;
}

}  // namespace kestrel::dist
