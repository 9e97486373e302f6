// A restricted unpickler: reads Python pickles of protocol 0-3 opcodes as torch.save writes them
// (protocol 2) into a tree of plain values, and runs no code. Where Python's loader would import
// a global and call it (GLOBAL + REDUCE, NEWOBJ, BUILD), this one only checks the global's name
// against the caller's list and records the call as an Object: callee name, arguments, state,
// items. A global not on the list (os.system, builtins.eval, anything unknown) is refused with a
// message naming it, before anything else is read, so a pickle from a stranger can do no harm.
// Interpreting the records (a tensor, a module) is the caller's business.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel::pickle {

struct Value {
  enum class Kind { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, Global, Object, PersistentId };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;            // String, Bytes; Global and Object: "module.name" of the callee
  std::vector<Value*> items;   // List, Tuple
  std::vector<std::pair<Value*, Value*>> entries;  // Dict; Object: items set on it (OrderedDict)
  Value* args = nullptr;       // Object: the argument tuple of the call
  Value* state = nullptr;      // Object: what BUILD gave it (a module's __dict__), or nullptr
  Value* id = nullptr;         // PersistentId: the id object (torch: a storage's tuple)

  bool is(Kind k) const { return kind == k; }
  // Object or Global whose callee is `name`.
  bool is_call(std::string_view name) const {
    return (kind == Kind::Object || kind == Kind::Global) && text == name;
  }
  // The value under a string key of a Dict (or an Object's items); nullptr when absent.
  const Value* find(std::string_view key) const;
};

const char* kind_name(Value::Kind kind);

// Decides whether a global ("module.name") may appear in a pickle.
using GlobalPolicy = std::function<bool(const std::string& qualified_name)>;

// The parsed pickle: owns every value (shared and even cyclic references are plain pointers
// into it, as the pickle's memo shares them).
class Document {
 public:
  const Value& root() const { return *root_; }

 private:
  friend class Unpickler;
  std::deque<Value> values_;
  Value* root_ = nullptr;
};

// Parses a whole pickle (it must end with STOP and nothing after). `where` names it in errors
// ("yolov5n.pt: archive/data.pkl"). Throws kestrel::Error for a global the policy refuses, an
// opcode outside protocols 0-3's binary set, integers beyond 64 bits, and any malformed input.
Document parse(std::string_view bytes, const GlobalPolicy& allowed, const std::string& where);

}  // namespace kestrel::pickle
