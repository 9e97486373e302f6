// SIGINT and SIGTERM while training. The first one asks the trainer to stop cleanly: it finishes
// the optimizer step under way, saves a checkpoint it can resume from, and exits with 128 + the
// signal's number (the shell's convention: 130, 143). A second one ends the process at once with
// the signal's default action, for a user who does not want to wait.
//
// A signal handler can only reach process-wide state, hence the one global flag behind this
// class; one StopSignal is alive at a time (a training run), and it restores the previous
// handlers when it goes.
#pragma once
#include <csignal>
#include <stdexcept>
#include <string>

namespace kestrel::yolo {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // 0, or the first signal received (SIGINT or SIGTERM).
  int received() const;
  // Behaves as if `sig` had arrived (tests, and a rank told by the others to stop).
  void raise_as(int sig);
  // received() of the StopSignal alive now, 0 when none is: for work that runs under one but
  // cannot be handed it (a download inside the trainer's start-up).
  static int pending();

 private:
  struct sigaction previous_int_{}, previous_term_{};
};

// Work given up because of a stop signal (a download during start-up): the CLI exits with
// 128 + signal after saying what stopped.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, const std::string& what) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace kestrel::yolo
