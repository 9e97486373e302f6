#include "yolo/hyp.h"

#include <string>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::error_of;

TEST(Hyp, DefaultsAreScratchLow) {
  Hyp h;
  EXPECT_EQ(h.lr0, 0.01);
  EXPECT_EQ(h.momentum, 0.937);
  EXPECT_EQ(h.anchor_t, 4.0);
  EXPECT_EQ(h.mosaic, 1.0);
  EXPECT_EQ(h.values().size(), 29u);
}

TEST(Hyp, FileOverridesAndRoundTrips) {
  Hyp h = parse_hyp("lr0: 0.02\nmixup: 0.1\n", "h.yaml");
  EXPECT_EQ(h.lr0, 0.02);
  EXPECT_EQ(h.mixup, 0.1);
  EXPECT_EQ(h.box, 0.05);
  Hyp back = parse_hyp(h.to_yaml(), "back.yaml");
  EXPECT_EQ(back.values(), h.values());
}

TEST(Hyp, BadFilesAreRefused) {
  EXPECT_THROW(parse_hyp("lr_0: 0.01\n", "h.yaml"), Error);
  EXPECT_THROW(parse_hyp("lr0: fast\n", "h.yaml"), Error);
  EXPECT_THROW(parse_hyp("lr0: -1\n", "h.yaml"), Error);
  EXPECT_THROW(parse_hyp("- 1\n", "h.yaml"), Error);
  EXPECT_THROW(load_hyp("no/such/hyp.yaml"), Error);
}

// The message says what is wrong with the value: nan and inf are no numbers a schedule can use,
// whatever their sign.
TEST(Hyp, NonFiniteValuesAreRefusedAsSuch) {
  for (const char* value : {".nan", ".inf", "-.inf"}) {
    const std::string error = error_of([&] { parse_hyp(std::string("lr0: ") + value + "\n", "h.yaml"); });
    EXPECT_NE(error.find("h.yaml: 'lr0' must be a finite number"), std::string::npos) << error;
  }
}

// PyYAML (the reference) keeps a repeated key's last value, yaml-cpp its first: refused, naming both lines.
TEST(Hyp, RepeatedKeysAreRefused) {
  const std::string error = error_of([] { parse_hyp("lr0: 0.01\nlrf: 0.1\nlr0: 0.02\n", "h.yaml"); });
  EXPECT_NE(error.find("h.yaml: key 'lr0' is given twice (lines 1 and 3)"), std::string::npos) << error;
}
