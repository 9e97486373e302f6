// ComputeSegLoss against the reference's segmentation ComputeLoss (utils/segment/loss.py) on the
// fixed case of tests/scripts/seg_loss_reference.py (tests/data/seg_loss_reference.safetensors):
// two levels of a Segment head's raw outputs, prototypes, 7 targets over 2 images, overlap index
// masks at the prototypes' size and per-target masks at 1.5 times it (resized by nearest
// neighbour). The loss and its items (box, seg, obj, cls) agree within 1e-5 relative, the
// gradients w.r.t. every prediction and the prototypes within 1e-5 of each tensor's largest value
// (float32 on both sides, sums in other orders: the differences seen are ~1e-7 relative), in
// float32 and float64, with uint8 and float masks. Also: box, obj and cls are detection's
// ComputeLoss's, and masks that do not cover the targets are refused.
#include "yolo/train/seg_loss.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/random.h"
#include "engine/safetensors_tensors.h"
#include "tests/support/testing.h"
#include "yolo/model/weights_file.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

const char* kFixture = "tests/data/seg_loss_reference.safetensors";

Hyp fixture_hyp() {
  Hyp h;
  h.box = 0.05;
  h.obj = 1.0;
  h.cls = 0.5;
  h.cls_pw = 1.5;
  h.obj_pw = 1.2;
  h.anchor_t = 4.0;
  h.fl_gamma = 0.0;
  h.label_smoothing = 0.1;
  return h;
}

// The head the fixture stands for: nc 3, nm 32, two levels at strides 8 and 16, its anchors.
std::unique_ptr<layers::Detect> fixture_head(const SafetensorsFile& f) {
  Generator gen(1);
  auto head = std::make_unique<layers::Detect>(
      3, std::vector<std::vector<double>>{{10, 13, 16, 30, 33, 23}, {30, 61, 62, 45, 59, 119}},
      std::vector<int64_t>{4, 4}, gen, 32);
  head->set_strides({8, 16});
  head->anchors = safetensors_tensor(f, "anchors");
  return head;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(DType::F64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// |got - want| <= 1e-5 * max |want|, elementwise.
::testing::AssertionResult close_to_reference(const Tensor& got, const Tensor& want) {
  return kestrel::testing::all_close(got.to(DType::F64), want.to(DType::F64),
                                     1e-5 * max_abs(want), 0.0);
}

struct LossRun {
  SegLossResult result;
  std::vector<Tensor> preds;
  Tensor protos;  // NHWC leaf
};

LossRun run(const SafetensorsFile& f, const std::string& mode, DType dtype, DType mask_dtype) {
  const auto head = fixture_head(f);
  const ComputeSegLoss loss(*head, fixture_hyp(), mode == "overlap");
  LossRun r;
  for (int l = 0; l < 2; ++l)
    r.preds.push_back(
        safetensors_tensor(f, "pred." + std::to_string(l)).to(dtype).set_requires_grad());
  r.protos = safetensors_tensor(f, "protos").permute({0, 2, 3, 1}).contiguous().to(dtype);
  r.protos.set_requires_grad();
  const Tensor masks = safetensors_tensor(f, "masks." + mode).to(mask_dtype);
  r.result = loss(r.preds, r.protos, safetensors_tensor(f, "targets"), masks);
  r.result.total.backward();
  return r;
}

void expect_matches_reference(const SafetensorsFile& f, const std::string& mode, DType dtype,
                              DType mask_dtype) {
  SCOPED_TRACE(::testing::Message() << mode << ", " << dtype_name(dtype) << ", masks "
                                    << dtype_name(mask_dtype));
  const LossRun r = run(f, mode, dtype, mask_dtype);
  const double loss = safetensors_tensor(f, mode + ".loss").to(DType::F64).to_vector<double>()[0];
  const std::vector<double> items =
      safetensors_tensor(f, mode + ".items").to(DType::F64).to_vector<double>();
  EXPECT_NEAR(r.result.total.to(DType::F64).item(), loss, 1e-5 * loss);
  EXPECT_NEAR(r.result.box, items[0], 1e-5 * items[0]);
  EXPECT_NEAR(r.result.seg, items[1], 1e-5 * items[1]);
  EXPECT_NEAR(r.result.obj, items[2], 1e-5 * items[2]);
  EXPECT_NEAR(r.result.cls, items[3], 1e-5 * items[3]);
  EXPECT_GT(items[1], 0.0);
  for (int l = 0; l < 2; ++l)
    EXPECT_TRUE(close_to_reference(r.preds[l].grad(),
                                   safetensors_tensor(f, mode + ".grad.pred." + std::to_string(l))))
        << "level " << l;
  EXPECT_TRUE(close_to_reference(r.protos.grad().permute({0, 3, 1, 2}),
                                 safetensors_tensor(f, mode + ".grad.protos")));
}

}  // namespace

TEST(SegLoss, MatchesReferenceWithOverlapMasks) {
  const SafetensorsFile f = read_weights_file(kFixture);
  expect_matches_reference(f, "overlap", DType::F32, DType::U8);
  expect_matches_reference(f, "overlap", DType::F32, DType::F32);
  expect_matches_reference(f, "overlap", DType::F64, DType::U8);
}

TEST(SegLoss, MatchesReferenceWithPerTargetMasks) {
  const SafetensorsFile f = read_weights_file(kFixture);
  expect_matches_reference(f, "targets", DType::F32, DType::U8);
  expect_matches_reference(f, "targets", DType::F32, DType::F32);
  expect_matches_reference(f, "targets", DType::F64, DType::U8);
}

// The seg item is the difference the mask term makes: the two modes share box, obj and cls.
TEST(SegLoss, DetectionItemsAreDetections) {
  const SafetensorsFile f = read_weights_file(kFixture);
  const auto head = fixture_head(f);
  std::vector<Tensor> det;
  for (int l = 0; l < 2; ++l)
    det.push_back(safetensors_tensor(f, "pred." + std::to_string(l)).slice(4, 0, 8).contiguous());
  const LossResult d = ComputeLoss(*head, fixture_hyp())(det, safetensors_tensor(f, "targets"));
  const LossRun r = run(f, "overlap", DType::F32, DType::U8);
  EXPECT_EQ(r.result.box, d.box);
  EXPECT_EQ(r.result.obj, d.obj);
  EXPECT_EQ(r.result.cls, d.cls);
  EXPECT_NEAR(r.result.total.item(), (d.box + d.obj + d.cls + r.result.seg) * 2, 1e-5);
}

TEST(SegLoss, RefusesMasksThatDoNotCoverTheTargets) {
  const SafetensorsFile f = read_weights_file(kFixture);
  const auto head = fixture_head(f);
  const ComputeSegLoss loss(*head, fixture_hyp(), false);
  std::vector<Tensor> preds;
  for (int l = 0; l < 2; ++l) preds.push_back(safetensors_tensor(f, "pred." + std::to_string(l)));
  const Tensor protos = safetensors_tensor(f, "protos").permute({0, 2, 3, 1}).contiguous();
  const Tensor masks = safetensors_tensor(f, "masks.targets").slice(0, 0, 3);
  EXPECT_NE(kestrel::testing::error_of([&] {
              loss(preds, protos, safetensors_tensor(f, "targets"), masks);
            }).find("has no mask"),
            std::string::npos);
}
