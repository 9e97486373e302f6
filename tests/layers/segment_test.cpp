// The segmentation head: Proto (shapes, parameter and module counts, the reference's state-dict
// names and order, gradients against finite differences in float64) and Segment (its state-dict
// names, output and decode shapes, mask coefficients left raw by the decode, and its box and class
// channels computing exactly what a Detect with the same weights computes). The reference's names
// and counts were printed by YOLOv5 v7.0's Proto(16, 8, 4) and Segment(3, anchors of two levels,
// 4, 8, [8, 16]) on PyTorch 2.15 (tests/scripts/segment_reference.py's environment).
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops/concat.h"
#include "layers/segment.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::layers;
using kestrel::testing::all_close;
using kestrel::testing::error_of;
using kestrel::testing::random_tensor;

namespace {

std::vector<std::string> state_names(Module& m) {
  std::vector<std::string> out;
  for (const StateEntry& e : m.state_entries()) out.push_back(e.name);
  return out;
}

std::vector<std::string> conv_block_names(const std::string& prefix) {
  std::vector<std::string> out;
  for (const char* leaf : {"conv.weight", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                           "bn.num_batches_tracked"})
    out.push_back(prefix + leaf);
  return out;
}

const std::vector<std::vector<double>> kAnchors = {{10, 13, 16, 30, 33, 23}, {30, 61, 62, 45, 59, 119}};

// Channels [from, to) of every level's raw output (batch, na, ny, nx, no) as the decode lays them
// out: (batch, Σ na·ny·nx, to - from).
Tensor channels_of_levels(const std::vector<Tensor>& raw, int64_t from, int64_t to) {
  std::vector<Tensor> levels;
  for (const Tensor& r : raw)
    levels.push_back(
        r.slice(4, from, to).contiguous().reshape({r.size(0), r.size(1) * r.size(2) * r.size(3), to - from}));
  return ops::concat(levels, 1);
}

// Rows of a (na·no_from, ...) head tensor for each anchor's first `keep` outputs.
Tensor anchor_rows(const Tensor& t, int64_t na, int64_t no_from, int64_t keep) {
  std::vector<Tensor> rows;
  for (int64_t a = 0; a < na; ++a) rows.push_back(t.slice(0, a * no_from, a * no_from + keep));
  return ops::concat(rows, 0);
}

}  // namespace

TEST(Proto, ShapesCountsAndTheReferencesStateDictNames) {
  Generator gen(3);
  Proto p(16, 8, 4, gen);
  EXPECT_EQ(p.type_name(), "models.common.Proto");
  EXPECT_EQ(p.parameter_count(), 1800);  // the reference's
  EXPECT_EQ(p.module_count(), 11);       // the reference's 12, less the Conv blocks' shared SiLU
  std::vector<std::string> names;
  for (const char* cv : {"cv1.", "cv2.", "cv3."})
    for (const std::string& n : conv_block_names(cv)) names.push_back(n);
  EXPECT_EQ(state_names(p), names);
  EXPECT_EQ(p.cv1->conv->kernel, 3);
  EXPECT_EQ(p.cv2->conv->kernel, 3);
  EXPECT_EQ(p.cv3->conv->kernel, 1);
  const Tensor y = p.forward(random_tensor({2, 6, 10, 16}, 1, DType::F32));
  EXPECT_EQ(y.shape(), (Shape{2, 12, 20, 4}));
}

TEST(Proto, GradientsMatchFiniteDifferences) {
  Generator gen(5);
  Proto p(3, 4, 2, gen);
  std::vector<Tensor> inputs = {random_tensor({2, 3, 3, 3}, 11).set_requires_grad()};
  for (const StateEntry& e : p.state_entries()) {  // every tensor in float64; parameters checked too
    if (e.slot->dtype() != DType::F32) continue;
    *e.slot = e.slot->detach().to(DType::F64).contiguous();
    if (e.is_parameter) inputs.push_back(e.slot->set_requires_grad());
  }
  ASSERT_EQ(inputs.size(), 10u);  // x, then 3 x (conv weight, bn weight, bn bias)
  // Training mode: batch statistics, so every parameter reaches the output.
  EXPECT_TRUE(kestrel::testing::gradcheck([&](const std::vector<Tensor>& in) { return p.forward(in[0]); }, inputs,
                                          {1e-6, 1e-6, 1e-5}));
}

