// One training step of an instance-segmentation model against the reference's own (YOLOv5 v7.0),
// made by tests/scripts/segment_reference.py `step`: tests/data/yolov5n_seg_coco128_16.pt (a
// yolov5n-seg the reference trained, read by load_segmentation_weights) in training mode on a
// fixed batch both sides build from the same numbers (4 images of 160x160 from an integer formula,
// 15 boxes, overlap label masks at 40x40 as the loader makes them with --mask-ratio 4), the
// segmentation loss (utils/segment/loss.py ComputeLoss(overlap=True) with hyp.scratch-low scaled as
// segment/train.py scales it), backward, clip_grad_norm_(10) and one step of smart_optimizer(model,
// 'SGD', 0.01, 0.937, 5e-4). Compared: the loss and its items (box, seg, obj, cls), every
// parameter's gradient, the gradient norm (17, so the clip acts), the BatchNorm statistics the
// forward updated, every parameter after the step and the step itself (after minus before).
// - RecordedReference: against tests/data/yolov5n_seg_step_160_summary.safetensors (PyTorch 2.15):
//   the full step file is 24 MB (with --no-before), so the repository keeps the batch's targets and
//   masks, the loss, items and gradient norm, and per other tensor (the images too) its sum, norm
//   and largest magnitude and 64 of its values spread from first to last (`summarize`), and every
//   tensor is compared by those;
// - LiveReference: where PyTorch and the reference's source are present, the step is made now and
//   every element of every tensor is compared.
// Tolerances (float32 on both sides, sums taken in other orders): the loss within 2e-6 relative
// (seen: 1.7e-7), the items within 1e-5 relative (4e-7), the gradient norm within 1e-5 relative
// (1.9e-6), BatchNorm statistics within 1e-6 of their largest (1.7e-7), gradients within 6e-5 of
// their tensor's largest magnitude (seen: 3.6e-5, in backbone BatchNorm weights and biases: train-
// mode BatchNorm's backward sums 25600 products at 80x80 with cancellation; the reference's own
// float32 gradients are up to 5.0e-5 from its float64 ones on this step, and Kestrel's 5.2e-5).
// After the SGD step: at most 1 in 10000 parameters off by more than 1e-6 + 1e-5 |x| (seen: none),
// and the step itself (after minus before, lr (1 + momentum) times clipped gradient plus decay,
// which `after` shows only to the weights' scale) within 6e-5 of its largest plus 2.5e-7 of the
// parameter (two float32 roundings of after; seen: half of that allowance at most).
// The batch's boxes avoid the loss's ties (see segment_reference.py): a centre on a half grid
// cell makes build_targets' neighbour choice depend on the rounding of x * grid, which made the
// reference's float32 and float64 losses differ by 4% on a first, grid-aligned batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>

#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "engine/safetensors_tensors.h"
#include "tests/support/cli.h"
#include "tests/support/step_reference.h"
#include "yolo/model/segmentation_file.h"
#include "yolo/model/weights_file.h"
#include "yolo/train/loss.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/seg_loss.h"

