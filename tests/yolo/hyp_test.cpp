#include "yolo/hyp.h"

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

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
