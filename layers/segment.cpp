#include "layers/segment.h"

namespace kestrel::layers {

Proto::Proto(int64_t c1, int64_t c_, int64_t c2, Generator& gen) {
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, c_, 3, 1, std::nullopt, gen));
  upsample = register_module("upsample", std::make_shared<Upsample>());
  cv2 = register_module("cv2", std::make_shared<Conv>(c_, c_, 3, 1, std::nullopt, gen));
  cv3 = register_module("cv3", std::make_shared<Conv>(c_, c2, 1, 1, std::nullopt, gen));
}

Tensor Proto::forward(const Tensor& x) { return cv3->forward(cv2->forward(upsample->forward(cv1->forward(x)))); }

Segment::Segment(int64_t nc, const std::vector<std::vector<double>>& anchors_px, int64_t nm_,
                 int64_t npr_, const std::vector<int64_t>& ch, Generator& gen)
    : Detect(nc, anchors_px, ch, gen, nm_), npr(npr_) {
  KESTREL_CHECK(nm >= 1 && npr >= 1, "Segment: ", nm, " masks and ", npr,
                " prototype channels; give at least one of each (the reference's are 32 and 256)");
  proto = register_module("proto", std::make_shared<Proto>(ch[0], npr, nm, gen));
}

Segment::Output Segment::forward(const std::vector<Tensor>& xs) {
  KESTREL_CHECK(!xs.empty(), "Segment: expected ", nl, " inputs, got none");
  Output out;
  out.protos = proto->forward(xs[0]);
  out.raw = Detect::forward(xs);
  return out;
}

}  // namespace kestrel::layers
