#include "yolo/model/pt_classifier.h"

#include <string_view>
#include <vector>

#include "base/error.h"

namespace kestrel::yolo {
namespace {

using pickle::Value;

// A record's attribute (its __dict__ entry); nullptr when absent.
const Value* attribute(const Value& record, std::string_view name) {
  return record.is(Value::Kind::Object) && record.state ? record.state->find(name) : nullptr;
}

// A record's child module by name (its _modules entry).
const Value* child(const Value& record, std::string_view name) {
  const Value* modules = attribute(record, "_modules");
  return modules ? modules->find(name) : nullptr;
}

// A module's children in order (an OrderedDict record or a dict).
std::vector<const Value*> children(const Value& record) {
  std::vector<const Value*> out;
  if (const Value* modules = attribute(record, "_modules"))
    for (const auto& entry : modules->entries) out.push_back(entry.second);
  return out;
}

struct Reader {
  const std::string& path;
  std::string where;

  const Value& need_child(const Value& record, std::string_view name) const {
    const Value* c = child(record, name);
    KESTREL_CHECK(c && c->is(Value::Kind::Object), path, ": ", where, " (", record.text, ") has no module '", name,
                  "'; not a YOLOv5 classifier layer");
    return *c;
  }
  int64_t integer(const Value& record, std::string_view name) const {
    const Value* v = attribute(record, name);
    if (v && (v->is(Value::Kind::Tuple) || v->is(Value::Kind::List)) && !v->items.empty()) v = v->items[0];
    KESTREL_CHECK(v && v->is(Value::Kind::Int), path, ": ", where, " (", record.text, ") has no integer '", name, "'");
    return v->integer;
  }
  // A Conv block's [c2, k, s, p].
  std::string conv_args(const Value& conv_block) const {
    const Value& conv = need_child(conv_block, "conv");
    return std::to_string(integer(conv, "out_channels")) + ", " + std::to_string(integer(conv, "kernel_size")) + ", " +
           std::to_string(integer(conv, "stride")) + ", " + std::to_string(integer(conv, "padding"));
  }
  int64_t conv_out(const Value& conv_block) const { return integer(need_child(conv_block, "conv"), "out_channels"); }
};

std::string from_text(const Value* f, const std::string& path, const std::string& where) {
  KESTREL_CHECK(f, path, ": ", where, " has no `f` (its inputs); not a layer of a YOLOv5 model");
  if (f->is(Value::Kind::Int)) return std::to_string(f->integer);
  KESTREL_CHECK(f->is(Value::Kind::List) || f->is(Value::Kind::Tuple), path, ": ", where, "'s `f` is not a layer index");
  std::string s = "[";
  for (size_t i = 0; i < f->items.size(); ++i) {
    KESTREL_CHECK(f->items[i]->is(Value::Kind::Int), path, ": ", where, "'s `f` is not a list of layer indices");
    s += (i ? ", " : "") + std::to_string(f->items[i]->integer);
  }
  return s + "]";
}

}  // namespace

std::string classifier_yaml_from_pt(const Value& model, const std::string& path) {
  const Value* layers = child(model, "model");
  KESTREL_CHECK(layers && layers->is(Value::Kind::Object), path, ": the classifier has no `model` layers");
  const std::vector<const Value*> rows = children(*layers);
  KESTREL_CHECK(!rows.empty() && rows.back() && rows.back()->is_call("models.common.Classify"), path,
                ": the classifier's last layer is not a Classify head");
  std::string backbone, head;
  int64_t nc = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = "layer " + std::to_string(i);
    KESTREL_CHECK(rows[i] && rows[i]->is(Value::Kind::Object), path, ": ", where, " is not a module");
    const Value& m = *rows[i];
    const Reader r{path, where};
    const std::string f = from_text(attribute(m, "f"), path, where);
    std::string line;
    if (m.is_call("models.common.Conv")) {
      line = "[" + f + ", 1, Conv, [" + r.conv_args(m) + "]]";
    } else if (m.is_call("models.common.C3")) {
      const Value& seq = r.need_child(m, "m");
      const std::vector<const Value*> bottlenecks = children(seq);
      KESTREL_CHECK(!bottlenecks.empty() && bottlenecks[0]->is(Value::Kind::Object), path, ": ", where,
                    " (C3) has no bottlenecks");
      const Value* add = attribute(*bottlenecks[0], "add");
      KESTREL_CHECK(add && add->is(Value::Kind::Bool), path, ": ", where, " (C3)'s bottleneck has no `add`");
      line = "[" + f + ", " + std::to_string(bottlenecks.size()) + ", C3, [" + std::to_string(r.conv_out(r.need_child(m, "cv3"))) +
             ", " + (add->boolean ? "True" : "False") + "]]";
    } else if (m.is_call("models.common.SPPF")) {
      line = "[" + f + ", 1, SPPF, [" + std::to_string(r.conv_out(r.need_child(m, "cv2"))) + ", " +
             std::to_string(r.integer(r.need_child(m, "m"), "kernel_size")) + "]]";
    } else if (m.is_call("models.common.Concat")) {
      line = "[" + f + ", 1, Concat, [1]]";
    } else if (m.is_call("torch.nn.modules.upsampling.Upsample")) {
      line = "[" + f + ", 1, nn.Upsample, [None, 2, nearest]]";
    } else if (m.is_call("models.common.Classify")) {
      KESTREL_CHECK(i + 1 == rows.size(), path, ": Classify is layer ", i, " but not the last");
      nc = r.integer(r.need_child(m, "linear"), "out_features");
      head = "  - [" + f + ", 1, Classify, [" + std::to_string(nc) + "]]\n";
      continue;
    } else {
      KESTREL_FAIL(path, ": ", where, " is a ", m.text, ", which Kestrel's classifiers do not build (they build Conv, C3, "
                   "SPPF, Concat, nn.Upsample and Classify)");
    }
    backbone += "  - " + line + "\n";
  }
  return "nc: " + std::to_string(nc) + "\ndepth_multiple: 1.0\nwidth_multiple: 1.0\nanchors: 3\nbackbone:\n" + backbone +
         "head:\n" + head;
}

}  // namespace kestrel::yolo