namespace kestrel::yolo {
namespace {

namespace fs = std::filesystem;

const char* kWeights = "tests/data/yolov5n_seg_coco128_16.pt";
const char* kSummary = "tests/data/yolov5n_seg_step_160_summary.safetensors";
// Of a gradient's (or a step's) largest magnitude; see the top of the file.
constexpr double kGradTolerance = 6e-5;

// segment_reference.py's step batch: 4 images of 160, STEP_BOXES (image, class, x, y, w, h
// normalised; away from the loss's ties, see there), overlap masks at 40x40.
constexpr int64_t kBatch = 4, kImg = 160, kMask = 40;
struct Box {
  int image, cls;
  double x, y, w, h;
};
const Box kBoxes[] = {
    {0, 0, 0.331, 0.452, 0.46, 0.62},  {0, 15, 0.648, 0.457, 0.40, 0.38}, {0, 2, 0.721, 0.803, 0.16, 0.22},
    {1, 45, 0.497, 0.503, 0.98, 0.96}, {1, 1, 0.304, 0.276, 0.20, 0.14},  {1, 7, 0.701, 0.749, 0.38, 0.42},
    {1, 60, 0.153, 0.778, 0.22, 0.36}, {1, 79, 0.852, 0.198, 0.18, 0.20}, {2, 3, 0.507, 0.401, 0.52, 0.20},
    {2, 3, 0.376, 0.622, 0.16, 0.54},  {2, 56, 0.651, 0.149, 0.10, 0.22}, {2, 9, 0.074, 0.068, 0.10, 0.08},
    {3, 0, 0.503, 0.527, 0.30, 0.84},  {3, 62, 0.248, 0.749, 0.48, 0.46}, {3, 11, 0.777, 0.606, 0.44, 0.30},
};

// Pixel (b, c, y, x) of the step's images.
int pixel(int64_t b, int64_t c, int64_t y, int64_t x) {
  return static_cast<int>((37 * b + 61 * c + 3 * y + 2 * x + (x * y) / 16) % 256);
}

struct Batch {
  Tensor images_nchw;  // the pixels as doubles, NCHW: what the reference's `images` holds
  Tensor x;            // float32 NHWC, pixels / 255, as Kestrel's model takes it
  Tensor targets;      // float32 [15, 6]
  Tensor masks;        // float32 (4, 40, 40), overlap indices
};

Batch step_batch() {
  std::vector<double> nchw(kBatch * 3 * kImg * kImg);
  std::vector<float> nhwc(nchw.size());
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < kImg; ++y)
        for (int64_t x = 0; x < kImg; ++x) {
          const int v = pixel(b, c, y, x);
          nchw[((b * 3 + c) * kImg + y) * kImg + x] = v;
          nhwc[((b * kImg + y) * kImg + x) * 3 + c] = static_cast<float>(v / 255.0);
        }
  std::vector<float> targets, masks(kBatch * kMask * kMask, 0.0f);
  std::array<int, kBatch> count{};
  for (const Box& b : kBoxes) {
    for (double v : {static_cast<double>(b.image), static_cast<double>(b.cls), b.x, b.y, b.w, b.h})
      targets.push_back(static_cast<float>(v));
    // Pixels whose centre is inside the box hold its 1-based index in its image.
    const auto index = static_cast<float>(++count[b.image]);
    for (int64_t r = 0; r < kMask; ++r)
      for (int64_t c = 0; c < kMask; ++c)
        if (std::abs((c + 0.5) / kMask - b.x) < b.w / 2 && std::abs((r + 0.5) / kMask - b.y) < b.h / 2)
          masks[(b.image * kMask + r) * kMask + c] = index;
  }
  return {Tensor::from_vector(nchw, {kBatch, 3, kImg, kImg}), Tensor::from_vector(nhwc, {kBatch, kImg, kImg, 3}),
          Tensor::from_vector(targets, {static_cast<int64_t>(std::size(kBoxes)), 6}),
          Tensor::from_vector(masks, {kBatch, kMask, kMask})};
}

using testing::Difference;
using testing::file_layout;
using testing::summary_positions;
using testing::values;

// The classifier's reader, plus the step (after minus before) of each parameter.
class ReferenceStep : public testing::ReferenceStep {
 public:
  using testing::ReferenceStep::ReferenceStep;

