// The restricted unpickler on hand-written pickles: protocol-2 opcodes give the values Python
// would build, calls become records, and every global not on the caller's list is refused by
// name before it could run (os.system, builtins.eval, posix.system, anything unknown).
#include "io/pickle.h"

#include <chrono>

#include "tests/support/testing.h"

namespace {

using kestrel::pickle::Value;
using namespace std::string_literals;
using kestrel::testing::error_of;

bool only_ordered_dict(const std::string& name) { return name == "collections.OrderedDict"; }

kestrel::pickle::Document parse(const std::string& body) {
  return kestrel::pickle::parse("\x80\x02" + body + ".", only_ordered_dict, "t.pkl");
}

std::string parse_error(const std::string& body) { return error_of([&] { parse(body); }); }

TEST(Pickle, ReadsScalarsAndContainers) {
  // {'a': [1, -2, 300, 70000, 1.5, True, None, 'xy', b'\x00'], 'b': (1, 2), 'c': 2**40}
  const std::string body = std::string("}q\x00(X\x01\x00\x00\x00"s "a]q\x01(K\x01J\xfe\xff\xff\xffM,\x01J\x70\x11\x01\x00"s) +
                           "G\x3f\xf8\x00\x00\x00\x00\x00\x00\x88NX\x02\x00\x00\x00xyC\x01"s + std::string(1, '\0') +
                           "eX\x01\x00\x00\x00"s "bK\x01K\x02\x86X\x01\x00\x00\x00"s "c\x8a\x06\x00\x00\x00\x00\x00\x01u"s;
  const auto doc = parse(body);
  const Value& root = doc.root();
  ASSERT_TRUE(root.is(Value::Kind::Dict));
  const Value* a = root.find("a");
  ASSERT_TRUE(a && a->is(Value::Kind::List));
  ASSERT_EQ(a->items.size(), 9u);
  EXPECT_EQ(a->items[0]->integer, 1);
  EXPECT_EQ(a->items[1]->integer, -2);
  EXPECT_EQ(a->items[2]->integer, 300);
  EXPECT_EQ(a->items[3]->integer, 70000);
  EXPECT_EQ(a->items[4]->real, 1.5);
  EXPECT_TRUE(a->items[5]->boolean);
  EXPECT_TRUE(a->items[6]->is(Value::Kind::None));
  EXPECT_EQ(a->items[7]->text, "xy");
  EXPECT_TRUE(a->items[8]->is(Value::Kind::Bytes));
  EXPECT_EQ(a->items[8]->text, std::string(1, '\0'));
  const Value* b = root.find("b");
  ASSERT_TRUE(b && b->is(Value::Kind::Tuple) && b->items.size() == 2);
  EXPECT_EQ(b->items[1]->integer, 2);
  EXPECT_EQ(root.find("c")->integer, int64_t{1} << 40);
  EXPECT_EQ(root.find("missing"), nullptr);
}

TEST(Pickle, NegativeLongsAndMemoSharing) {
  // x = [-1 (LONG1, one byte 0xff)]; (x, x) through the memo
  const auto doc = parse(std::string("]q\x00\x8a\x01\xff"s "ah\x00\x86"s));
  const Value& t = doc.root();
  ASSERT_EQ(t.items.size(), 2u);
  EXPECT_EQ(t.items[0], t.items[1]);  // one object, as Python shares it
  EXPECT_EQ(t.items[0]->items[0]->integer, -1);
}

TEST(Pickle, CallsOfAllowedGlobalsBecomeRecords) {
  // OrderedDict() then SETITEM 'k': 1, then BUILD with a state dict
  const auto doc = parse("ccollections\nOrderedDict\n)RX\x01\x00\x00\x00kK\x01s}b"s);
  const Value& r = doc.root();
  ASSERT_TRUE(r.is(Value::Kind::Object));
  EXPECT_TRUE(r.is_call("collections.OrderedDict"));
  EXPECT_TRUE(r.args->items.empty());
  EXPECT_EQ(r.find("k")->integer, 1);
  ASSERT_NE(r.state, nullptr);
  EXPECT_TRUE(r.state->is(Value::Kind::Dict));
}

TEST(Pickle, RefusesEveryGlobalNotOnTheList) {
  for (const char* global : {"os\nsystem\n", "builtins\neval\n", "posix\nsystem\n", "__builtin__\nexec\n",
                             "subprocess\nPopen\n", "models.yolo\nEvil\n"}) {
    std::string name = global;
    name[name.find('\n')] = '.';
    name.pop_back();
    const std::string e = parse_error(std::string("c") + global + "X\x02\x00\x00\x00idq\x00\x85R"s);
    EXPECT_NE(e.find("the pickle names the global '" + name + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("refused"), std::string::npos) << e;
  }
}

TEST(Pickle, RefusesCallsOfNonGlobalsAndBuildOnPlainValues) {
  EXPECT_NE(parse_error("ccollections\nOrderedDict\nK\x01R").find("REDUCE with arguments that are no tuple"), std::string::npos);
  EXPECT_NE(parse_error("K\x01)R").find("REDUCE calls a int"), std::string::npos);
  EXPECT_NE(parse_error("]}b").find("BUILD on a list"), std::string::npos);
}

TEST(Pickle, RefusesWhatTorchSaveNeverWrites) {
  EXPECT_NE(error_of([] { kestrel::pickle::parse("\x80\x04K\x01.", only_ordered_dict, "t"); }).find("protocol 4"),
            std::string::npos);
  EXPECT_NE(parse_error("I1\n").find("opcode 0x49"), std::string::npos);  // protocol 0's text INT
  EXPECT_NE(parse_error("\x8a\x09" + std::string(9, '\1')).find("integers of up to 64 bits"), std::string::npos);
  EXPECT_NE(parse_error("X\x02\x00\x00\x00\xff\xfe"s).find("not valid UTF-8"), std::string::npos);
}

TEST(Pickle, RefusesMalformedInput) {
  EXPECT_NE(parse_error("h\x05").find("memo entry 5 is read before it is written"), std::string::npos);
  EXPECT_NE(parse_error("0").find("pops an empty stack"), std::string::npos);
  EXPECT_NE(parse_error("K\x01K\x02").find("unbalanced stack"), std::string::npos);
  EXPECT_NE(parse_error("(K\x01").find("unbalanced stack"), std::string::npos);
  EXPECT_NE(parse_error("X\xff\x00\x00\x00"s "ab").find("runs past the end"), std::string::npos);
  EXPECT_NE(error_of([] { kestrel::pickle::parse("\x80\x02K\x01", only_ordered_dict, "t"); }).find("runs past the end"),
            std::string::npos);
  EXPECT_NE(error_of([] { kestrel::pickle::parse("\x80\x02K\x01.K", only_ordered_dict, "t"); }).find("follow the STOP"),
            std::string::npos);
}

TEST(Pickle, ACyclicListIsHeldWithoutLeaking) {
  // x = []; x.append(x): the document owns every value, so the cycle is no leak (ASan checks)
  const auto doc = parse("]q\x00h\x00"s "a");
  EXPECT_EQ(doc.root().items[0], &doc.root());
}

}  // namespace

// Millions of one-byte values (a 10 MB pickle of a 10^7-element list took 1.7 GB before the caller
// could see it was a list, issue 42): refused past 2,000,000 objects, quickly, naming the limit.
TEST(Pickle, AFileOfMillionsOfObjectsIsRefusedBeforeItTakesGigabytes) {
  std::string many = "\x80\x02](";
  for (int i = 0; i < 2'100'000; ++i) many += "N";
  many += "e.";
  const auto start = std::chrono::steady_clock::now();
  const std::string e = kestrel::testing::error_of([&] { kestrel::pickle::parse(many, [](const std::string&) { return false; }, "big.pkl"); });
  EXPECT_NE(e.find("big.pkl: not a pickle Kestrel can read: it holds more than 2000000 objects"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}
