#include "yolo/common/hyp.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "base/error.h"
#include "yolo/common/yaml_load.h"

namespace kestrel::yolo {
namespace {

// Every key with its field, in the reference's order.
std::vector<std::pair<const char*, double Hyp::*>> fields() {
  return {{"lr0", &Hyp::lr0},
          {"lrf", &Hyp::lrf},
          {"momentum", &Hyp::momentum},
          {"weight_decay", &Hyp::weight_decay},
          {"warmup_epochs", &Hyp::warmup_epochs},
          {"warmup_momentum", &Hyp::warmup_momentum},
          {"warmup_bias_lr", &Hyp::warmup_bias_lr},
          {"box", &Hyp::box},
          {"cls", &Hyp::cls},
          {"cls_pw", &Hyp::cls_pw},
          {"obj", &Hyp::obj},
          {"obj_pw", &Hyp::obj_pw},
          {"iou_t", &Hyp::iou_t},
          {"anchor_t", &Hyp::anchor_t},
          {"anchors", &Hyp::anchors},
          {"fl_gamma", &Hyp::fl_gamma},
          {"hsv_h", &Hyp::hsv_h},
          {"hsv_s", &Hyp::hsv_s},
          {"hsv_v", &Hyp::hsv_v},
          {"degrees", &Hyp::degrees},
          {"translate", &Hyp::translate},
          {"scale", &Hyp::scale},
          {"shear", &Hyp::shear},
          {"perspective", &Hyp::perspective},
          {"flipud", &Hyp::flipud},
          {"fliplr", &Hyp::fliplr},
          {"mosaic", &Hyp::mosaic},
          {"mixup", &Hyp::mixup},
          {"copy_paste", &Hyp::copy_paste},
          {"label_smoothing", &Hyp::label_smoothing}};
}

double Hyp::* field_of(const std::string& key) {
  for (const auto& [name, field] : fields())
    if (key == name) return field;
  KESTREL_FAIL("unknown hyperparameter '", key, "'; the reference's keys are lr0, lrf, momentum, ... "
               "(see hyp.scratch-low.yaml)");
}

}  // namespace

double Hyp::get(const std::string& key) const { return this->*field_of(key); }
void Hyp::set(const std::string& key, double value) { this->*field_of(key) = value; }

std::map<std::string, double> Hyp::values() const {
  std::map<std::string, double> out;
  for (const auto& [name, field] : fields())
    if (field != &Hyp::anchors || anchors > 0) out[name] = this->*field;
  return out;
}

std::vector<std::pair<std::string, double>> Hyp::in_file_order() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, field] : fields())
    if ((field != &Hyp::anchors || anchors > 0) && field != &Hyp::label_smoothing) out.emplace_back(name, this->*field);
  return out;
}

std::string Hyp::to_yaml() const {
  std::ostringstream os;
  for (const auto& [name, field] : fields())
    if (field != &Hyp::anchors || anchors > 0) os << name << ": " << this->*field << "\n";
  return os.str();
}

Hyp parse_hyp(const std::string& text, const std::string& source) {
  const YAML::Node root = load_yaml(text, source);
  Hyp hyp;
  if (root.IsNull()) return hyp;
  KESTREL_CHECK(root.IsMap(), source, ": a hyp file maps names to numbers (lr0: 0.01, ...)");
  const auto all = fields();
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    double Hyp::*field = nullptr;
    for (const auto& [name, f] : all)
      if (key == name) field = f;
    KESTREL_CHECK(field, source, ": unknown hyperparameter '", key,
                  "'; the reference's keys are lr0, lrf, momentum, ... (see hyp.scratch-low.yaml)");
    try {
      hyp.*field = kv.second.as<double>();
    } catch (const YAML::Exception&) {
      KESTREL_FAIL(source, ": '", key, "' must be a number");
    }
  }
  for (const auto& [name, value] : hyp.values()) {
    KESTREL_CHECK(std::isfinite(value), source, ": '", name, "' must be a finite number, got ", value);
    KESTREL_CHECK(value >= 0, source, ": '", name, "' must not be negative, got ", value);
  }
  KESTREL_CHECK(hyp.anchors == 0 || (hyp.anchors >= 0.5 && hyp.anchors < 64.5), source,
                ": 'anchors' is the anchor count per output level, 1 to 64 once rounded (0: the model "
                "yaml's), got ", hyp.anchors);
  return hyp;
}

Hyp load_hyp(const std::string& path) {
  std::ifstream in(path);
  KESTREL_CHECK(in, "cannot read hyperparameters '", path, "': check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hyp(ss.str(), path);
}

}  // namespace kestrel::yolo
