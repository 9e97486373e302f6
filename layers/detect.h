// The Detect head: one 1x1 Conv2d (with bias) per output level producing na·no channels, no =
// nc + 5 (+ nm mask coefficients for the Segment head, layers/segment.h), reshaped to the
// reference's (batch, na, ny, nx, no) layout, and the inference decode.
#pragma once
#include "layers/conv.h"

namespace kestrel::layers {

// The reference's nn.ModuleList: children named "0", "1", ...
class ModuleList : public Module {
 public:
  void append(std::shared_ptr<Module> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  std::string type_name() const override { return "torch.nn.modules.container.ModuleList"; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

class Detect : public Module {
 public:
  // anchors_px: per level, na (w, h) pairs in pixels; ch: input channels per level; nm: mask
  // coefficients per anchor after the classes (Segment's; 0 for detection).
  Detect(int64_t nc, const std::vector<std::vector<double>>& anchors_px,
         const std::vector<int64_t>& ch, Generator& gen, int64_t nm = 0);
  std::string type_name() const override { return "models.yolo.Detect"; }

  // Raw outputs per level, each (batch, na, ny, nx, no).
  std::vector<Tensor> forward(const std::vector<Tensor>& xs);
  // Decoded boxes of all levels: (batch, Σ na·ny·nx, no) with xywh in input pixels, confidence
  // and classes as probabilities, the nm mask coefficients as they were (the reference's Segment).
  Tensor decode(const std::vector<Tensor>& raw) const;

  // Called once the strides are known: stores anchors in stride units (as the reference) and
  // adds the objectness / class bias priors (8 objects per 640² image, 0.6 / nc class prior).
  void set_strides(const std::vector<double>& strides);
  // Reverses the anchor order when the anchors' areas run against the strides' order.
  bool check_anchor_order();

  int64_t nc, nm, no, nl, na;
  std::vector<double> strides;
  Tensor anchors;  // buffer (nl, na, 2): pixels before set_strides, stride units after
  std::vector<std::shared_ptr<Conv2d>> convs;

 private:
  std::shared_ptr<ModuleList> m_;
};

}  // namespace kestrel::layers
