// NMS front end: argument checks, then the CPU reference kernel, or the CUDA kernels in their two
// stages with one host read of the candidate counts in between (the sort and the mask buffers are
// sized from them). Images go through stage 2 in groups whose workspace fits the options' budget, so
// a low conf_thres on a large batch cannot ask for more memory than one image needs.
#include "yolo/eval/nms.h"

#include <algorithm>
#include <cstring>

#include "engine/ops/launch.h"
#include "kernels/nms.h"

namespace kestrel::yolo {
namespace {

std::vector<Tensor> split_rows(const std::vector<float>& rows, const std::vector<int32_t>& counts,
                               int64_t max_det, int64_t cols) {
  std::vector<Tensor> result;
  for (size_t b = 0; b < counts.size(); ++b) {
    Tensor t = Tensor::empty({counts[b], cols}, DType::F32);
    if (counts[b] > 0)
      std::memcpy(t.data_ptr(), rows.data() + b * max_det * cols, counts[b] * cols * sizeof(float));
    result.push_back(t);
  }
  return result;
}

// Runs inside ops::launch's CUDA form for pred's device, on its stream.
std::vector<Tensor> nms_cuda(const Tensor& pred, const kernels::NmsShape& s,
                             kernels::NmsParams p, const std::vector<uint8_t>& allowed,
                             size_t workspace_budget, cudaStream_t stream) {
  const Device dev = pred.device();
  Tensor allowed_dev;
  if (!allowed.empty()) {
    allowed_dev = Tensor::from_vector(allowed, {static_cast<int64_t>(allowed.size())}, dev);
    p.class_allowed = allowed_dev.data<uint8_t>();
  }
  Tensor box_counts = Tensor::empty({s.batch * s.boxes}, DType::I32, dev);
  Tensor image_counts = Tensor::empty({s.batch}, DType::I32, dev);
  kernels::nms_count_cuda(pred.dtype(), pred.data_ptr(), s, p, box_counts.data<int32_t>(),
                          image_counts.data<int32_t>(), stream);
  const std::vector<int32_t> counts = image_counts.to(Device::cpu()).to_vector<int32_t>();

  Tensor out = Tensor::empty({s.batch, p.max_det, s.out_cols()}, DType::F32, dev);
  Tensor out_counts = Tensor::empty({s.batch}, DType::I32, dev);
  const size_t elem = dtype_size(pred.dtype());
  for (int64_t b0 = 0; b0 < s.batch;) {
    kernels::NmsShape part{1, s.boxes, s.no, s.nm};
    kernels::NmsCudaPlan plan = kernels::nms_cuda_plan(part, p, counts.data() + b0);
    while (b0 + part.batch < s.batch) {
      kernels::NmsShape wider{part.batch + 1, s.boxes, s.no, s.nm};
      kernels::NmsCudaPlan next = kernels::nms_cuda_plan(wider, p, counts.data() + b0);
      if (next.workspace_bytes > workspace_budget) break;
      part = wider;
      plan = next;
    }
    Tensor workspace =
        Tensor::empty({static_cast<int64_t>(std::max<size_t>(plan.workspace_bytes, 1))},
                      DType::U8, dev);
    const char* x = static_cast<const char*>(pred.data_ptr()) + b0 * s.boxes * s.no * elem;
    kernels::nms_suppress_cuda(pred.dtype(), x, part, p, plan,
                               box_counts.data<int32_t>() + b0 * s.boxes,
                               image_counts.data<int32_t>() + b0, workspace.data_ptr(),
                               out.data<float>() + b0 * p.max_det * s.out_cols(),
                               out_counts.data<int32_t>() + b0, stream);
    b0 += part.batch;
  }
  return split_rows(out.to(Device::cpu()).to_vector<float>(),
                    out_counts.to(Device::cpu()).to_vector<int32_t>(), p.max_det, s.out_cols());
}

// The CPU reference, one image at a time (on the pool's threads when there is one).
std::vector<Tensor> nms_host(const Tensor& pred, const kernels::NmsShape& s,
                             const kernels::NmsParams& p, ThreadPool* pool) {
  std::vector<float> rows(s.batch * p.max_det * s.out_cols());
  std::vector<int32_t> counts(s.batch);
  const kernels::NmsShape one{1, s.boxes, s.no, s.nm};
  const size_t image_bytes = s.boxes * s.no * pred.element_size();
  auto image = [&](int64_t b) {
    kernels::nms_cpu(pred.dtype(), static_cast<const char*>(pred.data_ptr()) + b * image_bytes,
                     one, p, rows.data() + b * p.max_det * s.out_cols(), counts.data() + b);
  };
  if (pool != nullptr)
    pool->parallel_for(0, s.batch, image);
  else
    for (int64_t b = 0; b < s.batch; ++b) image(b);
  return split_rows(rows, counts, p.max_det, s.out_cols());
}

}  // namespace

std::vector<Tensor> non_max_suppression(const Tensor& prediction, const NmsOptions& o,
                                        ThreadPool* pool) {
  KESTREL_CHECK(prediction.defined() && prediction.dim() == 3 && prediction.size(2) >= 6,
                "non_max_suppression: predictions must be (batch, boxes, 5 + classes) with at "
                "least one class, got ",
                prediction.defined() ? prediction.describe() : std::string("an undefined tensor"),
                "; pass DetectionModel::predict(...).boxes");
  KESTREL_CHECK(o.conf_thres >= 0 && o.conf_thres <= 1, "non_max_suppression: conf_thres ",
                o.conf_thres, " is outside [0, 1]");
  KESTREL_CHECK(o.iou_thres >= 0 && o.iou_thres <= 1, "non_max_suppression: iou_thres ",
                o.iou_thres, " is outside [0, 1]");
  KESTREL_CHECK(o.max_det >= 1 && o.max_nms >= 1, "non_max_suppression: max_det ", o.max_det,
                " and max_nms ", o.max_nms, " must be at least 1");
  KESTREL_CHECK(o.nm >= 0 && prediction.size(2) >= 6 + o.nm, "non_max_suppression: ", o.nm,
                " mask coefficients need rows of at least ", 6 + o.nm,
                " values (5 + classes + nm), got ", prediction.size(2));
  const Tensor pred = prediction.contiguous();
  const kernels::NmsShape s{pred.size(0), pred.size(1), pred.size(2), o.nm};
  std::vector<uint8_t> allowed;
  if (!o.classes.empty()) {
    allowed.assign(s.classes(), 0);
    for (int c : o.classes) {
      KESTREL_CHECK(c >= 0 && c < s.classes(), "non_max_suppression: class filter ", c,
                    " is not a class of this model (", s.classes(), " classes)");
      allowed[c] = 1;
    }
  }
  kernels::NmsParams p;
  p.conf_thres = o.conf_thres;
  p.iou_thres = o.iou_thres;
  p.agnostic = o.agnostic;
  p.multi_label = o.multi_label && s.classes() > 1;
  p.max_det = o.max_det;
  p.max_nms = o.max_nms;
  p.class_allowed = allowed.empty() ? nullptr : allowed.data();
  if (s.batch == 0) return {};
  return ops::launch(
      pred.device(), [&] { return nms_host(pred, s, p, pool); },
      [&](cudaStream_t stream) { return nms_cuda(pred, s, p, allowed, o.cuda_workspace_budget, stream); });
}

}  // namespace kestrel::yolo
