// The reference's composite blocks: Bottleneck, C3 (CSP bottleneck with three convs), SPPF,
// and the wiring layers nn.Upsample (nearest, x2) and Concat (channels).
#pragma once
#include "layers/conv.h"

namespace kestrel::layers {

// x + cv2(cv1(x)) when shortcut and c1 == c2, else cv2(cv1(x)); hidden width c2 * e.
class Bottleneck : public UnaryModule {
 public:
  Bottleneck(int64_t c1, int64_t c2, bool shortcut, double e, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "models.common.Bottleneck"; }

  std::shared_ptr<Conv> cv1, cv2;
  bool add;
};

// cv3(cat(m(cv1(x)), cv2(x))) with n Bottlenecks (e = 1.0) of width c2 / 2.
class C3 : public UnaryModule {
 public:
  C3(int64_t c1, int64_t c2, int64_t n, bool shortcut, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "models.common.C3"; }

  std::shared_ptr<Conv> cv1, cv2, cv3;
  std::shared_ptr<Sequential> m;
};

// Spatial pyramid pooling, fast: three chained k x k stride-1 max pools, concatenated.
class SPPF : public UnaryModule {
 public:
  SPPF(int64_t c1, int64_t c2, int64_t k, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "models.common.SPPF"; }

  std::shared_ptr<Conv> cv1, cv2;
  std::shared_ptr<UnaryModule> m;  // the max pool, a module of its own as in the reference
};

class MaxPool2d : public UnaryModule {
 public:
  MaxPool2d(int64_t k, int64_t s, int64_t p) : kernel(k), stride(s), padding(p) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "torch.nn.modules.pooling.MaxPool2d"; }
  int64_t kernel, stride, padding;
};

class Upsample : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "torch.nn.modules.upsampling.Upsample"; }
};

// Concatenation along channels (the reference's dimension 1 of NCHW, our last of NHWC).
class Concat : public Module {
 public:
  Tensor forward(const std::vector<Tensor>& xs);
  std::string type_name() const override { return "models.common.Concat"; }
};

}  // namespace kestrel::layers
