// A pickle is refused with kestrel::Error or parsed, under the globals a YOLOv5 checkpoint may
// name, into a document whose every reachable value is well formed: containers hold values,
// records name an admitted global, and plain values convert to JSON or are refused cleanly.
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz/targets.h"
#include "io/pickle.h"
#include "io/torch_file.h"
#include "yolo/model/pt_checkpoint.h"

namespace kestrel::fuzz {
namespace {

bool admitted(const std::string& name) { return is_torch_global(name) || yolo::is_yolov5_global(name); }

// Visits each value once (the memo shares values and may close cycles).
void check_reachable(const pickle::Value& root) {
  using pickle::Value;
  std::set<const Value*> seen;
  std::vector<const Value*> unvisited = {&root};
  while (!unvisited.empty()) {
    const Value* v = unvisited.back();
    unvisited.pop_back();
    require(v != nullptr, "a null value is reachable");
    if (!seen.insert(v).second) continue;
    if (v->is(Value::Kind::Global) || v->is(Value::Kind::Object))
      require(admitted(v->text), "a record names a global the policy refused");
    if (v->is(Value::Kind::Object)) require(v->args && v->args->is(Value::Kind::Tuple), "a call without argument tuple");
    if (v->is(Value::Kind::PersistentId)) require(v->id != nullptr, "a persistent id without id");
    for (const Value* x : v->items) unvisited.push_back(x);
    for (const auto& [k, x] : v->entries) unvisited.push_back(k), unvisited.push_back(x);
    for (const Value* x : {v->args, v->state, v->id})
      if (x) unvisited.push_back(x);
  }
}

}  // namespace

void pickle(std::string_view input) {
  try {
    const pickle::Document doc = pickle::parse(input, admitted, "fuzz.pkl");
    check_reachable(doc.root());
    try {
      yolo::to_json(doc, doc.root(), "fuzz.pkl");
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
}

}  // namespace kestrel::fuzz
