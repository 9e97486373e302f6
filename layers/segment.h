// The instance-segmentation head of YOLOv5 v7.0: Proto, which turns the finest level's features
// into mask prototypes at a quarter of the input's size, and Segment, the Detect head with nm
// mask coefficients per anchor (no = 5 + nc + nm) and a Proto on its first input. A mask is
// sigmoid(coefficients · prototypes), cropped to its box: the loss and the post-processing make it.
//
// Segment is a Detect (layers/detect.h): the same output convolutions, anchors, strides, bias
// priors and decode, so its state-dict names are the reference's ("model.24.anchors",
// "model.24.m.0.weight", then "model.24.proto.cv1.conv.weight", ...).
#pragma once
#include "layers/blocks.h"
#include "layers/detect.h"

namespace kestrel::layers {

// cv3(cv2(upsample(cv1(x)))): Conv(c1, c_, 3), nearest x2, Conv(c_, c_, 3), Conv(c_, c2, 1).
class Proto : public UnaryModule {
 public:
  Proto(int64_t c1, int64_t c_, int64_t c2, Generator& gen);
  // NHWC (batch, h, w, c1) -> (batch, 2h, 2w, c2).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "models.common.Proto"; }

  std::shared_ptr<Conv> cv1;
  std::shared_ptr<Upsample> upsample;
  std::shared_ptr<Conv> cv2, cv3;
};

class Segment : public Detect {
 public:
  // nm: mask coefficients per anchor (and prototypes); npr: Proto's hidden width (the yaml's 256,
  // scaled by the width multiple); ch: input channels per level, the first one feeding Proto.
  Segment(int64_t nc, const std::vector<std::vector<double>>& anchors_px, int64_t nm, int64_t npr,
          const std::vector<int64_t>& ch, Generator& gen);
  std::string type_name() const override { return "models.yolo.Segment"; }

  struct Output {
    std::vector<Tensor> raw;  // per level (batch, na, ny, nx, 5 + nc + nm), as Detect's
    Tensor protos;            // NHWC (batch, 2·ny0, 2·nx0, nm): input size / 4 at stride 8
  };
  // The reference's training-mode forward, (x, p). Detect::forward alone gives the raw outputs
  // without prototypes; Detect::decode gives (batch, N, 5 + nc + nm), boxes decoded, mask
  // coefficients raw, as the reference's eval-mode output (its x[0]).
  Output forward(const std::vector<Tensor>& xs);

  int64_t npr;
  std::shared_ptr<Proto> proto;
};

}  // namespace kestrel::layers
