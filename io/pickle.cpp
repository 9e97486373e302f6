#include "io/pickle.h"

#include <bit>
#include <cstring>
#include <map>

#include "base/error.h"
#include "io/json.h"

namespace kestrel::pickle {

const Value* Value::find(std::string_view key) const {
  const Value* found = nullptr;  // a later SETITEM of the same key wins, as in Python
  for (const auto& [k, v] : entries)
    if (k->kind == Kind::String && k->text == key) found = v;
  return found;
}

void WalkBudget::visit() {
  KESTREL_CHECK(left_ > 0, what_, " expands past ", kVisitsPerValue, " visits per object the file holds (objects ",
                "shared over and over, nested: a crafted file?); refused");
  --left_;
}

const char* kind_name(Value::Kind kind) {
  static constexpr const char* kNames[] = {"None",  "bool", "int",    "float",  "str",  "bytes",
                                           "list",  "tuple", "dict",  "global", "object", "persistent id"};
  return kNames[static_cast<int>(kind)];
}

constexpr size_t kMaxValues = 2'000'000;

class Unpickler {
 public:
  Unpickler(std::string_view bytes, const GlobalPolicy& allowed, const std::string& where)
      : in_(bytes), allowed_(allowed), where_(where) {}

  Document run() {
    while (true) {
      const size_t at = pos_;
      const uint8_t op = byte();
      if (op == '.') break;
      step(op, at);
    }
    if (pos_ != in_.size()) fail(str(in_.size() - pos_, " bytes follow the STOP opcode"));
    if (!marks_.empty() || stack_.size() != 1) fail("the pickle ends with an unbalanced stack");
    doc_.root_ = stack_.back();
    return std::move(doc_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    KESTREL_FAIL(where_, ": not a pickle Kestrel can read: ", what, " (near byte ", pos_,
                 "); is the file damaged, or not a PyTorch checkpoint?");
  }

  // --- input ---------------------------------------------------------------------------------
  std::string_view take(uint64_t n) {
    if (n > in_.size() - pos_) fail(str("a field of ", n, " bytes runs past the end"));
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint8_t byte() { return static_cast<uint8_t>(take(1)[0]); }
  uint64_t le(int width) {
    const std::string_view s = take(width);
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[i]);
    return v;
  }
  std::string line() {  // GLOBAL's module and name, each ended by a newline
    const size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("a GLOBAL name has no end");
    std::string s(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  // --- the stack -----------------------------------------------------------------------------
  Value* make(Value::Kind kind) {
    // Each value costs about 150 bytes however small its opcode: a pickle of millions of one-byte
    // values would take gigabytes before anything could look at what it holds.
    if (doc_.values_.size() >= kMaxValues)
      fail(str("it holds more than ", kMaxValues, " objects, where a YOLOv5 checkpoint holds a few hundred ",
               "thousand at most"));
    doc_.values_.emplace_back();
    doc_.values_.back().kind = kind;
    return &doc_.values_.back();
  }
  void push(Value* v) { stack_.push_back(v); }
  Value* pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("an opcode pops an empty stack");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("an opcode needs a value and the stack is empty");
    return stack_.back();
  }
  // The values pushed since the last MARK, which is removed.
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK and there is none");
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Value* tuple(std::vector<Value*> items) {
    Value* t = make(Value::Kind::Tuple);
    t->items = std::move(items);
    return t;
  }
  Value* string(Value::Kind kind, std::string_view s) {
    if (kind == Value::Kind::String && !json::valid_utf8(s)) fail("a string is not valid UTF-8");
    Value* v = make(kind);
    v->text = std::string(s);
    return v;
  }
  Value* integer(int64_t i) {
    Value* v = make(Value::Kind::Int);
    v->integer = i;
    return v;
  }
  // LONG1/LONG4: little-endian two's complement of n bytes.
  Value* long_integer(uint64_t n) {
    if (n > 8) fail(str("an integer of ", n, " bytes; Kestrel reads integers of up to 64 bits"));
    const std::string_view s = take(n);
    uint64_t v = 0;
    for (uint64_t i = n; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(s[i]);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(s[n - 1]) & 0x80)) v |= ~uint64_t{0} << (8 * n);
    return integer(static_cast<int64_t>(v));
  }
  void set_items(Value* target, const std::vector<Value*>& kv) {
    if (!target->is(Value::Kind::Dict) && !target->is(Value::Kind::Object))
      fail(str("SETITEM on a ", kind_name(target->kind), ", not a dict"));
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    for (size_t i = 0; i < kv.size(); i += 2) target->entries.emplace_back(kv[i], kv[i + 1]);
  }
  void append(Value* target, const std::vector<Value*>& items) {
    if (!target->is(Value::Kind::List)) fail(str("APPEND on a ", kind_name(target->kind), ", not a list"));
    target->items.insert(target->items.end(), items.begin(), items.end());
  }
  Value* call(Value* callee, Value* args, const char* opcode) {
    if (!callee->is(Value::Kind::Global)) fail(str(opcode, " calls a ", kind_name(callee->kind), ", not a global"));
    if (!args->is(Value::Kind::Tuple)) fail(str(opcode, " with arguments that are no tuple"));
    Value* obj = make(Value::Kind::Object);
    obj->text = callee->text;
    obj->args = args;
    return obj;
  }
  Value* memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(str("memo entry ", index, " is read before it is written"));
    return it->second;
  }

