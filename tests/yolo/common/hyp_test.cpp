#include "yolo/common/hyp.h"

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

// The shipped files carry the reference's values: scratch-low is exactly the built-in default,
// med and high differ from it where the reference's do (tests run from the source folder).
TEST(Hyp, ShippedFilesHoldTheReferenceValues) {
  const Hyp low = load_hyp("data/hyps/hyp.scratch-low.yaml");
  EXPECT_EQ(low.values(), Hyp().values());
  const Hyp med = load_hyp("data/hyps/hyp.scratch-med.yaml");
  const Hyp high = load_hyp("data/hyps/hyp.scratch-high.yaml");
  for (const Hyp* h : {&med, &high}) {
    EXPECT_EQ(h->lrf, 0.1);
    EXPECT_EQ(h->cls, 0.3);
    EXPECT_EQ(h->obj, 0.7);
    EXPECT_EQ(h->scale, 0.9);
    EXPECT_EQ(h->mixup, 0.1);
  }
  EXPECT_EQ(med.copy_paste, 0.0);
  EXPECT_EQ(high.copy_paste, 0.1);
}

// `anchors` (hyp.Objects365, hyp.VOC) is read, kept through hyp.yaml and checkpoints (values()),
// and absent from both when not set, as from the reference's dicts.
TEST(Hyp, AnchorsKeyOnlyWhereSet) {
  EXPECT_EQ(Hyp().values().count("anchors"), 0u);
  EXPECT_EQ(Hyp().to_yaml().find("anchors"), std::string::npos);
  const Hyp voc = load_hyp("data/hyps/hyp.VOC.yaml");
  EXPECT_EQ(voc.anchors, 3.412);
  EXPECT_EQ(voc.anchor_t, 3.3744);
  EXPECT_EQ(voc.values().at("anchors"), 3.412);
  EXPECT_EQ(parse_hyp(voc.to_yaml(), "back.yaml").values(), voc.values());
  EXPECT_EQ(load_hyp("data/hyps/hyp.Objects365.yaml").anchors, 3.2);
  EXPECT_THROW(parse_hyp("anchors: 0.2\n", "h.yaml"), Error);
  EXPECT_THROW(parse_hyp("anchors: 100\n", "h.yaml"), Error);
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
