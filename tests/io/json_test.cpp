// The strict JSON reader/writer: values, escapes, UTF-8 and the inputs it must refuse.
#include "io/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "base/error.h"

using namespace kestrel;

namespace {

// The parse error message, or "" when the text parsed.
std::string parse_error(std::string_view text) {
  try {
    json::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST(Json, ParsesEveryKindInDocumentOrder) {
  json::Value v = json::parse(
      " {\"b\": [1, -2, 3.5, 1e3, true, false, null], \"a\": {\"x\": \"y\"}, \"c\": -0.25}\r\n\t");
  const json::Object& o = v.as_object();
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].first, "b");
  EXPECT_EQ(o[1].first, "a");
  EXPECT_EQ(o[2].first, "c");
  const json::Array& b = o[0].second.as_array();
  ASSERT_EQ(b.size(), 7u);
  EXPECT_EQ(b[0].as_integer(), 1);
  EXPECT_EQ(b[1].as_integer(), -2);
  EXPECT_TRUE(b[2].is_real());
  EXPECT_EQ(b[2].as_real(), 3.5);
  EXPECT_TRUE(b[3].is_real());  // an exponent makes a real even when the value is whole
  EXPECT_EQ(b[3].as_real(), 1000.0);
  EXPECT_TRUE(b[4].as_bool());
  EXPECT_FALSE(b[5].as_bool());
  EXPECT_TRUE(b[6].is_null());
  EXPECT_EQ(v.find("a")->find("x")->as_string(), "y");
  EXPECT_EQ(v.find("c")->as_real(), -0.25);
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, IntegersBeyondInt64BecomeReals) {
  EXPECT_EQ(json::parse("9223372036854775807").as_integer(), INT64_MAX);
  EXPECT_EQ(json::parse("-9223372036854775808").as_integer(), INT64_MIN);
  json::Value big = json::parse("9223372036854775808");
  EXPECT_TRUE(big.is_real());
  EXPECT_EQ(big.as_real(), 9223372036854775808.0);
}

TEST(Json, DecodesEscapesAndSurrogatePairs) {
  json::Value v = json::parse(R"("q\" b\\ s\/ \b\f\n\r\t \u00e9 \u20AC \ud83d\ude00")");
  EXPECT_EQ(v.as_string(), "q\" b\\ s/ \b\f\n\r\t \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
}

TEST(Json, WriterRoundTripsAndEscapes) {
  json::Object o;
  o.emplace_back("name \"quoted\"\n\x01", json::Value("caf\xC3\xA9 \\"));
  o.emplace_back("n", json::Array{json::Value(int64_t{-7}), json::Value(0.1), json::Value(true),
                                  json::Value()});
  const std::string text = json::dump(o);
  EXPECT_EQ(text, "{\"name \\\"quoted\\\"\\n\\u0001\":\"caf\xC3\xA9 \\\\\",\"n\":[-7,0.1,true,null]}");
  json::Value back = json::parse(text);
  EXPECT_EQ(back.as_object()[0].first, "name \"quoted\"\n\x01");
  EXPECT_EQ(back.as_object()[0].second.as_string(), "caf\xC3\xA9 \\");
  EXPECT_EQ(back.find("n")->as_array()[1].as_real(), 0.1);
}

// Reals stay reals through a round trip, -0.0 with its sign (found by fuzz/json_target).
TEST(Json, WriterKeepsRealsReal) {
  EXPECT_EQ(json::dump(json::Array{json::Value(2.0), json::Value(-0.0), json::Value(1e300),
                                   json::Value(int64_t{2})}),
            "[2.0,-0.0,1e+300,2]");
  const json::Value back = json::parse(json::dump(json::Value(-0.0)));
  ASSERT_TRUE(back.is_real());
  EXPECT_TRUE(std::signbit(back.as_real()));
}

TEST(Json, WriterRefusesWhatJsonCannotCarry) {
  EXPECT_THROW(json::dump(json::Value(std::string("bad \xFF byte"))), Error);
  EXPECT_THROW(json::dump(json::Value(1.0 / 0.0)), Error);
}

TEST(Json, Utf8Validation) {
  size_t bad = 0;
  EXPECT_TRUE(json::valid_utf8("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(json::valid_utf8("ab\x80", &bad));  // stray continuation byte
  EXPECT_EQ(bad, 2u);
  EXPECT_FALSE(json::valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(json::valid_utf8("\xE0\x80\xAF"));      // overlong, 3 bytes
  EXPECT_FALSE(json::valid_utf8("\xED\xA0\x80"));      // UTF-16 surrogate
  EXPECT_FALSE(json::valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(json::valid_utf8("\xE2\x82"));          // truncated sequence
}

TEST(Json, RefusesMalformedDocuments) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "expected a value"},
      {"{", "expected a string key"},
      {"{\"a\":1,}", "expected a string key"},
      {"[1,]", "expected a value"},
      {"[1 2]", "',' or ']'"},
      {"{\"a\" 1}", "':'"},
      {"{\"a\":1} x", "trailing characters"},
      {"{\"a\":1}{}", "trailing characters"},
      {"{\"a\":1,\"a\":2}", "duplicate key \"a\""},
      {"01", "leading zeros"},
      {"1.", "digit after the decimal point"},
      {"1e", "digit in the exponent"},
      {"-", "expected a digit"},
      {"+1", "expected a value"},
      {"1e999", "out of the range"},
      {"tru", "invalid literal"},
      {"\"abc", "unterminated string"},
      {"\"a\nb\"", "control character"},
      {"\"\\x\"", "invalid escape"},
      {"\"\\u12G4\"", "invalid hex digit"},
      {"\"\\ud800\"", "high surrogate"},
      {"\"\\udc00\"", "lone low surrogate"},
      {"\"\xFF\"", "invalid UTF-8"},
      {"'a'", "expected a value"},
      {"NaN", "expected a value"},
  };
  for (const auto& [text, needle] : cases) {
    const std::string message = parse_error(text);
    EXPECT_TRUE(contains(message, needle)) << "input <" << text << ">: got \"" << message << "\"";
  }
}

TEST(Json, RefusesDeepNestingInsteadOfOverflowingTheStack) {
  std::string deep(100000, '[');
  EXPECT_TRUE(contains(parse_error(deep), "nesting deeper"));
  std::string ok = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(parse_error(ok), "");
}

TEST(Json, TypedAccessNamesBothKinds) {
  json::Value v = json::parse("[1]");
  try {
    v.as_object();
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "expected an object, got an array")) << e.what();
  }
}
