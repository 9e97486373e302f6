// CUDA NMS against the CPU reference. Both compute every IoU and confidence with the same float
// operations (kernels/nms.h), so the kept sets, their order and their values must agree exactly:
// tolerance 0. Inputs are crowded (many overlaps) with scores on a coarse grid (many equal
// confidences, so the tie order is exercised), in float32 and in half types (the CPU reference
// then runs on the same half-rounded values widened to float, as the CUDA kernels widen them).
#include "yolo/eval/nms.h"

#include <random>

#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

// batch images of n boxes with nc classes: centres in [0, extent), sizes in [5, 5 + size_span),
// objectness and class scores on a grid of `levels` steps.
Tensor crowded(int64_t batch, int64_t n, int64_t nc, float extent, float size_span, int levels,
               uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pos(0, extent), size(5, 5 + size_span);
  std::uniform_int_distribution<int> level(0, levels);
  std::vector<float> v;
  for (int64_t i = 0; i < batch * n; ++i) {
    v.push_back(std::round(pos(rng)));
    v.push_back(std::round(pos(rng)));
    v.push_back(std::round(size(rng)));
    v.push_back(std::round(size(rng)));
    for (int64_t j = 0; j < 1 + nc; ++j) v.push_back(static_cast<float>(level(rng)) / levels);
  }
  return Tensor::from_vector(v, {batch, n, 5 + nc});
}

void expect_same(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t b = 0; b < cpu.size(); ++b) {
    SCOPED_TRACE(b);
    EXPECT_TRUE(gpu[b].device().is_cpu());
    EXPECT_EQ(gpu[b].shape(), cpu[b].shape());
    EXPECT_EQ(gpu[b].to_vector<float>(), cpu[b].to_vector<float>());
  }
}

std::vector<NmsOptions> variants() {
  std::vector<NmsOptions> v;
  for (int k = 0; k < 6; ++k) {
    NmsOptions o;
    o.conf_thres = 0.1;
    o.iou_thres = k % 2 ? 0.3 : 0.6;
    o.multi_label = k >= 2;
    o.agnostic = k == 3;
    if (k == 4) o.classes = {1, 3, 4};
    if (k == 5) o.max_nms = 700, o.max_det = 25;
    v.push_back(o);
  }
  return v;
}

}  // namespace

TEST(NmsCuda, MatchesCpuOnCrowdedInputs) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Tensor p = crowded(4, 2000, 6, 200, 60, 10, 1);
  const std::vector<NmsOptions> vs = variants();
  for (size_t k = 0; k < vs.size(); ++k) {
    SCOPED_TRACE(k);
    const std::vector<Tensor> cpu = non_max_suppression(p, vs[k]);
    ASSERT_GT(cpu[0].size(0), 5);
    expect_same(non_max_suppression(p.to(Device::cuda(0)), vs[k]), cpu);
  }
}

// A batch whose suppression workspace exceeds the budget goes through in groups: with a budget of
// one byte every image is a group of its own, with a middling one groups of several; the result
// is the same as in one pass and as the CPU's.
TEST(NmsCuda, BatchesPastTheWorkspaceBudgetGoThroughInGroups) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Tensor p = crowded(7, 2000, 6, 200, 60, 10, 3);
  NmsOptions o;
  o.conf_thres = 0.001;
  o.multi_label = true;
  const std::vector<Tensor> cpu = non_max_suppression(p, o);
  const Tensor gpu = p.to(Device::cuda(0));
  for (const size_t budget : {size_t(1), size_t(1) << 20, size_t(1) << 30}) {
    SCOPED_TRACE(budget);
    o.cuda_workspace_budget = budget;
    expect_same(non_max_suppression(gpu, o), cpu);
  }
}

TEST(NmsCuda, HalfInputsMatchCpuOnTheRoundedValues) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Tensor p = crowded(2, 1500, 4, 150, 40, 7, 2);
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor rounded = p.to(t);
    for (const NmsOptions& o : variants())
      expect_same(non_max_suppression(rounded.to(Device::cuda(0)), o),
                  non_max_suppression(rounded.to(DType::F32), o));
  }
}

TEST(NmsCuda, AllScoresEqualOrderByIndex) {
  KESTREL_SKIP_WITHOUT_CUDA();
  // Every confidence identical: the kept set depends only on the index order.
  Tensor p = crowded(3, 3000, 2, 300, 50, 1, 3);
  NmsOptions o;
  o.multi_label = true;
  const std::vector<Tensor> cpu = non_max_suppression(p, o);
  ASSERT_GT(cpu[0].size(0), 20);
  expect_same(non_max_suppression(p.to(Device::cuda(0)), o), cpu);
}

TEST(NmsCuda, YoloSizedValidationInput) {
  KESTREL_SKIP_WITHOUT_CUDA();
  // 640x640 with 25200 boxes and 80 classes at val's settings (conf 0.001, IoU 0.6,
  // multi-label): millions of candidates, cut to max_nms 30000, then max_det 300.
  Tensor p = crowded(2, 25200, 80, 640, 120, 1000, 4);
  NmsOptions o;
  o.conf_thres = 0.001;
  o.iou_thres = 0.6;
  o.multi_label = true;
  const std::vector<Tensor> cpu = non_max_suppression(p, o);
  EXPECT_EQ(cpu[0].size(0), 300);
  expect_same(non_max_suppression(p.to(Device::cuda(0)), o), cpu);
}

TEST(NmsCuda, ImagesWithoutCandidates) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Tensor p = crowded(3, 500, 3, 100, 30, 10, 5);
  NmsOptions o;
  o.conf_thres = 1.0;  // nothing is > 1
  for (const Tensor& t : non_max_suppression(p.to(Device::cuda(0)), o))
    EXPECT_EQ(t.shape(), (Shape{0, 6}));
  // Image 1 has no candidate, images 0 and 2 do.
  std::vector<float> v = p.to_vector<float>();
  for (int64_t i = 0; i < 500; ++i) v[(500 + i) * 8 + 4] = 0.0f;
  Tensor q = Tensor::from_vector(v, p.shape());
  const std::vector<Tensor> cpu = non_max_suppression(q);
  EXPECT_EQ(cpu[1].size(0), 0);
  EXPECT_GT(cpu[2].size(0), 0);
  expect_same(non_max_suppression(q.to(Device::cuda(0))), cpu);
}

// Rows with mask coefficients (a segmentation model's 5 + nc + 32): the same rows as the CPU's,
// coefficients included, in float32 and bfloat16.
TEST(NmsCuda, MaskCoefficientsMatchCpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const int64_t nm = 32;
  Tensor p = crowded(3, 1500, 6 + nm, 200, 60, 10, 5);  // the last 32 "classes" act as coefficients
  for (DType t : {DType::F32, DType::BF16}) {
    const Tensor x = p.to(t);
    NmsOptions o;
    o.conf_thres = 0.1;
    o.multi_label = true;
    o.nm = nm;
    const std::vector<Tensor> cpu = non_max_suppression(x.to(DType::F32), o);
    ASSERT_GT(cpu[0].size(0), 5);
    ASSERT_EQ(cpu[0].size(1), 6 + nm);
    expect_same(non_max_suppression(x.to(Device::cuda(0)), o), cpu);
  }
}
