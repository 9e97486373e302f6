#include "yolo/common/stop_signal.h"

#include <atomic>

namespace kestrel::yolo {
namespace {

std::atomic<int> g_received{0};

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (g_received.compare_exchange_strong(expected, sig)) return;
  // A second signal: the default action now (both calls are async-signal-safe).
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

StopSignal::StopSignal() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking reads and waits in the loader carry on
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

StopSignal::~StopSignal() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  g_received = 0;
}

int StopSignal::received() const { return g_received.load(); }

int StopSignal::pending() { return g_received.load(); }

void StopSignal::raise_as(int sig) {
  int expected = 0;
  g_received.compare_exchange_strong(expected, sig);
}

}  // namespace kestrel::yolo
