// The console's progress bars: the tqdm-style bar text (percentage, eighth-block bar, count,
// elapsed and time left) and when a bar is drawn — at most every 0.1 s on a terminal, and in a
// log once per tenth of the total or after 30 s of silence, always at the end.
#include "yolo/common/console.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace kestrel::yolo;

TEST(FormatInterval, MinutesSecondsAndHours) {
  EXPECT_EQ(format_interval(0), "00:00");
  EXPECT_EQ(format_interval(5.9), "00:05");
  EXPECT_EQ(format_interval(754), "12:34");
  EXPECT_EQ(format_interval(3723), "1:02:03");
  EXPECT_EQ(format_interval(-3), "00:00");
}

TEST(FormatBar, PercentBarCountElapsedAndLeft) {
  EXPECT_EQ(format_bar(0, 30, 0), "  0%|          | 0/30 00:00<?");
  EXPECT_EQ(format_bar(12, 30, 6), " 40%|████      | 12/30 00:06<00:09");
  // 13/30 = 4.33 cells: four full, then two eighths (▎).
  EXPECT_EQ(format_bar(13, 30, 13), " 43%|████▎     | 13/30 00:13<00:17");
  EXPECT_EQ(format_bar(30, 30, 61), "100%|██████████| 30/30 01:01<00:00");
  EXPECT_EQ(format_bar(5, 0, 1), "  0%|          | 5/0 00:01<00:00");
  EXPECT_EQ(format_bar(6, 7, 1).substr(0, 4), " 86%") << "rounded, as tqdm";
}

TEST(ProgressCadence, TerminalRedrawsAtMostEveryTenthOfASecond) {
  ProgressCadence c(/*tty=*/true);
  EXPECT_TRUE(c.due(1, 100, 0.01)) << "the first update draws";
  EXPECT_FALSE(c.due(2, 100, 0.05));
  EXPECT_TRUE(c.due(3, 100, 0.12));
  EXPECT_FALSE(c.due(4, 100, 0.15));
  EXPECT_TRUE(c.due(100, 100, 0.16)) << "the last item always draws";
}

TEST(ProgressCadence, LogPrintsEachTenthAndAfterLongSilence) {
  // 1000 fast batches: a line at each 10 % (100, 200, ..., 1000) and none between.
  ProgressCadence c(/*tty=*/false);
  std::vector<int> printed;
  for (int i = 1; i <= 1000; ++i)
    if (c.due(i, 1000, i * 0.01)) printed.push_back(i);
  EXPECT_EQ(printed, (std::vector<int>{100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}));

  // Slow batches: a line after 30 s even within one tenth.
  ProgressCadence slow(false);
  EXPECT_FALSE(slow.due(1, 1000, 10));
  EXPECT_FALSE(slow.due(2, 1000, 29));
  EXPECT_TRUE(slow.due(3, 1000, 31));
  EXPECT_FALSE(slow.due(4, 1000, 40));
  EXPECT_TRUE(slow.due(5, 1000, 61.5));

  // Few batches: each tenth reached prints, so every batch of a 3-batch epoch does.
  ProgressCadence few(false);
  EXPECT_TRUE(few.due(1, 3, 0.1));
  EXPECT_TRUE(few.due(2, 3, 0.2));
  EXPECT_TRUE(few.due(3, 3, 0.3));
}

TEST(Console, OffPrintsNothingAndTtyNeedsOn) {
  const Console off(false, true);
  EXPECT_FALSE(off.on());
  EXPECT_FALSE(off.tty());
  EXPECT_TRUE(Console(true, true).tty());
  EXPECT_FALSE(Console(true, false).tty());
}

TEST(Console, ProgressLinesFitTheTerminal) {
  const std::string bar = "  0/29  1.2G  0.1  " + format_bar(12, 30, 5.0);  // holds multi-byte blocks
  EXPECT_EQ(fit_to_columns(bar, 0), bar);  // width unknown
  EXPECT_EQ(fit_to_columns(bar, 200), bar);
  EXPECT_EQ(fit_to_columns("abcdef", 4), "abc");
  // Cut by characters, never inside a block's bytes: 7 columns keep 6 characters.
  const std::string cut = fit_to_columns("ab█▍cdef", 7);
  EXPECT_EQ(cut, "ab█▍cd");
  const std::string narrow = fit_to_columns(bar, 30);
  size_t characters = 0;
  for (unsigned char c : narrow) characters += (c & 0xC0) != 0x80;
  EXPECT_EQ(characters, 29u);
  EXPECT_EQ(bar.rfind(narrow, 0), 0u);  // a prefix of the line
}

TEST(Colorstr, BlueBoldOnATerminalPlainInALog) {
  EXPECT_EQ(colorstr("train: ", true), "\x1b[34m\x1b[1mtrain: \x1b[0m");
  EXPECT_EQ(colorstr("train: ", false), "train: ");
  EXPECT_EQ(Console(true, true).colour("val: "), "\x1b[34m\x1b[1mval: \x1b[0m");
  EXPECT_EQ(Console(true, false).colour("val: "), "val: ");
}

TEST(PythonFloat, SpellsFloatsAsPythonsRepr) {
  EXPECT_EQ(python_float(0.01), "0.01");
  EXPECT_EQ(python_float(3.0), "3.0");
  EXPECT_EQ(python_float(0.0), "0.0");
  EXPECT_EQ(python_float(0.0005), "0.0005");
  EXPECT_EQ(python_float(0.2), "0.2");
  EXPECT_EQ(python_float(0.937), "0.937");
  EXPECT_EQ(python_float(1e-05), "1e-05");
  EXPECT_EQ(python_float(1.5e-07), "1.5e-07");
  EXPECT_EQ(python_float(1e16), "1e+16");
  EXPECT_EQ(python_float(123456.0), "123456.0");
  EXPECT_EQ(python_float(-2.5), "-2.5");
  EXPECT_EQ(python_float(0.1 + 0.2), "0.30000000000000004");
}

TEST(ArgsText, KeyValuePairsJoinedByCommas) {
  EXPECT_EQ(args_text({{"weights", "yolov5s.pt"}, {"epochs", "3"}, {"rect", "False"}}),
            "weights=yolov5s.pt, epochs=3, rect=False");
  EXPECT_EQ(args_text({}), "");
}
