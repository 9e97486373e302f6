#include "yolo/common/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kestrel::yolo {

std::string colorstr(const std::string& text, bool colour) {
  return colour ? "\x1b[34m\x1b[1m" + text + "\x1b[0m" : text;
}

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // The shortest digits that read back as v (Python's repr picks the same), then Python's layout:
  // positional for decimal exponents -4 to 15, scientific (two-digit exponent at least) beyond.
  char buf[64];
  const auto sci = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string s(buf, sci.ptr);
  const size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  if (exponent < -4 || exponent >= 16) {
    char out[64];
    std::snprintf(out, sizeof out, "%se%c%02d", s.substr(0, e).c_str(), exponent < 0 ? '-' : '+', std::abs(exponent));
    return out;
  }
  const auto fixed = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  std::string out(buf, fixed.ptr);
  if (out.find('.') == std::string::npos) out += ".0";
  return out;
}

std::string args_text(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string out;
  for (const auto& [key, value] : pairs) out += (out.empty() ? "" : ", ") + key + "=" + value;
  return out;
}

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
