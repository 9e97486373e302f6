#include "layers/detect.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/ops/concat.h"
#include "engine/ops/launch.h"
#include "kernels/detect.h"

namespace kestrel::layers {

Detect::Detect(int64_t nc_, const std::vector<std::vector<double>>& anchors_px,
               const std::vector<int64_t>& ch, Generator& gen, int64_t nm_)
    : nc(nc_), nm(nm_), no(nc_ + 5 + nm_), nl(static_cast<int64_t>(anchors_px.size())) {
  KESTREL_CHECK(nm >= 0, "Detect: ", nm, " mask coefficients; give 0 or more");
  KESTREL_CHECK(nl > 0 && nl == static_cast<int64_t>(ch.size()), "Detect: ", anchors_px.size(),
                " anchor levels for ", ch.size(), " input layers; give one anchor row per input");
  na = static_cast<int64_t>(anchors_px[0].size() / 2);
  std::vector<float> flat;
  for (const auto& level : anchors_px) {
    KESTREL_CHECK(static_cast<int64_t>(level.size()) == 2 * na,
                  "Detect: every level needs the same number of anchors");
    for (double v : level) flat.push_back(static_cast<float>(v));
  }
  anchors = Tensor::from_vector(flat, {nl, na, 2});
  register_buffer("anchors", &anchors);
  m_ = register_module("m", std::make_shared<ModuleList>());
  for (int64_t c : ch) {
    auto conv = std::make_shared<Conv2d>(c, no * na, 1, 1, 0, /*bias=*/true, gen);
    m_->append(conv);
    convs.push_back(conv);
  }
}

std::vector<Tensor> Detect::forward(const std::vector<Tensor>& xs) {
  KESTREL_CHECK(static_cast<int64_t>(xs.size()) == nl, "Detect: expected ", nl, " inputs, got ",
                xs.size());
  std::vector<Tensor> out;
  for (int64_t i = 0; i < nl; ++i) {
    Tensor y = convs[i]->forward(xs[i]);  // (bs, ny, nx, na*no), channel = a*no + o
    const int64_t bs = y.size(0), ny = y.size(1), nx = y.size(2);
    out.push_back(y.reshape({bs, ny, nx, na, no}).permute({0, 3, 1, 2, 4}).contiguous());
  }
  return out;
}

Tensor Detect::decode(const std::vector<Tensor>& raw) const {
  KESTREL_CHECK(strides.size() == static_cast<size_t>(nl), "Detect::decode before strides are set");
  std::vector<float> anchor_units = anchors.to(Device::cpu()).to_vector<float>();
  std::vector<Tensor> levels;
  for (int64_t i = 0; i < nl; ++i) {
    Tensor r = raw[i].contiguous();
    // bfloat16 would space pixel coordinates 2 px apart from 256 px and 4 px from 512 px, too
    // coarse for the IoU thresholds up to 0.95 that validation scores at: decode in float32.
    if (r.dtype() == DType::BF16) r = r.to(DType::F32);
    kernels::DetectLevelShape s{r.size(0), r.size(1), r.size(2), r.size(3), r.size(4), strides[i]};
    std::vector<float> px(2 * na);
    for (int64_t k = 0; k < 2 * na; ++k)
      px[k] = static_cast<float>(anchor_units[i * 2 * na + k] * strides[i]);
    Tensor out = Tensor::empty_like(r);
    ops::launch(
        r.device(),
        [&] { kernels::detect_decode_cpu(r.dtype(), r.data_ptr(), out.data_ptr(), s, px.data()); },
        [&](cudaStream_t stream) {
          const Tensor px_dev = Tensor::from_vector(px, {2 * na}, r.device());
          kernels::detect_decode_cuda(r.dtype(), r.data_ptr(), out.data_ptr(), s,
                                      px_dev.data<float>(), stream);
        });
    // The decode takes the sigmoid of every channel; mask coefficients stay raw.
    if (nm > 0) out = ops::concat({out.slice(4, 0, no - nm), r.slice(4, no - nm, no).to(out.dtype())}, 4);
    levels.push_back(out.reshape({s.batch, s.na * s.ny * s.nx, s.no}));
  }
  return ops::concat(levels, 1);
}

bool Detect::check_anchor_order() {
  std::vector<float> a = anchors.to(Device::cpu()).to_vector<float>();
  auto mean_area = [&](int64_t level) {
    double sum = 0;
    for (int64_t k = 0; k < na; ++k) sum += a[(level * na + k) * 2] * a[(level * na + k) * 2 + 1];
    return sum / na;
  };
  const double da = mean_area(nl - 1) - mean_area(0);
  const double ds = strides.back() - strides.front();
  if (da == 0 || (da > 0) == (ds > 0)) return false;
  std::vector<float> flipped(a.size());
  for (int64_t l = 0; l < nl; ++l)
    std::copy(a.begin() + (nl - 1 - l) * na * 2, a.begin() + (nl - l) * na * 2,
              flipped.begin() + l * na * 2);
  anchors = Tensor::from_vector(flipped, {nl, na, 2}, anchors.device());
  return true;
}

void Detect::set_strides(const std::vector<double>& s) {
  strides = s;
  check_anchor_order();
  std::vector<float> a = anchors.to(Device::cpu()).to_vector<float>();
  for (int64_t l = 0; l < nl; ++l)
    for (int64_t k = 0; k < na * 2; ++k) a[l * na * 2 + k] /= static_cast<float>(strides[l]);
  anchors = Tensor::from_vector(a, {nl, na, 2}, anchors.device());

  autograd::NoGradGuard no_grad;
  for (int64_t l = 0; l < nl; ++l) {
    Tensor& b = convs[l]->bias;
    std::vector<float> v = b.to(Device::cpu()).to_vector<float>();
    const double obj = std::log(8.0 / std::pow(640.0 / strides[l], 2));
    const double cls = std::log(0.6 / (static_cast<double>(nc) - 0.99999));
    for (int64_t k = 0; k < na; ++k) {
      v[k * no + 4] += static_cast<float>(obj);
      for (int64_t c = 0; c < nc; ++c) v[k * no + 5 + c] += static_cast<float>(cls);
    }
    b.copy_(Tensor::from_vector(v, {no * na}, b.device()));
  }
}

}  // namespace kestrel::layers
