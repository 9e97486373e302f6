#include "engine/ops/mask_loss.h"

#include <memory>

#include "engine/ops/common.h"
#include "engine/profiler.h"
#include "kernels/mask_loss.h"

namespace kestrel::ops {
namespace {

// Everything the forward used, contiguous and detached, that the backward reads again.
struct MaskLossState {
  Tensor coefficients, protos, masks;
  MaskPositives pos;
  kernels::MaskLossShape shape;

  kernels::MaskLossInputs inputs() const {
    kernels::MaskLossInputs in;
    in.coef = coefficients.data_ptr();
    in.coef_row = pos.coef_row.data<int32_t>();
    in.protos = protos.data_ptr();
    in.image = pos.image.data<int32_t>();
    in.box = pos.box.data<float>();
    in.area = pos.area.data<float>();
    in.masks = masks.data_ptr();
    in.gt_row = pos.gt_row.data<int32_t>();
    in.gt_label = pos.gt_label.data<float>();
    return in;
  }
};

DType loss_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

struct MaskLossBackward : autograd::Node {
  std::shared_ptr<MaskLossState> state;

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    KESTREL_CHECK(state, "MaskLossBackward: saved state was freed by an earlier backward; pass "
                         "retain_graph=true to backpropagate twice");
    const profiler::Scope timed("MaskLoss", profiler::Phase::Backward);
    const MaskLossState& s = *state;
    const DType t = s.coefficients.dtype(), lt = loss_dtype(t);
    const Device d = s.protos.device();
    const Tensor g = grads[0].defined() ? grads[0].to(d).to(lt).contiguous()
                                        : Tensor::ones({s.shape.positives}, lt, d);
    Tensor dcoef = Tensor::empty(s.coefficients.shape(), t, d);
    Tensor dprotos = Tensor::empty(s.protos.shape(), t, d);
    const kernels::MaskLossInputs in = s.inputs();
    const kernels::MaskLossShape& shape = s.shape;
    launch(
        d,
        [&] {
          kernels::mask_loss_backward_cpu(t, s.masks.dtype(), shape, in, g.data_ptr(),
                                          dcoef.data_ptr(), dprotos.data_ptr());
        },
        [&](cudaStream_t st) {
          kernels::mask_loss_backward_cuda(t, s.masks.dtype(), shape, in, g.data<float>(),
                                           dcoef.data_ptr(), dprotos.data_ptr(), st);
        });
    return {dcoef, dprotos};
  }
  void release_saved() override { state.reset(); }
  std::string name() const override { return "MaskLossBackward"; }
};

void check_index(const char* what, const Tensor& t, DType dtype, const Shape& shape,
                 const Device& d) {
  KESTREL_CHECK(t.defined() && t.dtype() == dtype && t.shape() == shape && t.device() == d,
                "mask_loss: positives' ", what, " must be ", dtype_name(dtype), " ",
                shape_str(shape), " on ", d.str(), ", got ",
                t.defined() ? t.describe() : std::string("none"));
}

}  // namespace

Tensor mask_loss(const Tensor& coefficients_, int64_t column, const Tensor& protos_,
                 const MaskPositives& pos_, const Tensor& masks_, bool overlap) {
  const profiler::Scope timed("MaskLoss", profiler::Phase::Forward);
  check_kernel_dtype("mask_loss", protos_);
  KESTREL_CHECK(protos_.dim() == 4, "mask_loss: prototypes must be NHWC (B, mh, mw, nm), got ",
                protos_.describe());
  const Device d = protos_.device();
  const int64_t nm = protos_.size(3);
  KESTREL_CHECK(coefficients_.dim() == 2 && coefficients_.dtype() == protos_.dtype() &&
                    coefficients_.device() == d && column >= 0 &&
                    column + nm <= coefficients_.size(1),
                "mask_loss: coefficients ", coefficients_.describe(), " must be (R, C) of the "
                "prototypes' dtype and device with ", nm, " columns from column ", column);
  KESTREL_CHECK(masks_.dim() == 3 && masks_.device() == d &&
                    (masks_.dtype() == DType::U8 || masks_.dtype() == DType::F32 ||
                     (masks_.dtype() == DType::F64 && d.is_cpu())),
                "mask_loss: masks must be (G, gh, gw) uint8 or float32 on ", d.str(), ", got ",
                masks_.describe());
  const int64_t P = pos_.coef_row.defined() ? pos_.coef_row.numel() : 0;
  check_index("coef_row", pos_.coef_row, DType::I32, {P}, d);
  check_index("image", pos_.image, DType::I32, {P}, d);
  check_index("box", pos_.box, DType::F32, {P, 4}, d);
  check_index("area", pos_.area, DType::F32, {P}, d);
  check_index("gt_row", pos_.gt_row, DType::I32, {P}, d);
  check_index("gt_label", pos_.gt_label, DType::F32, {P}, d);

  auto st = std::make_shared<MaskLossState>();
  st->coefficients = coefficients_.detach().contiguous();
  st->protos = protos_.detach().contiguous();
  st->masks = masks_.detach().contiguous();
  st->pos = {pos_.coef_row.contiguous(), pos_.image.contiguous(), pos_.box.contiguous(),
             pos_.area.contiguous(),     pos_.gt_row.contiguous(), pos_.gt_label.contiguous()};
  kernels::MaskLossShape& s = st->shape;
  s.positives = P;
  s.nm = nm;
  s.coef_rows = st->coefficients.size(0);
  s.coef_stride = st->coefficients.size(1);
  s.coef_column = column;
  s.batch = protos_.size(0);
  s.mh = protos_.size(1);
  s.mw = protos_.size(2);
  s.masks = masks_.size(0);
  s.gh = masks_.size(1);
  s.gw = masks_.size(2);
  s.overlap = overlap;

  const DType t = st->protos.dtype();
  Tensor loss = Tensor::empty({P}, loss_dtype(t), d);
  const kernels::MaskLossInputs in = st->inputs();
  launch(
      d, [&] { kernels::mask_loss_forward_cpu(t, st->masks.dtype(), s, in, loss.data_ptr()); },
      [&](cudaStream_t stream) {
        kernels::mask_loss_forward_cuda(t, st->masks.dtype(), s, in, loss.data<float>(), stream);
      });
  if (auto node = autograd::make_node<MaskLossBackward>({&coefficients_, &protos_})) {
    node->state = st;
    autograd::set_history(loss, node);
  }
  return loss;
}

}  // namespace kestrel::ops
