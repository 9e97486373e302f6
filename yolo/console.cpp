#include "yolo/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kestrel::yolo {

std::string format_interval(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02d:%02d", static_cast<long long>(s / 3600),
                  static_cast<int>(s / 60 % 60), static_cast<int>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%02d:%02d", static_cast<int>(s / 60), static_cast<int>(s % 60));
  return buf;
}

std::string format_bar(int64_t done, int64_t total, double seconds) {
  static const char* const eighths[8] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  constexpr int kCells = 10;
  const double frac = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 0.0;
  const int filled_eighths = static_cast<int>(frac * kCells * 8);
  std::string bar;
  int cells = 0;
  for (; cells < filled_eighths / 8; ++cells) bar += "█";
  if (cells < kCells && filled_eighths % 8) bar += eighths[filled_eighths % 8], ++cells;
  bar.append(kCells - cells, ' ');
  const std::string left = done > 0 ? format_interval(seconds / done * std::max<int64_t>(0, total - done)) : "?";
  char head[32];
  std::snprintf(head, sizeof head, "%3.0f%%|", frac * 100);  // rounded, as tqdm's {percentage:3.0f}
  return str(head, bar, "| ", done, "/", total, " ", format_interval(seconds), "<", left);
}

std::string fit_to_columns(const std::string& line, int columns) {
  if (columns <= 1) return line;
  int shown = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if ((static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) continue;  // continuation byte
    if (shown++ == columns - 1) return line.substr(0, i);
  }
  return line;
}

int terminal_columns() {
  winsize w{};
  return ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 ? w.ws_col : 0;
}

ProgressCadence::ProgressCadence(bool tty, double tty_interval, double log_interval)
    : tty_(tty), tty_interval_(tty_interval), log_interval_(log_interval) {}

bool ProgressCadence::due(int64_t done, int64_t total, double seconds) {
  const int64_t step = total > 0 ? done * 10 / total : 0;
  bool yes = done >= total;
  if (tty_)
    yes = yes || last_seconds_ < 0 || seconds - last_seconds_ >= tty_interval_;
  else
    yes = yes || step > last_step_ || (last_seconds_ >= 0 ? seconds - last_seconds_ : seconds) >= log_interval_;
  if (yes) last_seconds_ = seconds, last_step_ = step;
  return yes;
}

Console::Console(bool on) : Console(on, isatty(STDOUT_FILENO) != 0) {}

void Console::raw(const std::string& s) const {
  if (!on_) return;
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

void Console::progress(const std::string& line, bool last) const {
  if (!on_) return;
  // "\x1b[K" clears what a longer earlier line left to the right.
  if (tty_) raw("\r" + fit_to_columns(line, terminal_columns()) + "\x1b[K" + (last ? "\n" : ""));
  else raw(line + "\n");
}

}  // namespace kestrel::yolo