  void step(uint8_t op, size_t at) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = byte();
        if (v > 3) fail(str("protocol ", int(v), "; torch.save writes protocol 2"));
        return;
      }
      case '(': marks_.push_back(stack_.size()); return;                        // MARK
      case '0': pop(); return;                                                  // POP
      case '1': pop_mark(); return;                                             // POP_MARK
      case '2': push(top()); return;                                            // DUP
      case 'N': push(make(Value::Kind::None)); return;                          // NONE
      case 0x88: case 0x89: {                                                   // NEWTRUE, NEWFALSE
        Value* v = make(Value::Kind::Bool);
        v->boolean = op == 0x88;
        push(v);
        return;
      }
      case 'J': push(integer(static_cast<int32_t>(le(4)))); return;            // BININT
      case 'K': push(integer(static_cast<int64_t>(le(1)))); return;            // BININT1
      case 'M': push(integer(static_cast<int64_t>(le(2)))); return;            // BININT2
      case 0x8a: push(long_integer(le(1))); return;                            // LONG1
      case 0x8b: push(long_integer(le(4))); return;                            // LONG4
      case 'G': {                                                              // BINFLOAT (big-endian)
        const std::string_view s = take(8);
        uint64_t bits = 0;
        for (char c : s) bits = (bits << 8) | static_cast<uint8_t>(c);
        Value* v = make(Value::Kind::Float);
        v->real = std::bit_cast<double>(bits);
        push(v);
        return;
      }
      case 'X': case 'T': push(string(Value::Kind::String, take(le(4)))); return;  // BINUNICODE, BINSTRING
      case 'U': push(string(Value::Kind::String, take(le(1)))); return;            // SHORT_BINSTRING
      case 'B': push(string(Value::Kind::Bytes, take(le(4)))); return;             // BINBYTES
      case 'C': push(string(Value::Kind::Bytes, take(le(1)))); return;             // SHORT_BINBYTES
      case ']': push(make(Value::Kind::List)); return;                         // EMPTY_LIST
      case 'a': { Value* v = pop(); append(top(), {v}); return; }              // APPEND
      case 'e': { std::vector<Value*> items = pop_mark(); append(top(), items); return; }  // APPENDS
      case ')': push(tuple({})); return;                                        // EMPTY_TUPLE
      case 't': push(tuple(pop_mark())); return;                                // TUPLE
      case 0x85: case 0x86: case 0x87: {                                        // TUPLE1..3
        std::vector<Value*> items(op - 0x84);
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(tuple(std::move(items)));
        return;
      }
      case '}': push(make(Value::Kind::Dict)); return;                         // EMPTY_DICT
      case 's': { Value* v = pop(); Value* k = pop(); set_items(top(), {k, v}); return; }  // SETITEM
      case 'u': { std::vector<Value*> kv = pop_mark(); set_items(top(), kv); return; }     // SETITEMS
      case 'c': {                                                              // GLOBAL
        const std::string module = line(), name = line();
        const std::string qualified = module + "." + name;
        if (!allowed_(qualified))
          KESTREL_FAIL(where_, ": the pickle names the global '", qualified, "', which no YOLOv5 ",
                       "v7.0 checkpoint uses; refused (Kestrel runs no code from a checkpoint: the ",
                       "file is not a YOLOv5 checkpoint, or was made to run that code when Python ",
                       "loads it; do not load it with torch.load either)");
        Value* g = make(Value::Kind::Global);
        g->text = qualified;
        push(g);
        return;
      }
      case 'R': { Value* args = pop(); Value* f = pop(); push(call(f, args, "REDUCE")); return; }  // REDUCE
      case 0x81: { Value* args = pop(); Value* c = pop(); push(call(c, args, "NEWOBJ")); return; } // NEWOBJ
      case 'b': {                                                              // BUILD
        Value* state = pop();
        Value* obj = top();
        if (!obj->is(Value::Kind::Object)) fail(str("BUILD on a ", kind_name(obj->kind), ", not an object"));
        obj->state = state;
        return;
      }
      case 'Q': {                                                              // BINPERSID
        Value* v = make(Value::Kind::PersistentId);
        v->id = pop();
        push(v);
        return;
      }
      case 'q': memo_[le(1)] = top(); return;                                  // BINPUT
      case 'r': memo_[le(4)] = top(); return;                                  // LONG_BINPUT
      case 'h': push(memo_get(le(1))); return;                                 // BINGET
      case 'j': push(memo_get(le(4))); return;                                 // LONG_BINGET
      default:
        pos_ = at;
        fail(str("opcode 0x", "0123456789abcdef"[op >> 4], "0123456789abcdef"[op & 15],
                 ", which torch.save's protocol 2 pickles do not use"));
    }
  }

  std::string_view in_;
  size_t pos_ = 0;
  const GlobalPolicy& allowed_;
  const std::string& where_;
  Document doc_;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Value*> memo_;
};

Document parse(std::string_view bytes, const GlobalPolicy& allowed, const std::string& where) {
  return Unpickler(bytes, allowed, where).run();
}

}  // namespace kestrel::pickle
