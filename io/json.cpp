#include "io/json.h"

#include <charconv>
#include <cmath>

#include "base/error.h"

namespace kestrel::json {

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "a boolean";
    case Value::Kind::Integer: return "an integer";
    case Value::Kind::Real: return "a floating-point number";
    case Value::Kind::String: return "a string";
    case Value::Kind::Array: return "an array";
    case Value::Kind::Object: return "an object";
  }
  return "unknown";
}

namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 when it is malformed.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;  // continuation byte, overlong 2-byte lead (C0/C1) or past U+10FFFF (F5..FF)
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  const uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Value document() {
    skip_whitespace();
    Value v = value(0);
    skip_whitespace();
    if (pos_ != s_.size()) fail("unexpected trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 128;

  [[noreturn]] void fail(const std::string& what) const {
    std::string near;
    if (pos_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      near = c >= 0x20 && c < 0x7F ? str(" (found '", s_[pos_], "')")
                                   : str(" (found byte 0x", std::hex, int(c), ")");
    } else {
      near = " (found the end of the text)";
    }
    KESTREL_FAIL("JSON: ", what, " at byte ", pos_, near);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_whitespace() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c, const char* what) {
    if (peek() != c) fail(str("expected ", what));
    ++pos_;
  }

  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail(str("invalid literal, expected '", word, "'"));
    pos_ += word.size();
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail(str("nesting deeper than ", kMaxDepth, " levels"));
    switch (peek()) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return Value(string_literal());
      case 't': literal("true"); return Value(true);
      case 'f': literal("false"); return Value(false);
      case 'n': literal("null"); return Value();
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return number();
        fail("expected a value");
    }
  }

  Value object(int depth) {
    ++pos_;  // '{'
    Object members;
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return Value(std::move(members));
    }
    while (true) {
      skip_whitespace();
      if (peek() != '"') fail("expected a string key");
      const size_t key_pos = pos_;
      std::string key = string_literal();
      for (const auto& m : members)
        if (m.first == key) {
          pos_ = key_pos;
          fail(str("duplicate key \"", key, "\""));
        }
      skip_whitespace();
      expect(':', "':' after an object key");
      skip_whitespace();
      Value v = value(depth + 1);
      members.emplace_back(std::move(key), std::move(v));
      skip_whitespace();
      if (peek() == '}') {
        ++pos_;
        return Value(std::move(members));
      }
      expect(',', "',' or '}' in an object");
    }
  }

  Value array(int depth) {
    ++pos_;  // '['
    Array items;
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return Value(std::move(items));
    }
    while (true) {
      skip_whitespace();
      items.push_back(value(depth + 1));
      skip_whitespace();
      if (peek() == ']') {
        ++pos_;
        return Value(std::move(items));
      }
      expect(',', "',' or ']' in an array");
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_];
      uint32_t d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else fail("invalid hex digit in a \\u escape");
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  std::string string_literal() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("unescaped control character in a string");
      if (c == '\\') {
        ++pos_;
        const char e = peek();
        ++pos_;
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': out_escape(out); break;
          default: --pos_; fail("invalid escape sequence");
        }
        continue;
      }
      const size_t len = utf8_sequence_length(s_, pos_);
      if (len == 0) fail("invalid UTF-8 in a string");
      out.append(s_.substr(pos_, len));
      pos_ += len;
    }
  }

  // After "\u": one code unit, or a surrogate pair written as two escapes.
  void out_escape(std::string& out) {
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.substr(pos_, 2) != "\\u") fail("high surrogate not followed by a low surrogate");
      pos_ += 2;
      const uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate not followed by a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  Value number() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (digit(peek())) fail("leading zeros are not allowed in numbers");
    } else if (digit(peek())) {
      while (digit(peek())) ++pos_;
    } else {
      fail("expected a digit");
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!digit(peek())) fail("expected a digit after the decimal point");
      while (digit(peek())) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digit(peek())) fail("expected a digit in the exponent");
      while (digit(peek())) ++pos_;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (integral) {
      int64_t i;
      auto [end, ec] = std::from_chars(first, last, i);
      if (ec == std::errc() && end == last) return Value(i);
    }
    // Non-integers and integers beyond int64: a double (from_chars ignores the locale).
    double d;
    auto [end, ec] = std::from_chars(first, last, d);
    if (ec == std::errc::result_out_of_range || !std::isfinite(d)) {
      pos_ = start;
      fail("number out of the range of a double");
    }
    if (ec != std::errc() || end != last) {
      pos_ = start;
      fail("malformed number");
    }
    return Value(d);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

void dump_string(std::string& out, const std::string& s) {
  size_t bad;
  KESTREL_CHECK(valid_utf8(s, &bad), "JSON: cannot write a string that is not valid UTF-8 (bad byte ",
                bad, " of \"", s.substr(0, 40), "\"); JSON text must be UTF-8");
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void dump_into(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Null: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Integer: out += std::to_string(v.as_integer()); return;
    case Value::Kind::Real: {
      const double d = v.as_real();
      KESTREL_CHECK(std::isfinite(d), "JSON: cannot write the non-finite number ", d,
                    "; JSON has no representation for it");
      char buf[32];
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form
      out.append(buf, end);
      // A real written as digits alone ("2", "-0") would read back as an integer, and -0.0 as 0
      // (fuzz/corpus/json/regress-negative-zero-real.json): keep it a real.
      if (std::string_view(buf, end - buf).find_first_not_of("-0123456789") == std::string_view::npos)
        out += ".0";
      return;
    }
    case Value::Kind::String: dump_string(out, v.as_string()); return;
    case Value::Kind::Array: {
      out += '[';
      bool first = true;
      for (const Value& item : v.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_into(out, item);
      }
      out += ']';
      return;
    }
    case Value::Kind::Object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.as_object()) {
        if (!first) out += ',';
        first = false;
        dump_string(out, key);
        out += ':';
        dump_into(out, item);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace

template <class T>
const T& Value::get(Kind want) const {
  const T* p = std::get_if<T>(&v_);
  KESTREL_CHECK(p, "JSON: expected ", kind_name(want), ", got ", kind_name(kind()));
  return *p;
}

bool Value::as_bool() const { return get<bool>(Kind::Bool); }
int64_t Value::as_integer() const { return get<int64_t>(Kind::Integer); }
double Value::as_real() const {
  if (is_integer()) return static_cast<double>(as_integer());
  return get<double>(Kind::Real);
}
const std::string& Value::as_string() const { return get<std::string>(Kind::String); }
const Array& Value::as_array() const { return get<Array>(Kind::Array); }
const Object& Value::as_object() const { return get<Object>(Kind::Object); }

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return &v;
  return nullptr;
}

Value parse(std::string_view text) { return Parser(text).document(); }

std::string dump(const Value& value) {
  std::string out;
  dump_into(out, value);
  return out;
}

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace kestrel::json
