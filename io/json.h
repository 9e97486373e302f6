// A small strict JSON (RFC 8259) value, parser and compact writer, for file headers such as
// safetensors'. Objects keep their members in document order and refuse duplicate keys; strings
// are UTF-8 and checked to be valid; numbers written without fraction or exponent that fit in
// int64 are integers, every other number is a double.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kestrel::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  enum class Kind { Null, Bool, Integer, Real, String, Array, Object };

  Value() = default;
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Array a) : v_(std::move(a)) {}
  Value(Object o) : v_(std::move(o)) {}

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_null() const { return kind() == Kind::Null; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_integer() const { return kind() == Kind::Integer; }
  bool is_real() const { return kind() == Kind::Real; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_array() const { return kind() == Kind::Array; }
  bool is_object() const { return kind() == Kind::Object; }

  // Typed access; a wrong kind throws kestrel::Error naming both kinds.
  bool as_bool() const;
  int64_t as_integer() const;
  double as_real() const;  // integers convert
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;

  // The member named `key` of an object, or null when absent.
  const Value* find(std::string_view key) const;

 private:
  template <class T>
  const T& get(Kind want) const;

  std::variant<std::monostate, bool, int64_t, double, std::string, Array, Object> v_;
};

const char* kind_name(Value::Kind kind);

// Parses a whole document: one value, optionally surrounded by whitespace. Throws kestrel::Error
// naming the byte offset and what was expected. Nesting deeper than 128 levels is refused so a
// hostile document cannot exhaust the stack.
Value parse(std::string_view text);

// Compact text (no whitespace), members in stored order; reals in their shortest round-trip form,
// with ".0" when that has no fraction or exponent, so they read back as reals (-0.0 keeps its
// sign). Throws for non-finite reals and strings that are not valid UTF-8, which JSON cannot carry.
std::string dump(const Value& value);

// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
// On failure *bad_offset (if given) receives the offset of the first bad byte.
bool valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

}  // namespace kestrel::json
