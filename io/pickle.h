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
  // A call of `name` (REDUCE or NEWOBJ): an Object, whose args are always a tuple. A bare Global
  // of that name is no call (a file may put one where a call belongs: it has no arguments to read).
  bool is_call(std::string_view name) const { return kind == Kind::Object && text == name; }
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
  // How many values the pickle made (at most one per opcode): what a walk of the result may be
  // held to, so that values shared over and over (a DAG read as a tree) cannot expand without end.
  size_t value_count() const { return values_.size(); }

 private:
  friend class Unpickler;
  std::deque<Value> values_;
  Value* root_ = nullptr;
};

// A walk of a document's values held to a number of visits: a multiple of the values the pickle
// made (a tree of them is walked once; objects shared by many parents, as a module's SiLU is,
// a few times), past which the file is refused: a handful of shared lists or modules nested a
// few dozen deep would otherwise expand to billions of visits (CPU) or copies (memory).
class WalkBudget {
 public:
  static constexpr size_t kVisitsPerValue = 8;
  WalkBudget(const Document& doc, std::string what)
      : left_(doc.value_count() * kVisitsPerValue + 1024), what_(std::move(what)) {}
  // Counts one visit; throws kestrel::Error naming `what` and the limit once they are used up.
  void visit();

 private:
  size_t left_;
  std::string what_;
};

// Parses a whole pickle (it must end with STOP and nothing after). `where` names it in errors
// ("yolov5n.pt: archive/data.pkl"). Throws kestrel::Error for a global the policy refuses, an
// opcode outside protocols 0-3's binary set, integers beyond 64 bits, and any malformed input.
Document parse(std::string_view bytes, const GlobalPolicy& allowed, const std::string& where);

}  // namespace kestrel::pickle
