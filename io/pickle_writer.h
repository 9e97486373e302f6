// Writing Python pickles (protocol 2, as torch.save writes its data.pkl) from a small tree of
// values built in C++: None, bool, int, float, str, bytes, list, tuple, dict, OrderedDict, a
// global, an object made by calling a global (REDUCE) or by cls.__new__ (NEWOBJ), with the state
// BUILD gives it, and persistent ids (torch's storage references). A node reached from several
// parents (one SiLU module shared by every Conv, as the reference's Conv.default_act is) is
// written once and referenced from the memo afterwards, so Python's loader rebuilds one shared
// object, as it was. The reader of these pickles is io/pickle.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kestrel::pickle {

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Node {
  enum class Kind { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, OrderedDict, Global, Call, New, PersistentId };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;                                   // String, Bytes; Global: "module.name"
  std::vector<NodePtr> items;                         // List, Tuple
  std::vector<std::pair<NodePtr, NodePtr>> entries;   // Dict, OrderedDict (in order)
  NodePtr callee;                                     // Call: the function; New: the class (Globals)
  NodePtr args;                                       // Call, New: a Tuple
  NodePtr state;                                      // Call, New: what BUILD sets, or null for none
  NodePtr id;                                         // PersistentId: the id object

  // Adds a member to a Dict or OrderedDict (the key a string).
  Node& set(const std::string& key, NodePtr value);
};

// Builders.
NodePtr none();
NodePtr boolean(bool b);
NodePtr integer(int64_t i);
NodePtr real(double d);
NodePtr str(std::string s);
NodePtr bytes(std::string b);
NodePtr list(std::vector<NodePtr> items = {});
NodePtr tuple(std::vector<NodePtr> items = {});
NodePtr dict(std::vector<std::pair<NodePtr, NodePtr>> entries = {});
// collections.OrderedDict(): written as the REDUCE of OrderedDict with no arguments, then its items.
NodePtr ordered_dict(std::vector<std::pair<NodePtr, NodePtr>> entries = {});
// "module.name" (the last dot splits the two).
NodePtr global(const std::string& qualified_name);
// callee(*args) (REDUCE), then BUILD with `state` when given.
NodePtr call(NodePtr callee, NodePtr args, NodePtr state = nullptr);
// cls.__new__(cls, *args) (NEWOBJ), then BUILD with `state` when given: a pickled class instance.
NodePtr new_object(NodePtr cls, NodePtr args, NodePtr state = nullptr);
NodePtr persistent_id(NodePtr id);

// The whole pickle: PROTO 2, the value, STOP. Strings and globals of equal text share one memo
// entry; other nodes are shared when they are the same node. Throws kestrel::Error for a node
// that cannot be written (a Call whose args are no tuple, a global without a module, a cycle).
// Bytes use protocol 3's BINBYTES (Python's loader and io/pickle.h read them under any PROTO).
std::string dump(const NodePtr& root);

}  // namespace kestrel::pickle
