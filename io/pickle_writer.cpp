#include "io/pickle_writer.h"

#include <bit>
#include <map>
#include <set>

#include "base/error.h"

namespace kestrel::pickle {
namespace {

NodePtr make(Node::Kind kind) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  return n;
}

constexpr size_t kBatch = 1000;  // items per APPENDS / SETITEMS, as Python's pickler batches them

class Pickler {
 public:
  std::string run(const NodePtr& root) {
    out_ += "\x80\x02";
    write(root);
    out_ += '.';
    return std::move(out_);
  }

 private:
  void le(uint64_t v, int width) {
    for (int i = 0; i < width; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  void put_memo() {  // BINPUT / LONG_BINPUT of the value on top of the stack
    const uint64_t index = next_memo_++;
    if (index < 256) {
      out_ += 'q';
      le(index, 1);
    } else {
      out_ += 'r';
      le(index, 4);
    }
  }
  void get_memo(uint64_t index) {
    if (index < 256) {
      out_ += 'h';
      le(index, 1);
    } else {
      out_ += 'j';
      le(index, 4);
    }
  }
  void memoize(const Node* n) {
    memo_[n] = next_memo_;
    put_memo();
  }

  void write_int(int64_t i) {
    if (i >= 0 && i < 256) {
      out_ += 'K';
      le(static_cast<uint64_t>(i), 1);
    } else if (i >= 0 && i < 65536) {
      out_ += 'M';
      le(static_cast<uint64_t>(i), 2);
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      out_ += 'J';
      le(static_cast<uint32_t>(static_cast<int32_t>(i)), 4);
    } else {  // LONG1: the shortest little-endian two's complement
      std::string bytes;
      const uint64_t u = static_cast<uint64_t>(i);
      for (int n = 1; n <= 8; ++n) {
        const int64_t low = static_cast<int64_t>(u << (64 - 8 * n)) >> (64 - 8 * n);  // sign-extended n bytes
        if (low == i || n == 8) {
          for (int b = 0; b < n; ++b) bytes.push_back(static_cast<char>((u >> (8 * b)) & 0xFF));
          break;
        }
      }
      out_ += '\x8a';
      le(bytes.size(), 1);
      out_ += bytes;
    }
  }

  void write_text(const Node& n) {
    // Equal strings share one memo entry (Python's pickler memoizes its interned strings alike).
    std::map<std::string, uint64_t>& memo = n.kind == Node::Kind::String ? strings_ : bytes_;
    if (auto it = memo.find(n.text); it != memo.end()) return get_memo(it->second);
    if (n.kind == Node::Kind::String) {
      out_ += 'X';
      le(n.text.size(), 4);
    } else if (n.text.size() < 256) {
      out_ += 'C';
      le(n.text.size(), 1);
    } else {
      out_ += 'B';
      le(n.text.size(), 4);
    }
    out_ += n.text;
    memo[n.text] = next_memo_;
    put_memo();
  }

  void write_global(const Node& n) {
    if (auto it = globals_.find(n.text); it != globals_.end()) return get_memo(it->second);
    const size_t dot = n.text.rfind('.');
    KESTREL_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < n.text.size() &&
                      n.text.find('\n') == std::string::npos,
                  "pickle writer: the global '", n.text, "' is not 'module.name'");
    out_ += 'c';
    out_ += n.text.substr(0, dot) + "\n" + n.text.substr(dot + 1) + "\n";
    globals_[n.text] = next_memo_;
    put_memo();
  }

  void write_items(const Node& n) {  // a list's items, after EMPTY_LIST
    for (size_t at = 0; at < n.items.size(); at += kBatch) {
      const size_t end = std::min(n.items.size(), at + kBatch);
      if (end - at == 1) {
        write(n.items[at]);
        out_ += 'a';
        continue;
      }
      out_ += '(';
      for (size_t i = at; i < end; ++i) write(n.items[i]);
      out_ += 'e';
    }
  }
  void write_entries(const Node& n) {  // a dict's members, after it is on the stack
    for (size_t at = 0; at < n.entries.size(); at += kBatch) {
      const size_t end = std::min(n.entries.size(), at + kBatch);
      if (end - at == 1) {
        write(n.entries[at].first);
        write(n.entries[at].second);
        out_ += 's';
        continue;
      }
      out_ += '(';
      for (size_t i = at; i < end; ++i) {
        write(n.entries[i].first);
        write(n.entries[i].second);
      }
      out_ += 'u';
    }
  }
  void write_tuple(const Node& n) {
    const size_t size = n.items.size();
    if (size == 0) {
      out_ += ')';
    } else if (size <= 3) {
      for (const NodePtr& item : n.items) write(item);
      out_ += static_cast<char>(0x84 + size);  // TUPLE1..3
    } else {
      out_ += '(';
      for (const NodePtr& item : n.items) write(item);
      out_ += 't';
    }
    memoize(&n);
  }
  void write_callable(const Node& n) {
    const char* what = n.kind == Node::Kind::Call ? "call" : "new object";
    KESTREL_CHECK(n.callee && n.callee->kind == Node::Kind::Global, "pickle writer: a ", what, " of no global");
    KESTREL_CHECK(n.args && n.args->kind == Node::Kind::Tuple, "pickle writer: a ", what, " of ", n.callee->text,
                  " whose arguments are no tuple");
    write(n.callee);
    write(n.args);
    out_ += n.kind == Node::Kind::Call ? 'R' : '\x81';
    memoize(&n);
    if (n.state) {
      write(n.state);
      out_ += 'b';
    }
  }

  void write(const NodePtr& p) {
    KESTREL_CHECK(p != nullptr, "pickle writer: a null node");
    const Node& n = *p;
    switch (n.kind) {
      case Node::Kind::None: out_ += 'N'; return;
      case Node::Kind::Bool: out_ += n.boolean ? '\x88' : '\x89'; return;
      case Node::Kind::Int: write_int(n.integer); return;
      case Node::Kind::Float: {
        out_ += 'G';
        const uint64_t bits = std::bit_cast<uint64_t>(n.real);
        for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
        return;
      }
      case Node::Kind::String:
      case Node::Kind::Bytes: write_text(n); return;
      case Node::Kind::Global: write_global(n); return;
      default: break;
    }
    if (auto it = memo_.find(&n); it != memo_.end()) return get_memo(it->second);
    KESTREL_CHECK(open_.insert(&n).second, "pickle writer: a tuple or object contains itself before it exists; ",
                  "pickle cannot write that cycle");
    switch (n.kind) {
      case Node::Kind::List:
        out_ += ']';
        memoize(&n);
        write_items(n);
        break;
      case Node::Kind::Tuple: write_tuple(n); break;
      case Node::Kind::Dict:
        out_ += '}';
        memoize(&n);
        write_entries(n);
        break;
      case Node::Kind::OrderedDict:
        write(ordered_dict_global_);
        out_ += ")R";
        memoize(&n);
        write_entries(n);
        break;
      case Node::Kind::Call:
      case Node::Kind::New: write_callable(n); break;
      case Node::Kind::PersistentId:
        KESTREL_CHECK(n.id != nullptr, "pickle writer: a persistent id without its id");
        write(n.id);
        out_ += 'Q';
        break;
      default: KESTREL_FAIL("pickle writer: a node of unknown kind");
    }
    open_.erase(&n);
  }

  std::string out_;
  uint64_t next_memo_ = 0;
  std::map<const Node*, uint64_t> memo_;
  std::map<std::string, uint64_t> strings_, bytes_, globals_;
  std::set<const Node*> open_;
  NodePtr ordered_dict_global_ = global("collections.OrderedDict");
};

}  // namespace

Node& Node::set(const std::string& key, NodePtr value) {
  KESTREL_CHECK(kind == Kind::Dict || kind == Kind::OrderedDict, "pickle writer: set('", key, "') on no dict");
  entries.emplace_back(str(key), std::move(value));
  return *this;
}

NodePtr none() { return make(Node::Kind::None); }
NodePtr boolean(bool b) {
  NodePtr n = make(Node::Kind::Bool);
  n->boolean = b;
  return n;
}
NodePtr integer(int64_t i) {
  NodePtr n = make(Node::Kind::Int);
  n->integer = i;
  return n;
}
NodePtr real(double d) {
  NodePtr n = make(Node::Kind::Float);
  n->real = d;
  return n;
}
NodePtr str(std::string s) {
  NodePtr n = make(Node::Kind::String);
  n->text = std::move(s);
  return n;
}
NodePtr bytes(std::string b) {
  NodePtr n = make(Node::Kind::Bytes);
  n->text = std::move(b);
  return n;
}
NodePtr list(std::vector<NodePtr> items) {
  NodePtr n = make(Node::Kind::List);
  n->items = std::move(items);
  return n;
}
NodePtr tuple(std::vector<NodePtr> items) {
  NodePtr n = make(Node::Kind::Tuple);
  n->items = std::move(items);
  return n;
}
NodePtr dict(std::vector<std::pair<NodePtr, NodePtr>> entries) {
  NodePtr n = make(Node::Kind::Dict);
  n->entries = std::move(entries);
  return n;
}
NodePtr ordered_dict(std::vector<std::pair<NodePtr, NodePtr>> entries) {
  NodePtr n = make(Node::Kind::OrderedDict);
  n->entries = std::move(entries);
  return n;
}
NodePtr global(const std::string& qualified_name) {
  NodePtr n = make(Node::Kind::Global);
  n->text = qualified_name;
  return n;
}
NodePtr call(NodePtr callee, NodePtr args, NodePtr state) {
  NodePtr n = make(Node::Kind::Call);
  n->callee = std::move(callee);
  n->args = std::move(args);
  n->state = std::move(state);
  return n;
}
NodePtr new_object(NodePtr cls, NodePtr args, NodePtr state) {
  NodePtr n = make(Node::Kind::New);
  n->callee = std::move(cls);
  n->args = std::move(args);
  n->state = std::move(state);
  return n;
}
NodePtr persistent_id(NodePtr id) {
  NodePtr n = make(Node::Kind::PersistentId);
  n->id = std::move(id);
  return n;
}

std::string dump(const NodePtr& root) { return Pickler().run(root); }

}  // namespace kestrel::pickle