  // The step (after minus before) of a parameter against the reference's, as the worst ratio of
  // |a - b| to what float32 allows: kGradTolerance of the step's largest magnitude (its gradient's
  // rounding) plus 2.5e-7 of the parameter (two float32 roundings of after, which cost a
  // parameter near 1 with a step near 1e-4 about 1e-3 of it). At most 1 passes. A summary's
  // samples, and its norm within the same allowance over the whole tensor.
  double compare_step(const std::string& name, const Tensor& kestrel_step, const Tensor& kestrel_after) const {
    const std::vector<double> a = values(kestrel_step), after = values(kestrel_after);
    std::vector<double> b, picked, picked_after;
    double scale = 0;
    if (summary_) {
      b = values(tensor("step." + name + ".samples"));
      for (size_t i : summary_positions(a.size())) picked.push_back(a[i]), picked_after.push_back(after[i]);
      scale = values(tensor("step." + name + ".stats"))[2];
    } else {
      b = values(tensor("step." + name)), picked = a, picked_after = after;
      for (double y : b) scale = std::max(scale, std::abs(y));
    }
    EXPECT_EQ(picked.size(), b.size()) << name;
    double worst = 0;
    for (size_t i = 0; i < std::min(picked.size(), b.size()); ++i)
      worst = std::max(worst, std::abs(picked[i] - b[i]) / (kGradTolerance * scale + 2.5e-7 * std::abs(picked_after[i])));
    if (summary_) {
      const double norm_b = values(tensor("step." + name + ".stats"))[1];
      const double after_norm = values(tensor("after." + name + ".stats"))[1];
      double sq = 0;
      for (double x : a) sq += x * x;
      worst = std::max(worst, std::abs(std::sqrt(sq) - norm_b) / (kGradTolerance * norm_b + 2.5e-7 * after_norm));
    }
    return worst;
  }

};

void expect_step_as_the_reference(const ReferenceStep& ref) {
  // The batch is the reference's: the same targets and masks, and the same pixels.
  const Batch batch = step_batch();
  EXPECT_EQ(values(batch.targets), values(ref.tensor("targets"))) << "targets";
  EXPECT_EQ(values(batch.masks), values(ref.tensor("masks"))) << "masks";
  EXPECT_EQ(ref.compare("images", batch.images_nchw).scaled, 0.0) << "images";

  LoadedSegmenter loaded = load_segmentation_weights(kWeights, Device::cpu());
  SegmentationModel& model = *loaded.model;
  model.train(true);
  for (auto& [name, p] : model.named_parameters()) p.set_requires_grad(true);

  // hyp.scratch-low (Hyp's defaults) scaled as segment/train.py scales it; label smoothing 0.
  const layers::Segment& head = model.segment();
  const Hyp hyp = scale_loss_hyp(Hyp{}, static_cast<int>(head.nl), model.nc(), static_cast<int>(kImg));
  const ComputeSegLoss compute_loss(head, hyp, /*overlap=*/true);
  const SegmentationModel::Output out = model.forward(batch.x);
  const SegLossResult loss = compute_loss(out.raw, out.protos, batch.targets, batch.masks);
  const double ref_loss = ref.tensor("loss").item();
  EXPECT_NEAR(loss.total.item(), ref_loss, 2e-6 * std::abs(ref_loss)) << "loss";
  const std::vector<double> ref_items = values(ref.tensor("items"));
  const std::array<double, 4> items = {loss.box, loss.seg, loss.obj, loss.cls};
  const char* item_names[] = {"box", "seg", "obj", "cls"};
  double worst_item = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(items[i], ref_items[i], 1e-5 * std::abs(ref_items[i])) << item_names[i] << " loss";
    worst_item = std::max(worst_item, std::abs(items[i] - ref_items[i]) / std::abs(ref_items[i]));
  }
  std::printf("loss %.9g (reference %.9g), worst item %.3g relative\n", loss.total.item(), ref_loss, worst_item);
  loss.total.backward();

  const double decay = scaled_weight_decay(Hyp{}.weight_decay, kBatch);  // 5e-4 * 4 * 16 / 64
  Optimizer optimizer = smart_optimizer(model, OptimizerKind::SGD, Hyp{}.lr0, Hyp{}.momentum, decay);
  const std::vector<Tensor> params = optimizer.parameters();
  const double ref_norm = ref.tensor("grad_norm").item();
  EXPECT_NEAR(grad_norm(params).item(), ref_norm, 1e-5 * ref_norm) << "gradient norm";
  std::printf("gradient norm %.9g (reference %.9g)\n", grad_norm(params).item(), ref_norm);

