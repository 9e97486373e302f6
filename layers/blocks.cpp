#include "layers/blocks.h"

#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/pool.h"
#include "engine/ops/upsample.h"

namespace kestrel::layers {

Bottleneck::Bottleneck(int64_t c1, int64_t c2, bool shortcut, double e, Generator& gen)
    : add(shortcut && c1 == c2) {
  const auto hidden = static_cast<int64_t>(c2 * e);
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, hidden, 1, 1, std::nullopt, gen));
  cv2 = register_module("cv2", std::make_shared<Conv>(hidden, c2, 3, 1, std::nullopt, gen));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor y = cv2->forward(cv1->forward(x));
  return add ? ops::add(x, y) : y;
}

C3::C3(int64_t c1, int64_t c2, int64_t n, bool shortcut, Generator& gen) {
  const auto hidden = static_cast<int64_t>(c2 * 0.5);
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, hidden, 1, 1, std::nullopt, gen));
  cv2 = register_module("cv2", std::make_shared<Conv>(c1, hidden, 1, 1, std::nullopt, gen));
  cv3 = register_module("cv3", std::make_shared<Conv>(2 * hidden, c2, 1, 1, std::nullopt, gen));
  m = register_module("m", std::make_shared<Sequential>());
  for (int64_t i = 0; i < n; ++i)
    m->append(std::make_shared<Bottleneck>(hidden, hidden, shortcut, 1.0, gen));
}

Tensor C3::forward(const Tensor& x) {
  return cv3->forward(ops::concat({m->forward(cv1->forward(x)), cv2->forward(x)}, -1));
}

SPPF::SPPF(int64_t c1, int64_t c2, int64_t k, Generator& gen) {
  const int64_t hidden = c1 / 2;
  cv1 = register_module("cv1", std::make_shared<Conv>(c1, hidden, 1, 1, std::nullopt, gen));
  cv2 = register_module("cv2", std::make_shared<Conv>(hidden * 4, c2, 1, 1, std::nullopt, gen));
  m = register_module("m", std::make_shared<MaxPool2d>(k, 1, k / 2));
}

Tensor SPPF::forward(const Tensor& x) {
  Tensor a = cv1->forward(x);
  Tensor b = m->forward(a);
  Tensor c = m->forward(b);
  return cv2->forward(ops::concat({a, b, c, m->forward(c)}, -1));
}

Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, kernel, stride, padding); }

Tensor Upsample::forward(const Tensor& x) { return ops::upsample_nearest2x(x); }

Tensor Concat::forward(const std::vector<Tensor>& xs) { return ops::concat(xs, -1); }

}  // namespace kestrel::layers
