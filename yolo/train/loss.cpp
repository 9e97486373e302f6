#include "yolo/train/loss.h"

#include <climits>
#include <memory>

#include "engine/autograd.h"
#include "engine/ops/common.h"
#include "engine/profiler.h"
#include "kernels/yolo_loss.h"

namespace kestrel::yolo {
namespace {

using kernels::LossConfig;
using kernels::LossLevel;
using kernels::LossLevelBuffers;

// One level's predictions and the buffers the kernels fill, on the predictions' device.
struct LevelState {
  Tensor pred;  // contiguous, no history
  Tensor slot_cell, slot_cls, slot_tbox, slot_iou, slot_dbox, sorted_cell, sorted_slot, tobj;

  template <class Acc>
  LossLevelBuffers<Acc> buffers() const {
    LossLevelBuffers<Acc> b;
    b.pred = pred.data_ptr();
    b.slot_cell = static_cast<int32_t*>(slot_cell.data_ptr());
    b.slot_cls = static_cast<int32_t*>(slot_cls.data_ptr());
    b.slot_tbox = static_cast<float*>(slot_tbox.data_ptr());
    b.slot_iou = static_cast<Acc*>(slot_iou.data_ptr());
    b.slot_dbox = static_cast<Acc*>(slot_dbox.data_ptr());
    b.sorted_cell = static_cast<int32_t*>(sorted_cell.data_ptr());
    b.sorted_slot = static_cast<int32_t*>(sorted_slot.data_ptr());
    b.tobj = static_cast<Acc*>(tobj.data_ptr());
    return b;
  }
};

// Everything the forward computed that the backward reads.
struct LossState {
  LossConfig config;
  std::vector<LossLevel> levels;
  std::vector<LevelState> level;
  Tensor summary;  // kSummarySize float64 on the predictions' device
  Device device;
  DType dtype;

  template <class Acc>
  std::vector<LossLevelBuffers<Acc>> buffers() const {
    std::vector<LossLevelBuffers<Acc>> out;
    for (const LevelState& s : level) out.push_back(s.buffers<Acc>());
    return out;
  }
};

struct YoloLossBackward : autograd::Node {
  std::shared_ptr<LossState> state;

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    KESTREL_CHECK(state, "YoloLossBackward: saved state was freed by an earlier backward; pass "
                         "retain_graph=true to backpropagate twice");
    const LossState& s = *state;
    const int nl = static_cast<int>(s.level.size());
    std::vector<Tensor> out;
    std::vector<void*> ptrs;
    for (const LevelState& l : s.level) {
      out.push_back(Tensor::empty(l.pred.shape(), s.dtype, s.device));
      ptrs.push_back(out.back().data_ptr());
    }
    const Tensor& g = grads[0];
    ops::launch(
        s.device,
        [&] {
          // A CPU scalar, read by this CPU kernel's driver (no device to wait for).
          const double gv =
              g.defined() ? load_as_double(g.contiguous().data_ptr(), g.dtype(), 0) : 1.0;
          kernels::yolo_loss_backward_cpu(s.dtype, s.config, s.levels.data(),
                                          s.buffers<double>().data(), nl,
                                          s.summary.data<double>(), gv, ptrs.data());
        },
        [&](cudaStream_t stream) {
          const Tensor gf = g.defined() ? g.to(s.device).to(DType::F32).contiguous()
                                        : Tensor::ones({}, DType::F32, s.device);
          kernels::yolo_loss_backward_cuda(s.dtype, s.config, s.levels.data(),
                                           s.buffers<float>().data(), nl,
                                           s.summary.data<double>(), gf.data<float>(),
                                           ptrs.data(), stream);
        });
    return out;
  }
  void release_saved() override { state.reset(); }
  std::string name() const override { return "YoloLossBackward"; }
};

void check_inputs(const std::vector<Tensor>& preds, const Tensor& targets, int64_t nl,
                  int64_t na, int64_t nc) {
  KESTREL_CHECK(static_cast<int64_t>(preds.size()) == nl, "ComputeLoss: got ", preds.size(),
                " prediction levels for a ", nl, "-level Detect head; pass Detect's raw outputs");
  const Tensor& p0 = preds[0];
  const DType dt = p0.dtype();
  KESTREL_CHECK(ops::kernel_float_dtype(p0.device(), dt), "ComputeLoss: predictions of dtype ", dtype_name(dt), " on ",
                p0.device().str(), " are not supported; use float32 or float64 on the CPU and "
                "float32, float16 or bfloat16 on CUDA");
  for (const Tensor& p : preds) {
    KESTREL_CHECK(p.dim() == 5 && p.size(0) == p0.size(0) && p.size(1) == na && p.size(4) == nc + 5,
                  "ComputeLoss: prediction ", p.describe(), " is not (", p0.size(0), ", ", na,
                  ", ny, nx, ", nc + 5, "); pass Detect's raw outputs for this model");
    KESTREL_CHECK(p.dtype() == dt && p.device() == p0.device(), "ComputeLoss: levels differ in "
                  "dtype or device (", p0.describe(), " vs ", p.describe(), ")");
    KESTREL_CHECK(p.size(2) > 0 && p.size(3) > 0 && p.size(0) > 0, "ComputeLoss: empty prediction ",
                  p.describe());
    KESTREL_CHECK(p.numel() / (nc + 5) < INT32_MAX, "ComputeLoss: ", p.describe(),
                  " has more cells than the loss indexes (2^31)");
  }
  KESTREL_CHECK(targets.dim() == 2 && targets.size(1) == 6 && is_floating(targets.dtype()),
                "ComputeLoss: targets must be a float [M, 6] tensor (image, class, x, y, w, h), got ",
                targets.describe());
  KESTREL_CHECK(kernels::kLossOffsets * na * targets.size(0) < INT32_MAX, "ComputeLoss: ",
                targets.size(0), " targets are more than the loss indexes");
}

}  // namespace