TEST(Segment, TheReferencesStateDictNamesAndCounts) {
  Generator gen(1);
  Segment s(3, kAnchors, 4, 8, {8, 16}, gen);
  EXPECT_EQ(s.type_name(), "models.yolo.Segment");
  EXPECT_EQ(s.no, 3 + 5 + 4);
  EXPECT_EQ(s.nm, 4);
  EXPECT_EQ(s.npr, 8);
  EXPECT_EQ(s.parameter_count(), 2160);  // the reference's
  EXPECT_EQ(s.module_count(), 15);       // the reference's 16, less the shared SiLU
  std::vector<std::string> names = {"anchors", "m.0.weight", "m.0.bias", "m.1.weight", "m.1.bias"};
  for (const char* cv : {"proto.cv1.", "proto.cv2.", "proto.cv3."})
    for (const std::string& n : conv_block_names(cv)) names.push_back(n);
  EXPECT_EQ(state_names(s), names);
  EXPECT_EQ(s.convs[0]->out_channels, 3 * 12);
  EXPECT_EQ(s.proto->cv1->conv->in_channels, 8);  // Proto reads the first level
  EXPECT_NE(error_of([&] { Segment(3, kAnchors, 0, 8, {8, 16}, gen); }), "");
  EXPECT_NE(error_of([&] { Segment(3, kAnchors, 4, 0, {8, 16}, gen); }), "");
}

TEST(Segment, OutputsPrototypesAndDecodesWithRawMaskCoefficients) {
  Generator gen(2);
  Segment s(3, kAnchors, 4, 8, {8, 16}, gen);
  s.set_strides({8, 16});
  const std::vector<Tensor> xs = {random_tensor({2, 8, 6, 8}, 3, DType::F32),
                                  random_tensor({2, 4, 3, 16}, 4, DType::F32)};
  autograd::NoGradGuard no_grad;
  s.train(false);
  const Segment::Output out = s.forward(xs);
  ASSERT_EQ(out.raw.size(), 2u);
  EXPECT_EQ(out.raw[0].shape(), (Shape{2, 3, 8, 6, 12}));
  EXPECT_EQ(out.raw[1].shape(), (Shape{2, 3, 4, 3, 12}));
  EXPECT_EQ(out.protos.shape(), (Shape{2, 16, 12, 4}));  // NHWC, twice the first level's size
  const Tensor decoded = s.decode(out.raw);
  ASSERT_EQ(decoded.shape(), (Shape{2, 3 * 48 + 3 * 12, 12}));
  // The last nm channels are the raw coefficients, level by level in (anchor, y, x) order.
  const Tensor masks = decoded.slice(2, 8, 12).contiguous();
  const Tensor raw_masks = channels_of_levels(out.raw, 8, 12);
  EXPECT_TRUE(all_close(masks, raw_masks, 0, 0));
  // The rest are sigmoids: confidence and classes in (0, 1).
  const std::vector<float> scores = decoded.slice(2, 4, 8).contiguous().to_vector<float>();
  for (float v : scores) EXPECT_TRUE(v > 0 && v < 1) << v;
}

TEST(Segment, ItsBoxAndClassChannelsAreADetectsWithTheSameWeights) {
  Generator gen(6);
  Segment s(3, kAnchors, 4, 8, {8, 16}, gen);
  Detect d(3, kAnchors, {8, 16}, gen);  // nm = 0: detection's head
  ASSERT_EQ(d.no, 8);
  ASSERT_EQ(d.nm, 0);
  s.set_strides({8, 16});
  d.set_strides({8, 16});
  autograd::NoGradGuard no_grad;
  for (size_t l = 0; l < 2; ++l) {  // the Detect part of each anchor's outputs
    d.convs[l]->weight.copy_(anchor_rows(s.convs[l]->weight, 3, 12, 8));
    d.convs[l]->bias.copy_(anchor_rows(s.convs[l]->bias, 3, 12, 8));
  }
  EXPECT_TRUE(all_close(d.anchors, s.anchors, 0, 0));
  const std::vector<Tensor> xs = {random_tensor({1, 8, 8, 8}, 7, DType::F32),
                                  random_tensor({1, 4, 4, 16}, 8, DType::F32)};
  s.train(false);
  d.train(false);
  const std::vector<Tensor> raw_s = s.forward(xs).raw, raw_d = d.forward(xs);
  for (size_t l = 0; l < 2; ++l)
    EXPECT_TRUE(all_close(raw_s[l].slice(4, 0, 8).contiguous(), raw_d[l], 1e-6, 1e-6)) << l;
  EXPECT_TRUE(all_close(s.decode(raw_s).slice(2, 0, 8).contiguous(), d.decode(raw_d), 1e-5, 1e-6));
}
