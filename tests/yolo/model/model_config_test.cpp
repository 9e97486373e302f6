// The model yaml parser: the shipped files, the structure checks and their messages.
#include "yolo/model/model_config.h"

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

const char* kTiny = R"(
nc: 3
depth_multiple: 0.33
width_multiple: 0.25
anchors:
  - [10,13, 16,30, 33,23]
backbone:
  [[-1, 1, Conv, [64, 3, 2]],
   [-1, 3, C3, [64]],
  ]
head:
  [[[-1, 0], 1, Concat, [1]],
   [[2], 1, Detect, [nc, anchors]],
  ]
)";

// kTiny with one piece of text replaced.
std::string tiny_with(const std::string& from, const std::string& to) {
  std::string yaml = kTiny;
  yaml.replace(yaml.find(from), from.size(), to);
  return yaml;
}

std::string error_of(const std::string& yaml) {
  try {
    parse_model_config(yaml, "bad.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelConfig, ParsesRowsAndAnchors) {
  ModelConfig c = parse_model_config(kTiny, "dir/tiny.yaml");
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.nc, 3);
  EXPECT_DOUBLE_EQ(c.depth_multiple, 0.33);
  ASSERT_EQ(c.anchors.size(), 1u);
  EXPECT_EQ(c.anchors_per_level, 3);
  ASSERT_EQ(c.rows.size(), 4u);
  EXPECT_EQ(c.rows[1].module, "C3");
  EXPECT_EQ(c.rows[1].number, 3);
  EXPECT_EQ(c.rows[2].from, (std::vector<int>{-1, 0}));
  EXPECT_TRUE(c.rows[2].from_is_list);
  EXPECT_EQ(c.rows[3].args[0].text, "nc");
}

TEST(ModelConfig, LoadsEveryShippedModel) {
  for (const char* size : {"n", "s", "m", "l", "x"}) {
    ModelConfig p5 = load_model_config(std::string("models/yolov5") + size + ".yaml");
    EXPECT_EQ(p5.rows.size(), 25u) << size;
    EXPECT_EQ(p5.anchors.size(), 3u);
    ModelConfig p6 = load_model_config(std::string("models/yolov5") + size + "6.yaml");
    EXPECT_EQ(p6.rows.size(), 34u) << size;
    EXPECT_EQ(p6.anchors.size(), 4u);
  }
}

TEST(ModelConfig, AnchorCountInsteadOfList) {
  std::string yaml = kTiny;
  yaml.replace(yaml.find("anchors:\n  - [10,13, 16,30, 33,23]"),
               std::string("anchors:\n  - [10,13, 16,30, 33,23]").size(), "anchors: 3");
  ModelConfig c = parse_model_config(yaml, "count.yaml");
  EXPECT_TRUE(c.anchors.empty());
  EXPECT_EQ(c.anchors_per_level, 3);
}

TEST(ModelConfig, RefusesBrokenFilesWithTheFileNamed) {
  EXPECT_NE(error_of("nc: [").find("bad.yaml: not valid YAML"), std::string::npos);
  EXPECT_NE(error_of("- 1").find("bad.yaml"), std::string::npos);
  std::string no_nc = kTiny;
  no_nc.replace(no_nc.find("nc: 3"), 5, "");
  EXPECT_NE(error_of(no_nc).find("missing `nc`"), std::string::npos);
  std::string bad_from = kTiny;
  bad_from.replace(bad_from.find("[[2], 1, Detect"), 15, "[[7], 1, Detect");
  EXPECT_NE(error_of(bad_from).find("does not name an earlier layer"), std::string::npos);
  std::string bad_row = kTiny;
  bad_row.replace(bad_row.find("[-1, 3, C3, [64]]"), 17, "[-1, 3, C3]");
  EXPECT_NE(error_of(bad_row).find("backbone row 1 (layer 1)"), std::string::npos);
  std::string odd_anchors = kTiny;
  odd_anchors.replace(odd_anchors.find("33,23]"), 6, "33]");
  EXPECT_NE(error_of(odd_anchors).find("w,h pairs"), std::string::npos);
  EXPECT_THROW(load_model_config("models/no_such_model.yaml"), Error);
}

// A typo that would build a model no machine can hold is refused with the file named; the bounds
// leave every shipped model (LoadsEveryShippedModel) and much larger ones alone.
TEST(ModelConfig, RefusesSizesFarBeyondAnyRealModel) {
  const auto refused = [](const std::string& yaml, const std::string& expected) {
    const std::string msg = error_of(yaml);
    EXPECT_NE(msg.find(expected), std::string::npos) << "expected '" << expected << "' in: " << msg;
  };
  refused(tiny_with("depth_multiple: 0.33", "depth_multiple: 133"), "bad.yaml: depth_multiple 133 is outside (0, 4]");
  refused(tiny_with("width_multiple: 0.25", "width_multiple: 0"), "bad.yaml: width_multiple 0 is outside (0, 4]");
  refused(tiny_with("width_multiple: 0.25", "width_multiple: .nan"), "width_multiple nan is outside");
  // 200 * 0.33 = 66 repeats; 190 * 0.33 = 62.7 -> 63 still passes.
  refused(tiny_with("[-1, 3, C3, [64]]", "[-1, 200, C3, [64]]"),
          "bad.yaml, backbone row 1 (layer 1): `number` 200 gives 66 repeats at depth_multiple 0.33; at most 64");
  EXPECT_NO_THROW(parse_model_config(tiny_with("[-1, 3, C3, [64]]", "[-1, 190, C3, [64]]"), "ok.yaml"));
  // 40000 * 0.25 = 10000 channels; 32768 * 0.25 = 8192 passes.
  refused(tiny_with("[64, 3, 2]", "[40000, 3, 2]"),
          "bad.yaml, backbone row 0 (layer 0): 40000 output channels give 10000 at width_multiple 0.25; at most 8192");
  EXPECT_NO_THROW(parse_model_config(tiny_with("[64, 3, 2]", "[32768, 3, 2]"), "ok.yaml"));
  refused(tiny_with("[-1, 3, C3, [64]]", "[-1, 3, C3, [0]]"), "output channels must be at least 1");
  refused(tiny_with("nc: 3", "nc: 3\nch: 100000"), "bad.yaml: ch 100000 is outside [1, 8192]");
  refused(tiny_with("nc: 3", "nc: 2000000000"), "bad.yaml: nc must be in [1, 100000], got 2000000000");
  refused(tiny_with("anchors:\n  - [10,13, 16,30, 33,23]", "anchors: 1000000000"),
          "bad.yaml: anchors must be in [1, 64] per level, got 1000000000");
  EXPECT_NO_THROW(parse_model_config(tiny_with("depth_multiple: 0.33", "depth_multiple: 4"), "ok.yaml"));
}