Hyp scale_loss_hyp(Hyp hyp, int nl, int nc, int img_size) {
  KESTREL_CHECK(nl > 0 && nc > 0 && img_size > 0, "scale_loss_hyp: need positive nl, nc and "
                "img_size, got ", nl, ", ", nc, ", ", img_size);
  hyp.box *= 3.0 / nl;
  hyp.cls *= static_cast<double>(nc) / 80 * 3 / nl;
  const double r = static_cast<double>(img_size) / 640;
  hyp.obj *= r * r * 3 / nl;
  return hyp;
}

ComputeLoss::ComputeLoss(const layers::Detect& detect, const Hyp& hyp)
    : nc_(detect.nc), na_(detect.na), nl_(detect.nl), hyp_(hyp) {
  KESTREL_CHECK(nl_ >= 1 && nl_ <= kernels::kLossMaxLevels, "ComputeLoss: ", nl_,
                " detection levels; the reference's balance table covers 1..", kernels::kLossMaxLevels);
  KESTREL_CHECK(na_ >= 1 && na_ <= kernels::kLossMaxAnchors, "ComputeLoss: ", na_,
                " anchors per level; supported 1..", kernels::kLossMaxAnchors);
  KESTREL_CHECK(detect.strides.size() == static_cast<size_t>(nl_), "ComputeLoss: the Detect head "
                "has no strides yet (anchors are not in grid units); build the DetectionModel first");
  anchors_ = detect.anchors.to(Device::cpu()).to(DType::F32).contiguous().to_vector<float>();
  balance_ = nl_ == 3 ? std::vector<double>{4.0, 1.0, 0.4}
                      : std::vector<double>{4.0, 1.0, 0.25, 0.06, 0.02};
  balance_.resize(nl_);
  KESTREL_CHECK(hyp.label_smoothing >= 0 && hyp.label_smoothing <= 1 && hyp.anchor_t > 0,
                "ComputeLoss: label_smoothing must be in [0, 1] and anchor_t positive, got ",
                hyp.label_smoothing, " and ", hyp.anchor_t);
}

