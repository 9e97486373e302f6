// Overlap arithmetic on hand-made timelines, and the Chrome trace: well-formed JSON (parsed back
// with the engine's strict parser) with the events and values the timeline holds.
#include "dist/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "io/json.h"
#include "tests/support/testing.h"

namespace kestrel::dist {
namespace {

// Backward 100..200 us. Bucket 0: 120..150 (hidden). Bucket 1: 180..240 (20 of 60 hidden).
// Bucket 2: 210..230, queued inside bucket 1's span: it adds no busy time. The communication
// stream is busy 30 + 60 = 90 us, 40 of them after backward.
StepTimeline example() {
  StepTimeline t;
  t.step = 7;
  t.backward_start_us = 100;
  t.backward_end_us = 200;
  t.finalize_end_us = 245;
  t.buckets = {{1024, 3, 118, 120, 150}, {4096, 2, 179, 180, 240}, {512, 1, 205, 210, 230}};
  return t;
}

TEST(TimelineTest, OverlapEfficiencyIsTheHiddenShareOfCommunication) {
  const StepTimeline t = example();
  EXPECT_DOUBLE_EQ(communication_us(t), 90);
  EXPECT_DOUBLE_EQ(exposed_communication_us(t), 40);
  EXPECT_DOUBLE_EQ(overlap_efficiency(t), 50.0 / 90.0);

  StepTimeline none = t;
  none.buckets.clear();
  EXPECT_DOUBLE_EQ(overlap_efficiency(none), 1.0);
  StepTimeline after = t;  // --no-overlap: everything launched after backward
  for (BucketTiming& b : after.buckets) {
    b.launch_us += 100;
    b.done_us += 100;
  }
  EXPECT_DOUBLE_EQ(overlap_efficiency(after), 0.0);
  StepTimeline unfinished = t;  // a bucket never seen done does not count
  unfinished.buckets[1].done_us = -1;
  EXPECT_DOUBLE_EQ(communication_us(unfinished), 50);
}

const json::Value* find_event(const json::Array& events, const std::string& name) {
  for (const json::Value& e : events)
    if (e.find("name")->as_string() == name) return &e;
  return nullptr;
}

TEST(TimelineTest, ChromeTraceIsWellFormedAndHoldsTheTimeline) {
  TraceWriter writer(3);
  writer.add(example());
  StepTimeline second = example();
  second.step = 8;
  for (double* v : {&second.backward_start_us, &second.backward_end_us, &second.finalize_end_us})
    *v += 1000;
  for (BucketTiming& b : second.buckets)
    for (double* v : {&b.ready_us, &b.launch_us, &b.done_us}) *v += 1000;
  writer.add(second);
  EXPECT_EQ(writer.steps(), 2u);

  const json::Value doc = json::parse(writer.json());
  const json::Array& events = doc.find("traceEvents")->as_array();
  // 2 thread names + per step: backward, wait, 3 ready instants, 3 all-reduce slices.
  EXPECT_EQ(events.size(), 2u + 2u * 8u);
  for (const json::Value& e : events) {
    EXPECT_EQ(e.find("pid")->as_integer(), 3);
    const std::string ph = e.find("ph")->as_string();
    EXPECT_TRUE(ph == "X" || ph == "i" || ph == "M") << ph;
    if (ph == "X") {
      EXPECT_GE(e.find("dur")->as_real(), 0.0);
    }
  }
  const json::Value* backward = find_event(events, "backward");
  ASSERT_NE(backward, nullptr);
  EXPECT_DOUBLE_EQ(backward->find("ts")->as_real(), 0.0);  // relative to the first step
  EXPECT_DOUBLE_EQ(backward->find("dur")->as_real(), 100.0);
  EXPECT_DOUBLE_EQ(backward->find("args")->find("overlap_efficiency")->as_real(), 50.0 / 90.0);
  const json::Value* bucket1 = find_event(events, "bucket 1 all_reduce");
  ASSERT_NE(bucket1, nullptr);
  EXPECT_EQ(bucket1->find("tid")->as_integer(), 1);
  EXPECT_DOUBLE_EQ(bucket1->find("ts")->as_real(), 80.0);
  EXPECT_DOUBLE_EQ(bucket1->find("dur")->as_real(), 60.0);
  EXPECT_EQ(bucket1->find("args")->find("bytes")->as_integer(), 4096);

  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("kestrel_trace_" + std::to_string(::getpid()) + ".json");
  writer.write(path.string());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), writer.json());
  EXPECT_TRUE(testing::temporaries_of(path.string()).empty());
  std::filesystem::remove(path);
  EXPECT_THROW(writer.write("/nonexistent-dir/trace.json"), Error);
}

}  // namespace
}  // namespace kestrel::dist
