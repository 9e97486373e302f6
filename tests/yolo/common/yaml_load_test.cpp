// Repeated keys are refused at any depth, naming the key and both lines; distinct keys, and the
// same key in different mappings, pass; broken YAML is refused naming the file.
#include "yolo/common/yaml_load.h"

#include <string>

#include "base/error.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::error_of;

namespace {

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(LoadYaml, DistinctKeysAndRepeatsInSeparateMappingsPass) {
  const YAML::Node n = load_yaml("a: 1\nb: {x: 1, y: 2}\nc:\n  - {x: 1}\n  - {x: 2}\n", "ok.yaml");
  EXPECT_EQ(n["b"]["y"].as<int>(), 2);
  EXPECT_EQ(n["c"][1]["x"].as<int>(), 2);
}

TEST(LoadYaml, RepeatedKeysAreRefusedWithTheirLines) {
  const struct {
    const char* text;
    const char* expect;
  } cases[] = {
      {"train: a\nval: b\ntrain: c\n", "d.yaml: key 'train' is given twice (lines 1 and 3)"},
      {"names:\n  0: cat\n  1: dog\n  0: cow\n", "key '0' is given twice (lines 2 and 4)"},
      {"head:\n  - {from: 1, from: 2}\n", "key 'from' is given twice (lines 2 and 2)"},
      {"a: 1\n'a': 2\n", "key 'a' is given twice (lines 1 and 2)"},
  };
  for (const auto& c : cases) {
    const std::string error = error_of([&] { load_yaml(c.text, "d.yaml"); });
    EXPECT_TRUE(mentions(error, c.expect) && mentions(error, "PyYAML")) << c.text << " gave: " << error;
  }
}

// Aliases of aliases name 10^9 leaves here; the check walks each written collection once.
TEST(LoadYaml, NestedAliasesAreWalkedOnce) {
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    text += str("a", i, ": &a", i, " [*a", i - 1);
    for (int k = 1; k < 10; ++k) text += str(", *a", i - 1);
    text += "]\n";
  }
  EXPECT_TRUE(load_yaml(text, "laughs.yaml")["a9"].IsSequence());
  EXPECT_TRUE(mentions(error_of([&] { load_yaml(text + "a3: 1\n", "laughs.yaml"); }), "key 'a3' is given twice"));
}

TEST(LoadYaml, BrokenYamlNamesTheFile) {
  EXPECT_TRUE(mentions(error_of([] { load_yaml("a: [1,\n", "bad.yaml"); }), "bad.yaml: not valid YAML"));
}