DeviceLoss ComputeLoss::forward(const std::vector<Tensor>& preds, const Tensor& targets_in) const {
  const profiler::Scope timed("YoloLoss", profiler::Phase::Forward);
  check_inputs(preds, targets_in, nl_, na_, nc_);
  auto st = std::make_shared<LossState>();
  st->device = preds[0].device();
  st->dtype = preds[0].dtype();
  const bool cpu = st->device.is_cpu();
  const DType acc = cpu ? DType::F64 : DType::F32;
  const Tensor targets = targets_in.detach().to(DType::F32).to(st->device).contiguous();

  LossConfig& c = st->config;
  c.bs = preds[0].size(0);
  c.na = na_;
  c.nc = nc_;
  c.nt = targets.size(0);
  c.anchor_t = static_cast<float>(hyp_.anchor_t);
  c.cp = 1.0 - 0.5 * hyp_.label_smoothing;  // smooth_BCE
  c.cn = 0.5 * hyp_.label_smoothing;
  c.cls_pw = hyp_.cls_pw;
  c.obj_pw = hyp_.obj_pw;
  c.fl_gamma = hyp_.fl_gamma;
  c.box_gain = hyp_.box;
  c.obj_gain = hyp_.obj;
  c.cls_gain = hyp_.cls;
  const int64_t S = c.slots();
  for (int64_t l = 0; l < nl_; ++l) {
    LossLevel lv;
    lv.ny = preds[l].size(2);
    lv.nx = preds[l].size(3);
    for (int64_t k = 0; k < 2 * na_; ++k) lv.anchors[k] = anchors_[l * 2 * na_ + k];
    lv.balance = balance_[l];
    st->levels.push_back(lv);
    LevelState s;
    s.pred = preds[l].detach().contiguous();
    const Device d = st->device;
    s.slot_cell = Tensor::empty({S}, DType::I32, d);
    s.slot_cls = Tensor::empty({S}, DType::I32, d);
    s.slot_tbox = Tensor::empty({S, 4}, DType::F32, d);
    s.slot_iou = Tensor::empty({S}, acc, d);
    s.slot_dbox = Tensor::empty({S, 4}, acc, d);
    s.sorted_cell = Tensor::empty({S}, DType::I32, d);
    s.sorted_slot = Tensor::empty({S}, DType::I32, d);
    s.tobj = Tensor::empty({lv.cells(c)}, acc, d);
    st->level.push_back(s);
  }

  const DType total_dtype = st->dtype == DType::F64 ? DType::F64 : DType::F32;
  Tensor total = Tensor::empty({}, total_dtype, st->device);
  st->summary = Tensor::empty({kernels::kSummarySize}, DType::F64, st->device);
  const int nl = static_cast<int>(nl_);
  ops::launch(
      st->device,
      [&] {
        kernels::yolo_loss_forward_cpu(st->dtype, c, st->levels.data(),
                                       st->buffers<double>().data(), nl, targets.data<float>(),
                                       st->summary.data<double>(), total.data_ptr());
      },
      [&](cudaStream_t stream) {
        Tensor ws = Tensor::empty({static_cast<int64_t>(kernels::yolo_loss_cuda_workspace_bytes(
                                      c, st->levels.data(), nl))},
                                  DType::U8, st->device);
        kernels::yolo_loss_forward_cuda(st->dtype, c, st->levels.data(),
                                        st->buffers<float>().data(), nl, targets.data<float>(),
                                        st->summary.data<double>(), total.data<float>(),
                                        ws.data_ptr(), stream);
      });

  if (auto node = autograd::make_node<YoloLossBackward>(preds)) {
    node->state = st;
    autograd::set_history(total, node);
  }
  return {total, st->summary};
}

LossResult ComputeLoss::operator()(const std::vector<Tensor>& preds, const Tensor& targets) const {
  const DeviceLoss loss = forward(preds, targets);
  const std::vector<double> sm = loss.summary.to(Device::cpu()).to_vector<double>();
  if (sm[kernels::kSummaryBadRow] >= 0) check_targets(targets, preds[0].size(0));
  return {loss.total, sm[kernels::kSummaryBox], sm[kernels::kSummaryObj], sm[kernels::kSummaryCls]};
}

Tensor pad_targets(const Tensor& targets, int64_t rows) {
  KESTREL_CHECK(targets.dim() == 2 && targets.size(1) == 6 && targets.dtype() == DType::F32,
                "pad_targets: targets must be float32 [M, 6], got ", targets.describe());
  KESTREL_CHECK(targets.size(0) <= rows, "pad_targets: ", targets.size(0),
                " target rows do not fit in ", rows);
  const Tensor out = Tensor::empty({rows, 6}, DType::F32, targets.device(), targets.is_pinned());
  const Tensor padding = out.slice(0, targets.size(0), rows);
  padding.zero_();
  padding.slice(1, 0, 1).fill_(kernels::kPaddingImage);
  out.slice(0, 0, targets.size(0)).copy_(targets);
  return out;
}

int64_t padded_target_rows(int64_t m) {
  int64_t rows = 64;
  while (rows < m) rows *= 2;
  return rows;
}

void ComputeLoss::check_targets(const Tensor& targets_in, int64_t bs) const {
  KESTREL_CHECK(targets_in.dim() == 2 && targets_in.size(1) == 6,
                "ComputeLoss: targets must be a float [M, 6] tensor (image, class, x, y, w, h), got ",
                targets_in.describe());
  const Tensor targets = targets_in.device().is_cpu() && targets_in.dtype() == DType::F32
                             ? targets_in.contiguous()
                             : targets_in.to(Device::cpu()).to(DType::F32).contiguous();
  const float* rows = targets.data<float>();  // host memory: no device to wait for
  for (int64_t r = 0; r < targets.size(0); ++r) {
    const float* v = rows + 6 * r;
    KESTREL_CHECK(kernels::target_row_valid(v, bs, nc_) || kernels::target_row_padding(v), "ComputeLoss: target row ", r, " (", v[0],
                  ", ", v[1], ", ", v[2], ", ", v[3], ", ", v[4], ", ", v[5],
                  ") is invalid: need an image index in [0, ", bs, "), a class in [0, ", nc_,
                  "), x and y in [0, 1], w and h >= 0, all finite; check the labels");
  }
}

}  // namespace kestrel::yolo
