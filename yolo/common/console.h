// Rank 0's console: plain lines, and progress bars in the reference's tqdm layout
// ("{desc}: {percent}%|{bar:10}| {n}/{total} {elapsed}", here with the time left after it).
// On a terminal a bar redraws in place; in a log (stdout not a terminal) it prints as a line now
// and then, so a piped log shows life during a long epoch without a line per batch.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace kestrel::yolo {

// The reference's colorstr: `text` in blue and bold (ANSI codes) when `colour`, as it is otherwise.
// Kestrel colours only on a terminal, so that a piped log stays plain text.
std::string colorstr(const std::string& text, bool colour);

// Python's repr of a float, as the reference's echoes print it: 0.01, 3.0, 0.0005, 1e-05.
std::string python_float(double v);

// The reference's print_args body: "k=v, k=v, ..." in the given order.
std::string args_text(const std::vector<std::pair<std::string, std::string>>& pairs);

// tqdm's time format: "00:05", "12:34", "1:02:03" (an hour or more).
std::string format_interval(double seconds);

// `line` cut to at most `columns` - 1 characters (UTF-8 code points; the bar's blocks are one column
// each), so that a redraw never wraps: a wrapped line cannot be redrawn in place and would leave a
// new row per update. columns <= 1: unchanged (width unknown).
std::string fit_to_columns(const std::string& line, int columns);
// The terminal's width in columns for stdout, 0 when stdout is not a terminal or does not say.
int terminal_columns();

// " 40%|████      | 12/30 00:05<00:07": percentage, a 10-cell bar of eighth blocks, the count,
// the time elapsed and the time left (from the mean rate so far; "?" before the first item).
std::string format_bar(int64_t done, int64_t total, double seconds);

// When a progress bar is drawn. On a terminal: at most every `tty_interval` seconds (tqdm's
// mininterval). In a log: each time another tenth of the total is done, or `log_interval` seconds
// after the last line, whichever comes first. Always at the last item. due() records a "yes".
class ProgressCadence {
 public:
  explicit ProgressCadence(bool tty, double tty_interval = 0.1, double log_interval = 30.0);
  bool due(int64_t done, int64_t total, double seconds);

 private:
  bool tty_;
  double tty_interval_, log_interval_;
  double last_seconds_ = -1;
  int64_t last_step_ = 0;  // tenths of the total reached at the last line
};

class Console {
 public:
  // `on`: this process prints (rank 0); `tty`: stdout is a terminal (redraw in place).
  explicit Console(bool on);
  Console(bool on, bool tty) : on_(on), tty_(on && tty) {}
  template <class... A>
  void line(const A&... parts) const {
    if (on_) raw(str(parts...) + "\n");
  }
  void raw(const std::string& s) const;
  // A progress line drawn now: in place on a terminal, cut to its width (ending the line when
  // `last`), as a line of its own in a log.
  void progress(const std::string& line, bool last) const;
  ProgressCadence cadence() const { return ProgressCadence(tty_); }
  // colorstr on this console: coloured on a terminal, plain in a log.
  std::string colour(const std::string& text) const { return colorstr(text, tty_); }
  bool on() const { return on_; }
  bool tty() const { return tty_; }

 private:
  bool on_, tty_;
};

}  // namespace kestrel::yolo
