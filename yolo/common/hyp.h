// Training hyperparameters in the reference's hyp yaml format. The defaults are the reference's
// hyp.scratch-low.yaml; a user's file must set every key it has (unknown keys are refused so a
// typo never goes unnoticed), and keys it leaves out keep these defaults.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kestrel::yolo {

struct Hyp {
  // optimizer and schedule
  double lr0 = 0.01, lrf = 0.01, momentum = 0.937, weight_decay = 0.0005;
  double warmup_epochs = 3.0, warmup_momentum = 0.8, warmup_bias_lr = 0.1;
  // loss
  double box = 0.05, cls = 0.5, cls_pw = 1.0, obj = 1.0, obj_pw = 1.0;
  double iou_t = 0.20, anchor_t = 4.0, fl_gamma = 0.0;
  // Anchors per output level, replacing the model yaml's (rounded; AutoAnchor then computes them),
  // as the reference's optional `anchors` key (hyp.Objects365, hyp.VOC). 0: not set, and then
  // absent from values() and hyp.yaml as from the reference's.
  double anchors = 0.0;
  double label_smoothing = 0.0;  // set from --label-smoothing, not a hyp-file key in the reference
  // augmentation
  double hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  double degrees = 0.0, translate = 0.1, scale = 0.5, shear = 0.0, perspective = 0.0;
  double flipud = 0.0, fliplr = 0.5, mosaic = 1.0, mixup = 0.0, copy_paste = 0.0;

  // name -> value of every key (for checkpoints and checks).
  std::map<std::string, double> values() const;
  // The keys the reference's hyp dict holds (label_smoothing is an option there, not a hyp key),
  // in its file order, as its `hyperparameters:` line lists them.
  std::vector<std::pair<std::string, double>> in_file_order() const;
  // One key's value by its name in the hyp file; an unknown name is an error naming it.
  double get(const std::string& key) const;
  void set(const std::string& key, double value);
  // The reference's hyp.yaml text of these values.
  std::string to_yaml() const;
};

Hyp load_hyp(const std::string& path);
Hyp parse_hyp(const std::string& yaml_text, const std::string& source_name);

}  // namespace kestrel::yolo
