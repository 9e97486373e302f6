// The arithmetic of `overlap bandwidth` (bench/overlap/bandwidth_model.h): tc rates and link
// settings with a delay, the overlap efficiency docs/history/distributed.md defines, per-repetition medians
// from timeline rows, the simulator's calibration on one link setting, and the report over
// repetitions at several settings.
#include "bench/overlap/bandwidth_model.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"

namespace kestrel::bench::overlap {
namespace {

TEST(ParseRate, ReadsTcRates) {
  EXPECT_DOUBLE_EQ(parse_rate_bits("1gbit"), 1e9);
  EXPECT_DOUBLE_EQ(parse_rate_bits("200mbit"), 200e6);
  EXPECT_DOUBLE_EQ(parse_rate_bits("2.5Gbit"), 2.5e9);
  EXPECT_DOUBLE_EQ(parse_rate_bits("64kbit"), 64e3);
  EXPECT_DOUBLE_EQ(parse_rate_bits("1000bit"), 1000);
  for (const char* bad : {"", "fast", "200", "200mb", "-1mbit", "0gbit", "mbit"})
    EXPECT_THROW(parse_rate_bits(bad), Error) << bad;
}

TEST(ParseLinkSetting, ReadsARateWithOrWithoutAOneWayDelay) {
  const LinkSetting plain = parse_link_setting("1gbit");
  EXPECT_DOUBLE_EQ(plain.rate_bits, 1e9);
  EXPECT_DOUBLE_EQ(plain.delay_us, 0);
  const LinkSetting short_delay = parse_link_setting("1gbit+0.2ms");
  EXPECT_DOUBLE_EQ(short_delay.rate_bits, 1e9);
  EXPECT_DOUBLE_EQ(short_delay.delay_us, 200);
  const LinkSetting slow = parse_link_setting("200mbit+5ms");
  EXPECT_DOUBLE_EQ(slow.rate_bits, 200e6);
  EXPECT_DOUBLE_EQ(slow.delay_us, 5000);
  EXPECT_EQ(parse_link_setting("1gbit+0ms"), plain);  // the same link
  EXPECT_NE(short_delay, plain);
  for (const char* bad : {"1gbit+", "1gbit+-1ms", "1gbit+2s", "+1ms", "1gbit+1ms+2ms", "1gbit+ms", "fast+1ms",
                          "1gbit+1e3ms", "1gbit+infms", ""})
    EXPECT_THROW(parse_link_setting(bad), Error) << bad;
  try {
    parse_link_setting("1gbit+2s");
    FAIL();
  } catch (const Error& e) {  // names the text and the form it should have
    EXPECT_NE(std::string(e.what()).find("'1gbit+2s'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1gbit+0.2ms"), std::string::npos) << e.what();
  }
}

TEST(ParseLinkSetting, FastestRateFirstThenSmallestDelay) {
  std::vector<LinkSetting> links;
  for (const char* name : {"200mbit", "1gbit+5ms", "1gbit", "200mbit+1ms", "1gbit+0.2ms"})
    links.push_back(parse_link_setting(name));
  std::sort(links.begin(), links.end(), FastestFirst{});
  std::vector<LinkSetting> expected;
  for (const char* name : {"1gbit", "1gbit+0.2ms", "1gbit+5ms", "200mbit", "200mbit+1ms"})
    expected.push_back(parse_link_setting(name));
  EXPECT_EQ(links, expected);
}

TEST(OverlapEfficiency, HiddenShareOfWhatCouldHide) {
  // Communication shorter than backward: all of it could hide.
  EXPECT_DOUBLE_EQ(overlap_efficiency(100, 300, 0), 1.0);
  EXPECT_DOUBLE_EQ(overlap_efficiency(100, 300, 10), 0.9);
  EXPECT_DOUBLE_EQ(overlap_efficiency(100, 300, 100), 0.0);
  EXPECT_DOUBLE_EQ(overlap_efficiency(100, 300, 250), 0.0);  // slower than alone: nothing hidden
  // Communication longer than backward: at best backward's length hides, comm - backward shows.
  EXPECT_DOUBLE_EQ(overlap_efficiency(500, 200, 300), 1.0);
  EXPECT_DOUBLE_EQ(overlap_efficiency(500, 200, 400), 0.5);
  EXPECT_DOUBLE_EQ(overlap_efficiency(500, 200, 200), 1.0);  // faster than alone: clamped
  EXPECT_DOUBLE_EQ(overlap_efficiency(0, 200, 3), 1.0);      // nothing to hide
}

TEST(Spread, MedianAndRange) {
  const Spread s = spread({5, 1, 3, 9});
  EXPECT_DOUBLE_EQ(s.median, 4);
  EXPECT_DOUBLE_EQ(s.lo, 1);
  EXPECT_DOUBLE_EQ(s.hi, 9);
  EXPECT_DOUBLE_EQ(spread({}).median, 0);
}

TEST(Calibration, RecoversLatencyAndWireShareAndScalesWithTheRate) {
  // 2 ranks over 1 Gbit/s reaching 80 %: 100 bytes/us of payload, 50 us per message.
  const Link truth{50, 0.8 * 1e9 / 8 / 1e6};
  std::vector<CollectiveSample> samples;
  for (int64_t bytes : {100000, 1000000, 4000000}) samples.push_back({bytes, 2, ring_allreduce_us(bytes, 2, truth)});
  const Calibration c = calibrate(samples, 1e9);
  EXPECT_NEAR(c.alpha_us, 50, 1e-6);
  EXPECT_NEAR(c.wire_efficiency, 0.8, 1e-9);
  const Link slow = link_at(c, 200e6);
  EXPECT_NEAR(slow.bytes_per_us, 0.8 * 200e6 / 8 / 1e6, 1e-9);
  EXPECT_NEAR(slow.alpha_us, 50, 1e-6);
  EXPECT_THROW(calibrate(samples, 0), Error);
  EXPECT_THROW(link_at(c, -1), Error);
}

TEST(Calibration, OneWayDelayCostsARoundTripPerWait) {
  const Calibration c{50, 0.8};
  const Link far = link_at(c, 1e9, 5000);
  EXPECT_DOUBLE_EQ(far.alpha_us, 50);
  EXPECT_DOUBLE_EQ(far.delay_us, 5000);
  EXPECT_DOUBLE_EQ(far.bytes_per_us, link_at(c, 1e9).bytes_per_us);
  // 2 ranks: one exchange, one round trip (2 x 5 ms); 3 ranks: Gloo's ring, 2(n-1) = 4 steps of one
  // round trip each.
  EXPECT_EQ(allreduce_round_trips(1), 0);
  EXPECT_EQ(allreduce_round_trips(2), 1);
  EXPECT_EQ(allreduce_round_trips(3), 4);
  const Link near = link_at(c, 1e9);
  EXPECT_NEAR(ring_allreduce_us(1 << 20, 2, far) - ring_allreduce_us(1 << 20, 2, near), 2 * 5000, 1e-6);
  EXPECT_NEAR(ring_allreduce_us(1 << 20, 3, far) - ring_allreduce_us(1 << 20, 3, near), 4 * 2 * 5000, 1e-6);
  EXPECT_THROW(link_at(c, 1e9, -1), Error);
  // Calibrated on a link with delay, the latency is the link's without it.
  std::vector<CollectiveSample> samples;
  for (int64_t bytes : {100000, 4000000}) samples.push_back({bytes, 2, ring_allreduce_us(bytes, 2, far)});
  const Calibration back = calibrate(samples, 1e9, 5000);
  EXPECT_NEAR(back.alpha_us, 50, 1e-6);
  EXPECT_NEAR(back.wire_efficiency, 0.8, 1e-9);
}

TimelineRow row(double cap, bool overlap, int step, double step_us, double backward_us, double finalize_us,
                int bucket) {
  TimelineRow r;
  r.world = 2;
  r.cap_mb = cap;
  r.overlap = overlap;
  r.step = step;
  r.step_us = step_us;
  r.pre_us = 10;
  r.backward_us = backward_us;
  r.finalize_us = finalize_us;
  r.bucket = bucket;
  return r;
}

TEST(RunMedians, PerStepColumnsOnceEachOverTheSteps) {
  std::vector<TimelineRow> rows;
  // Three steps of two buckets at cap 4 with overlap on; the wait is finalize - backward.
  for (int b = 0; b < 2; ++b) {
    rows.push_back(row(4, true, 0, 500, 300, 320, b));
    rows.push_back(row(4, true, 1, 700, 310, 400, b));
    rows.push_back(row(4, true, 2, 600, 290, 300, b));
  }
  rows.push_back(row(4, false, 0, 900, 280, 600, 0));  // another configuration
  rows.push_back(row(1, true, 0, 1, 1, 1, 0));
  const RunMedians m = run_medians(rows, 4, true);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.buckets, 2);
  EXPECT_DOUBLE_EQ(m.step_us, 600);
  EXPECT_DOUBLE_EQ(m.backward_us, 300);
  EXPECT_DOUBLE_EQ(m.exposed_us, 20);
  EXPECT_DOUBLE_EQ(m.pre_us, 10);
  EXPECT_FALSE(run_medians(rows, 8, true).found);
}

TEST(PairMedians, SeparatesWaitingForThePeerFromCommunication) {
  // Step 0: rank 1's backward ends 30 us after rank 0's, both finalize by 140 (rank 0 started at
  // 1000, backward from 1010 to 1110, finalize until 1140): 10 us exposed after both backwards.
  // Step 1: rank 1 ends 20 earlier; rank 0's backward is the later one.
  auto at = [](int step, double start, double backward, double finalize) {
    TimelineRow r = row(4, true, step, 0, backward, finalize, 0);
    r.start_us = start;
    return r;
  };
  const std::vector<TimelineRow> rank0{at(0, 1000, 100, 140), at(1, 5000, 100, 105)};
  const std::vector<TimelineRow> rank1{at(0, 1000, 130, 140), at(1, 5000, 80, 105)};
  const PairMedians m = pair_medians(rank0, rank1, 4, true);
  ASSERT_TRUE(m.found);
  EXPECT_DOUBLE_EQ(m.peer_late_us, 5);              // median of 30 and -20
  EXPECT_DOUBLE_EQ(m.exposed_after_last_us, 7.5);   // median of 10 and 5
  EXPECT_DOUBLE_EQ(m.last_backward_us, 115);        // median of 130 (rank 1) and 100 (rank 0)
  EXPECT_FALSE(pair_medians(rank0, {}, 4, true).found);
  std::vector<TimelineRow> old = rank0;  // files without start times
  for (TimelineRow& r : old) r.start_us = 0;
  EXPECT_FALSE(pair_medians(old, rank1, 4, true).found);
}

TEST(AloneMedian, SumsBucketsPerRepetition) {
  const std::vector<AloneRow> rows{{2, 4, 0, 0, 100, 10}, {2, 4, 0, 1, 100, 15}, {2, 4, 1, 0, 100, 30},
                                   {2, 4, 1, 1, 100, 40}, {2, 4, 2, 0, 100, 12}, {2, 4, 2, 1, 100, 14},
                                   {2, 1, 0, 0, 100, 99}};
  EXPECT_DOUBLE_EQ(alone_median_us(rows, 4), 26);  // totals 25, 70, 26
  EXPECT_DOUBLE_EQ(alone_median_us(rows, 1), 99);
  EXPECT_DOUBLE_EQ(alone_median_us(rows, 2), 0);
}

TEST(WithCompute, StretchesArrivalsToTheRunsBackward) {
  Profile p;
  p.pre_us = 100;
  p.backward_us = 1000;
  p.grads = {{250, 8}, {1000, 4}};
  const Profile q = with_compute(p, 50, 2000);
  EXPECT_DOUBLE_EQ(q.pre_us, 50);
  EXPECT_DOUBLE_EQ(q.backward_us, 2000);
  EXPECT_DOUBLE_EQ(q.grads[0].ready_us, 500);
  EXPECT_DOUBLE_EQ(q.grads[1].ready_us, 2000);
  EXPECT_EQ(q.grads[0].bytes, 8);
  EXPECT_THROW(with_compute(p, 50, 0), Error);
}

// A repetition at setting `name` with cap 4 MB, overlap off and on, two steps each (steps of
// step_us with overlap off, step_us - 100 on), and its buckets alone (4 and 2 MiB) as `link`
// carries them.
Repetition repetition(const std::string& name, int rep, double step_us, const Link& link) {
  Repetition r;
  r.rate = name;
  const LinkSetting setting = parse_link_setting(name);
  r.rate_bits = setting.rate_bits;
  r.delay_us = setting.delay_us;
  r.rep = rep;
  for (int step = 0; step < 2; ++step)
    for (int b = 0; b < 2; ++b) {
      r.timeline.push_back(row(4, false, step, step_us, 1000, 1000 + step_us / 2, b));
      r.timeline.push_back(row(4, true, step, step_us - 100, 1000, 1000 + step_us / 4, b));
    }
  for (const auto& [bucket, mib] : {std::pair{0, 4}, std::pair{1, 2}}) {
    const int64_t bytes = int64_t{mib} << 20;
    r.alone.push_back({2, 4, 0, bucket, bytes, ring_allreduce_us(bytes, 2, link)});
  }
  // Three 2 MiB gradients: at a 4 MB cap, buckets of 4 and 2 MiB.
  r.profile.pre_us = 10;
  r.profile.backward_us = 1000;
  r.profile.grads = {{300, 2 << 20}, {600, 2 << 20}, {1000, 2 << 20}};
  return r;
}

TEST(BandwidthReport, KeepsARateWithTwoDelaysApart) {
  // 1 Gbit/s at 80 % with 50 us per message; the same rate 5 ms further away.
  const Link near{50, 0.8 * 1e9 / 8 / 1e6}, far{50, near.bytes_per_us, 5000};
  const std::vector<Repetition> reps{repetition("1gbit+5ms", 1, 90000, far), repetition("1gbit", 1, 20000, near),
                                     repetition("1gbit+5ms", 2, 92000, far), repetition("1gbit", 2, 22000, near)};
  const BandwidthReport report = bandwidth_report(reps, "1gbit", 0);
  // Calibrated on the zero-delay runs only: their buckets alone give the link back exactly.
  EXPECT_NEAR(report.calibration.alpha_us, 50, 1e-6);
  EXPECT_NEAR(report.calibration.wire_efficiency, 0.8, 1e-9);
  ASSERT_EQ(report.settings.size(), 4u);  // two settings x overlap off and on at one cap
  for (int i = 0; i < 4; ++i) {
    const SettingSummary& s = report.settings[i];
    EXPECT_EQ(s.rate, i < 2 ? "1gbit" : "1gbit+5ms");
    EXPECT_DOUBLE_EQ(s.rate_bits, 1e9);
    EXPECT_DOUBLE_EQ(s.delay_us, i < 2 ? 0 : 5000);
    EXPECT_EQ(s.overlap, i % 2 == 1);
    EXPECT_EQ(s.reps, 2);
  }
  // Each group's measurements are its own.
  EXPECT_DOUBLE_EQ(report.settings[0].step_us.median, 21000);
  EXPECT_DOUBLE_EQ(report.settings[2].step_us.median, 91000);
  EXPECT_DOUBLE_EQ(report.settings[2].alone_us.median,
                   ring_allreduce_us(4 << 20, 2, far) + ring_allreduce_us(2 << 20, 2, far));
  // Two buckets over 2 ranks, one round trip each: 2 x (2 x 5 ms).
  const double extra = report.settings[3].predicted_alone_us - report.settings[1].predicted_alone_us;
  EXPECT_NEAR(extra, 2 * (2 * 5000), 1e-6);
  EXPECT_GT(report.settings[2].predicted_step_us, report.settings[0].predicted_step_us + 2 * 2 * 5000 - 1e-6);
  // A setting with a delay calibrates to the same link; one not measured is refused.
  EXPECT_NEAR(bandwidth_report(reps, "1gbit+5ms", 0).calibration.alpha_us, 50, 1e-6);
  EXPECT_NEAR(bandwidth_report(reps, "1gbit+0ms", 0).calibration.alpha_us, 50, 1e-6);
  EXPECT_THROW(bandwidth_report(reps, "1gbit+0.2ms", 0), Error);
  EXPECT_THROW(bandwidth_report(reps, "200mbit", 0), Error);
}

TEST(RelativeError, SignedShareOfTheMeasurement) {
  EXPECT_DOUBLE_EQ(relative_error(110, 100), 0.1);
  EXPECT_DOUBLE_EQ(relative_error(90, 100), -0.1);
  EXPECT_THROW(relative_error(1, 0), Error);
}

}  // namespace
}  // namespace kestrel::bench::overlap
