#include "yolo/train/seg_loss.h"

#include <algorithm>
#include <map>

#include "engine/ops/elementwise.h"
#include "engine/ops/mask_loss.h"
#include "engine/ops/reduce.h"
#include "engine/profiler.h"
#include "kernels/mask_loss.h"
#include "kernels/rounding.h"
#include "kernels/yolo_loss.h"

namespace kestrel::yolo {
namespace {

using kernels::mul_rn;

// One match of build_targets as the mask term needs it.
struct Match {
  int32_t cell = 0, image = 0, gt_row = 0;
  float gt_label = 0;
  float box[4] = {};  // x1, y1, x2, y2 in prototype pixels
  float area = 0;     // w * h normalised
};

// tidx of each target row under overlap: its 1-based index among its image's rows, in order
// (the reference numbers the rows of each image's block of the batch-sorted targets).
std::vector<float> overlap_labels(const float* rows, int64_t nt, int64_t bs) {
  std::vector<float> label(nt, 0.0f);
  std::vector<int64_t> seen(bs, 0);
  for (int64_t t = 0; t < nt; ++t) {
    const float b = rows[6 * t];
    if (b >= 0 && b < float(bs)) label[t] = float(++seen[static_cast<int64_t>(b)]);
  }
  return label;
}

// The level's matches in build_targets order (offset, anchor, target), with the reference's
// float32 arithmetic for xywhn (grid coordinates divided back by the grid size) and the crop box
// (xywh2xyxy of xywhn times the prototypes' size).
std::vector<Match> level_matches(const float* rows, const kernels::LossConfig& c,
                                 const kernels::LossLevel& lv, const std::vector<float>& labels,
                                 bool overlap, int64_t mh, int64_t mw, int64_t masks) {
  std::vector<Match> out;
  const float nx = float(lv.nx), ny = float(lv.ny), fw = float(mw), fh = float(mh);
  for (int o = 0; o < kernels::kLossOffsets; ++o) {
    for (int a = 0; a < c.na; ++a) {
      for (int64_t t = 0; t < c.nt; ++t) {
        const float* r = rows + 6 * t;
        if (!kernels::target_row_valid(r, c.bs, c.nc)) continue;
        int32_t cls;
        float tbox[4];
        const int32_t cell = kernels::match_slot(r, o, a, lv, c, &cls, tbox);
        if (cell == kernels::kNoCell) continue;
        Match m;
        m.cell = cell;
        m.image = static_cast<int32_t>(r[0]);
        m.gt_row = overlap ? m.image : static_cast<int32_t>(t);
        m.gt_label = overlap ? labels[t] : 0.0f;
        KESTREL_CHECK(m.gt_row < masks, "ComputeSegLoss: target row ", t, " has no mask: ",
                      overlap ? "the overlap masks cover " : "the masks cover ", masks,
                      overlap ? " images" : " target rows",
                      "; pass one mask per target row (or per image with overlap)");
        const float xn = mul_rn(r[2], nx) / nx, yn = mul_rn(r[3], ny) / ny;
        const float wn = mul_rn(r[4], nx) / nx, hn = mul_rn(r[5], ny) / ny;
        const float xm = mul_rn(xn, fw), ym = mul_rn(yn, fh);
        const float wm = mul_rn(wn, fw), hm = mul_rn(hn, fh);
        m.box[0] = xm - wm / 2;
        m.box[1] = ym - hm / 2;
        m.box[2] = xm + wm / 2;
        m.box[3] = ym + hm / 2;
        m.area = mul_rn(wn, hn);
        out.push_back(m);
      }
    }
  }
  // Cell order groups the matches by image (the cell's leading index) and by coefficient row.
  std::stable_sort(out.begin(), out.end(),
                   [](const Match& x, const Match& y) { return x.cell < y.cell; });
  return out;
}

// The mask positives of one level on `device`, and each one's weight in lseg:
// hyp box / bs / (matches of its image at this level).
struct LevelPositives {
  ops::MaskPositives pos;
  Tensor weight;
};
LevelPositives upload(const std::vector<Match>& ms, double box_gain, int64_t bs, DType weight_dtype,
                      Device device) {
  const int64_t P = static_cast<int64_t>(ms.size());
  std::vector<int32_t> row(P), image(P), gt_row(P);
  std::vector<float> box(4 * P), area(P), label(P);
  std::map<int32_t, int64_t> per_image;
  for (const Match& m : ms) ++per_image[m.image];
  std::vector<double> weight(P);
  for (int64_t p = 0; p < P; ++p) {
    const Match& m = ms[p];
    row[p] = m.cell;
    image[p] = m.image;
    gt_row[p] = m.gt_row;
    label[p] = m.gt_label;
    area[p] = m.area;
    std::copy(m.box, m.box + 4, box.begin() + 4 * p);
    weight[p] = box_gain / double(bs) / double(per_image[m.image]);
  }
  LevelPositives out;
  out.pos.coef_row = Tensor::from_vector(row, {P}).to(device);
  out.pos.image = Tensor::from_vector(image, {P}).to(device);
  out.pos.box = Tensor::from_vector(box, {P, 4}).to(device);
  out.pos.area = Tensor::from_vector(area, {P}).to(device);
  out.pos.gt_row = Tensor::from_vector(gt_row, {P}).to(device);
  out.pos.gt_label = Tensor::from_vector(label, {P}).to(device);
  out.weight = Tensor::from_vector(weight, {P}).to(weight_dtype).to(device);
  return out;
}

}  // namespace

ComputeSegLoss::ComputeSegLoss(const layers::Detect& head, const Hyp& hyp, bool overlap)
    : detection_(head, hyp), nc_(head.nc), na_(head.na), nl_(head.nl), nm_(head.nm), hyp_(hyp),
      overlap_(overlap) {
  KESTREL_CHECK(nm_ >= 1 && nm_ <= kernels::kMaskMaxCoefficients, "ComputeSegLoss: the head has ",
                nm_, " mask coefficients; pass a Segment head (1..",
                kernels::kMaskMaxCoefficients, ")");
  anchors_ = head.anchors.to(Device::cpu()).to(DType::F32).contiguous().to_vector<float>();
}

SegDeviceLoss ComputeSegLoss::forward(const std::vector<Tensor>& preds, const Tensor& protos,
                                      const Tensor& targets_in, const Tensor& masks_in) const {
  KESTREL_CHECK(static_cast<int64_t>(preds.size()) == nl_, "ComputeSegLoss: got ", preds.size(),
                " prediction levels for a ", nl_, "-level Segment head");
  const int64_t no = nc_ + 5 + nm_;
  for (const Tensor& p : preds)
    KESTREL_CHECK(p.dim() == 5 && p.size(4) == no, "ComputeSegLoss: prediction ", p.describe(),
                  " is not (bs, ", na_, ", ny, nx, ", no, "); pass Segment's raw outputs");
  const int64_t bs = preds[0].size(0);
  const Device device = preds[0].device();
  KESTREL_CHECK(protos.dim() == 4 && protos.size(0) == bs && protos.size(3) == nm_ &&
                    protos.device() == device && protos.dtype() == preds[0].dtype(),
                "ComputeSegLoss: prototypes ", protos.describe(), " are not NHWC (", bs,
                ", mh, mw, ", nm_, ") of the predictions' dtype and device");
  KESTREL_CHECK(masks_in.dim() == 3 && (!overlap_ || masks_in.size(0) == bs),
                "ComputeSegLoss: masks ", masks_in.describe(), " are not ",
                overlap_ ? "(bs, h, w) index masks (overlap)" : "(targets, h, w)");

  std::vector<Tensor> det_preds;
  for (const Tensor& p : preds) det_preds.push_back(p.slice(4, 0, nc_ + 5));
  const DeviceLoss det = detection_.forward(det_preds, targets_in);

  const profiler::Scope timed("SegLoss", profiler::Phase::Forward);
  const Tensor targets = targets_in.detach().to(Device::cpu()).to(DType::F32).contiguous();
  const float* rows = targets.data<float>();
  const int64_t nt = targets.size(0);
  const DType loss_dtype = preds[0].dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor masks =
      masks_in.dtype() == DType::U8 || masks_in.dtype() == DType::F32 ||
              (masks_in.dtype() == DType::F64 && device.is_cpu())
          ? masks_in.detach().to(device)
          : masks_in.detach().to(device).to(DType::F32);
  const int64_t mh = protos.size(1), mw = protos.size(2);
  const std::vector<float> labels = overlap_ ? overlap_labels(rows, nt, bs) : std::vector<float>();

  kernels::LossConfig c;
  c.bs = bs;
  c.na = na_;
  c.nc = nc_;
  c.nt = nt;
  c.anchor_t = static_cast<float>(hyp_.anchor_t);
  Tensor lseg;
  for (int64_t l = 0; l < nl_; ++l) {
    kernels::LossLevel lv;
    lv.ny = preds[l].size(2);
    lv.nx = preds[l].size(3);
    for (int64_t k = 0; k < 2 * na_; ++k) lv.anchors[k] = anchors_[l * 2 * na_ + k];
    const std::vector<Match> ms =
        level_matches(rows, c, lv, labels, overlap_, mh, mw, masks.size(0));
    if (ms.empty()) continue;
    const LevelPositives lp = upload(ms, hyp_.box, bs, loss_dtype, device);
    const Tensor loss = ops::mask_loss(preds[l].reshape({-1, no}), nc_ + 5, protos, lp.pos, masks,
                                       overlap_);
    const Tensor term = ops::sum_all(ops::mul(loss, lp.weight));
    lseg = lseg.defined() ? ops::add(lseg, term) : term;
  }
  if (!lseg.defined()) lseg = Tensor::zeros({}, loss_dtype, device);
  const Tensor total = ops::add(det.total, ops::mul(lseg, double(bs)));
  return {total, det.summary, lseg.detach()};
}

SegLossResult ComputeSegLoss::operator()(const std::vector<Tensor>& preds, const Tensor& protos,
                                         const Tensor& targets, const Tensor& masks) const {
  if (!preds.empty()) detection_.check_targets(targets, preds[0].size(0));
  const SegDeviceLoss loss = forward(preds, protos, targets, masks);
  const std::vector<double> sm = loss.summary.to(Device::cpu()).to_vector<double>();
  const double seg = loss.seg.to(Device::cpu()).to(DType::F64).item();
  return {loss.total, sm[kernels::kSummaryBox], seg, sm[kernels::kSummaryObj],
          sm[kernels::kSummaryCls]};
}

}  // namespace kestrel::yolo