  int grads = 0, buffers = 0;
  double worst_grad = 0, worst_buffer = 0;
  std::string worst_grad_name;
  for (const layers::StateEntry& e : model.state_entries()) {
    if (e.is_parameter) {
      ASSERT_TRUE(ref.has("grad." + e.name)) << e.name;
      const double d = ref.compare("grad." + e.name, file_layout(e, e.slot->grad())).scaled;
      EXPECT_LE(d, kGradTolerance) << "gradient of " << e.name;
      if (d > worst_grad) worst_grad = d, worst_grad_name = e.name;
      ++grads;
    } else if (ref.has("buffers." + e.name) && is_floating(e.slot->dtype())) {
      const double d = ref.compare("buffers." + e.name, *e.slot).scaled;
      EXPECT_LE(d, 1e-6) << "buffer " << e.name;
      worst_buffer = std::max(worst_buffer, d);
      ++buffers;
    }
  }
  EXPECT_EQ(grads, 186);
  EXPECT_EQ(buffers, 121);
  std::printf("worst gradient difference %.3g of the tensor's largest (%s), worst BN statistic %.3g\n", worst_grad,
              worst_grad_name.c_str(), worst_buffer);

  autograd::NoGradGuard no_grad;
  std::map<std::string, Tensor> start;  // the parameters before the step
  for (const layers::StateEntry& e : model.state_entries())
    if (e.is_parameter) start[e.name] = e.slot->clone();
  clip_grad_norm(params, 10.0);
  optimizer.step();
  int64_t elements = 0, off = 0;
  int compared = 0;
  double worst_step = 0;
  std::string worst_step_name;
  for (const layers::StateEntry& e : model.state_entries()) {
    if (!e.is_parameter) continue;
    ASSERT_TRUE(ref.has("after." + e.name) && ref.has("step." + e.name)) << e.name;
    const Difference d = ref.compare("after." + e.name, file_layout(e, *e.slot));
    off += d.off, elements += d.elements, ++compared;
    // The step itself, to its own scale: lr (1 + momentum) times the clipped gradient plus decay.
    const double s =
        ref.compare_step(e.name, file_layout(e, ops::sub(*e.slot, start.at(e.name))), file_layout(e, *e.slot));
    EXPECT_LE(s, 1.0) << "step of " << e.name;
    if (s > worst_step) worst_step = s, worst_step_name = e.name;
  }
  EXPECT_EQ(compared, 186);
  std::printf("after the step: %lld of %lld parameters compared off by more than 1e-6; worst step difference %.3g of "
              "its allowance (%s)\n",
              static_cast<long long>(off), static_cast<long long>(elements), worst_step, worst_step_name.c_str());
  EXPECT_LE(off, std::max<int64_t>(1, elements / 10000)) << "parameters after the SGD step";
}

TEST(SegmentStepParity, RecordedReference) { expect_step_as_the_reference(ReferenceStep(kSummary, /*summary=*/true)); }

TEST(SegmentStepParity, LiveReference) {
  testing::Reference ref;
  const std::string missing = testing::find_reference(ref, {"torch", "yaml"}, "segment/train.py");
  if (!missing.empty()) GTEST_SKIP() << missing;
  const fs::path out = fs::temp_directory_path() / ("kestrel_segment_step_" + std::to_string(::getpid()) + ".safetensors");
  const testing::CliResult r = testing::run_reference_python(
      ref, std::string("tests/scripts/segment_reference.py step ") + kWeights + " " + out.string() + " --no-before");
  ASSERT_EQ(r.code, 0) << r.out;
  expect_step_as_the_reference(ReferenceStep(out.string(), /*summary=*/false));
  fs::remove(out);
}

}  // namespace
}  // namespace kestrel::yolo
