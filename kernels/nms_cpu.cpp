// CPU reference NMS: candidates in index order, a stable sort by confidence, torchvision's greedy
// loop over class-offset boxes, stopped once max_det boxes are kept (the boxes after those could
// not change the first max_det).
#include <algorithm>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/nms.h"

namespace kestrel::kernels {
namespace {

template <class T>
void nms_image(const T* pred, const NmsShape& s, const NmsParams& p, float* out, int32_t* count) {
  using A = acc_t<T>;
  struct Candidate {
    A conf;
    int32_t cls;
    int64_t box;
  };
  const A conf_thres = static_cast<A>(p.conf_thres);
  const int64_t slots = s.slots(p.multi_label);
  std::vector<Candidate> cands;
  for (int64_t i = 0; i < s.boxes; ++i) {
    const T* row = pred + i * s.no;
    for (int64_t slot = 0; slot < slots; ++slot) {
      Candidate c{A(0), 0, i};
      if (nms_candidate(row, slot, s, p, conf_thres, &c.conf, &c.cls)) cands.push_back(c);
    }
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Candidate& a, const Candidate& b) { return a.conf > b.conf; });
  if (static_cast<int64_t>(cands.size()) > p.max_nms) cands.resize(p.max_nms);

  const size_t m = cands.size();
  std::vector<A> boxes(4 * m), areas(m);
  for (size_t k = 0; k < m; ++k) {
    A* b = &boxes[4 * k];
    nms_xyxy(pred + cands[k].box * s.no, b);
    const A offset = p.agnostic ? A(0) : mul_rn(static_cast<A>(cands[k].cls), A(p.max_wh));
    for (int c = 0; c < 4; ++c) b[c] += offset;
    areas[k] = nms_area(b);
  }

  std::vector<char> suppressed(m, 0);
  int32_t kept = 0;
  for (size_t a = 0; a < m && kept < p.max_det; ++a) {
    if (suppressed[a]) continue;
    A xyxy[4];
    nms_xyxy(pred + cands[a].box * s.no, xyxy);
    float* row = out + static_cast<int64_t>(kept) * s.out_cols();
    for (int c = 0; c < 4; ++c) row[c] = static_cast<float>(xyxy[c]);
    row[4] = static_cast<float>(cands[a].conf);
    row[5] = static_cast<float>(cands[a].cls);
    for (int64_t k = 0; k < s.nm; ++k) row[6 + k] = nms_coefficient(pred + cands[a].box * s.no, s, k);
    ++kept;
    for (size_t b = a + 1; b < m; ++b) {
      if (suppressed[b]) continue;
      const A iou = nms_iou(&boxes[4 * a], areas[a], &boxes[4 * b], areas[b]);
      if (static_cast<double>(iou) > p.iou_thres) suppressed[b] = 1;
    }
  }
  *count = kept;
}

}  // namespace

void nms_cpu(DType t, const void* pred, const NmsShape& s, const NmsParams& p, float* out,
             int32_t* counts) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "nms", {
    const T* x = static_cast<const T*>(pred);
    for (int64_t b = 0; b < s.batch; ++b)
      nms_image(x + b * s.boxes * s.no, s, p, out + b * p.max_det * s.out_cols(), counts + b);
  });
}

}  // namespace kestrel::kernels
