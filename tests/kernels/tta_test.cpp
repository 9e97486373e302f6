// Test-time augmentation on the CPU (kernels/tta.h): the reference's scale_img (torch's bilinear
// resize with align_corners=False, optionally mirrored left-right, padded with 0.447) against a
// naive float64 version written here from torch's definition, a hand-computed 2x2 -> 4x4 case,
// exact mirroring at scale 1, and _descale_pred (xywh / scale, then x -> img_w - x when mirrored).
#include "kernels/tta.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/support/testing.h"

using namespace kestrel;
using kernels::TtaScaleShape;

namespace {

// torch's upsample_bilinear2d, align_corners=False, in float64: source = (dst + 0.5) * in / out
// - 0.5 clamped at 0, neighbours floor(source) and the next one (clamped to the last index).
double naive_pixel(const std::vector<double>& x, const TtaScaleShape& s, int64_t b, int64_t i,
                   int64_t j, int64_t ch) {
  auto axis = [](int64_t dst, int64_t in, int64_t out, int64_t* i0, int64_t* i1, double* l) {
    double src = (static_cast<double>(dst) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
    if (src < 0) src = 0;
    *i0 = static_cast<int64_t>(std::floor(src));
    if (*i0 > in - 1) *i0 = in - 1;
    *i1 = *i0 + 1 < in ? *i0 + 1 : in - 1;
    *l = src - static_cast<double>(*i0);
  };
  int64_t y0, y1, x0, x1;
  double ly, lx;
  axis(i, s.in_h, s.out_h, &y0, &y1, &ly);
  axis(j, s.in_w, s.out_w, &x0, &x1, &lx);
  // The mirrored image: column q of it is column in_w - 1 - q of the input.
  auto at = [&](int64_t y, int64_t q) {
    const int64_t col = s.flip_lr ? s.in_w - 1 - q : q;
    return x[static_cast<size_t>(((b * s.in_h + y) * s.in_w + col) * s.c + ch)];
  };
  return (1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x1)) +
         ly * ((1 - lx) * at(y1, x0) + lx * at(y1, x1));
}

std::vector<double> naive_scale(const std::vector<double>& x, const TtaScaleShape& s) {
  std::vector<double> y;
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t i = 0; i < s.padded_h; ++i)
      for (int64_t j = 0; j < s.padded_w; ++j)
        for (int64_t ch = 0; ch < s.c; ++ch)
          y.push_back(i < s.out_h && j < s.out_w ? naive_pixel(x, s, b, i, j, ch)
                                                 : static_cast<double>(s.pad_value));
  return y;
}

// The kernel, in float or double, on values given as doubles.
std::vector<double> run_scale(DType t, const std::vector<double>& x, const TtaScaleShape& s) {
  const size_t out_n = static_cast<size_t>(s.n * s.padded_h * s.padded_w * s.c);
  if (t == DType::F32) {
    std::vector<float> xf(x.begin(), x.end()), y(out_n, -1000.0f);
    kernels::tta_scale_cpu(t, xf.data(), y.data(), s);
    return std::vector<double>(y.begin(), y.end());
  }
  std::vector<double> y(out_n, -1000.0);
  kernels::tta_scale_cpu(t, x.data(), y.data(), s);
  return y;
}

std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v(n);
  for (double& e : v) e = u(rng);
  return v;
}

// The reference's scale_img sizes: int(h * ratio), padded up to a multiple of gs.
TtaScaleShape reference_shape(int64_t n, int64_t h, int64_t w, int64_t c, double ratio, int64_t gs,
                              bool flip) {
  TtaScaleShape s;
  s.n = n;
  s.in_h = h;
  s.in_w = w;
  s.c = c;
  s.out_h = static_cast<int64_t>(h * ratio);
  s.out_w = static_cast<int64_t>(w * ratio);
  s.padded_h = static_cast<int64_t>(std::ceil(h * ratio / gs)) * gs;
  s.padded_w = static_cast<int64_t>(std::ceil(w * ratio / gs)) * gs;
  s.flip_lr = flip;
  return s;
}

::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want,
                                 double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(TtaScale, TwoByTwoToFourByFourByHand) {
  // torch.nn.functional.interpolate([[0, 1], [2, 3]], size=4, mode='bilinear',
  // align_corners=False): per axis the sources are 0, 0.25, 0.75, 1 (clamped at both ends).
  const std::vector<double> x = {0, 1, 2, 3};
  TtaScaleShape s;
  s.n = 1;
  s.in_h = s.in_w = 2;
  s.c = 1;
  s.out_h = s.out_w = s.padded_h = s.padded_w = 4;
  const std::vector<double> want = {0,   0.25, 0.75, 1,   0.5, 0.75, 1.25, 1.5,
                                    1.5, 1.75, 2.25, 2.5, 2,   2.25, 2.75, 3};
  for (DType t : {DType::F32, DType::F64}) EXPECT_EQ(run_scale(t, x, s), want) << dtype_name(t);
  // Mirrored: [[1, 0], [3, 2]] resized.
  s.flip_lr = true;
  const std::vector<double> mirrored = {1,   0.75, 0.25, 0,   1.5, 1.25, 0.75, 0.5,
                                        2.5, 2.25, 1.75, 1.5, 3,   2.75, 2.25, 2};
  for (DType t : {DType::F32, DType::F64}) EXPECT_EQ(run_scale(t, x, s), mirrored) << dtype_name(t);
}

TEST(TtaScale, DownscaleWithPaddingByHand) {
  // 1x4 -> 1x2 (scale 2): sources 0.5 and 2.5, i.e. the means of columns (0, 1) and (2, 3);
  // padded to width 4 and height 2 with 0.447.
  const std::vector<double> x = {1, 3, 10, 20};
  TtaScaleShape s;
  s.n = 1;
  s.in_h = 1;
  s.in_w = 4;
  s.c = 1;
  s.out_h = 1;
  s.out_w = 2;
  s.padded_h = 2;
  s.padded_w = 4;
  const double pad = static_cast<double>(0.447f);
  EXPECT_EQ(run_scale(DType::F64, x, s), (std::vector<double>{2, 15, pad, pad, pad, pad, pad, pad}));
  s.flip_lr = true;
  s.pad_value = 0.5f;
  EXPECT_EQ(run_scale(DType::F32, x, s), (std::vector<double>{15, 2, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}));
}

TEST(TtaScale, ReferenceScalesMatchTheNaiveResize) {
  // The reference's --augment scales (1, 0.83, 0.67) and flips (None, lr, None), and a few
  // upscales, on small NHWC batches with 3 channels; gs 8 pads the scaled sizes.
  int cases = 0;
  for (auto [h, w] : {std::pair<int64_t, int64_t>{16, 24}, {13, 7}, {5, 9}, {1, 6}}) {
    for (double ratio : {1.0, 0.83, 0.67, 0.5, 1.5, 2.0}) {
      for (bool flip : {false, true}) {
        TtaScaleShape s = reference_shape(2, h, w, 3, ratio, 8, flip);
        if (s.out_h < 1 || s.out_w < 1) continue;
        const std::vector<double> x = random_values(static_cast<size_t>(2 * h * w * 3), 7 + cases);
        const std::vector<double> want = naive_scale(x, s);
        SCOPED_TRACE(::testing::Message() << h << "x" << w << " ratio " << ratio << " flip " << flip
                                          << " -> " << s.out_h << "x" << s.out_w << " padded "
                                          << s.padded_h << "x" << s.padded_w);
        EXPECT_TRUE(close(run_scale(DType::F64, x, s), want, 1e-14));
        EXPECT_TRUE(close(run_scale(DType::F32, x, s), want, 2e-6));
        ++cases;
      }
    }
  }
  EXPECT_GE(cases, 40);
}

TEST(TtaScale, UnchangedSizeCopiesOrMirrorsExactly) {
  const int64_t n = 2, h = 3, w = 5, c = 2;
  const std::vector<double> x = random_values(static_cast<size_t>(n * h * w * c), 3);
  TtaScaleShape s;
  s.n = n;
  s.in_h = s.out_h = s.padded_h = h;
  s.in_w = s.out_w = s.padded_w = w;
  s.c = c;
  EXPECT_EQ(run_scale(DType::F64, x, s), x);
  s.flip_lr = true;
  std::vector<double> mirrored;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j)
        for (int64_t ch = 0; ch < c; ++ch)
          mirrored.push_back(x[static_cast<size_t>(((b * h + i) * w + (w - 1 - j)) * c + ch)]);
  EXPECT_EQ(run_scale(DType::F64, x, s), mirrored);
  // Same size, but padded: the copy plus a border of pad values.
  s.flip_lr = false;
  s.padded_h = h + 1;
  s.padded_w = w + 2;
  const std::vector<double> y = run_scale(DType::F64, x, s);
  ASSERT_EQ(y.size(), static_cast<size_t>(n * (h + 1) * (w + 2) * c));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < h + 1; ++i)
      for (int64_t j = 0; j < w + 2; ++j)
        for (int64_t ch = 0; ch < c; ++ch) {
          const double got = y[static_cast<size_t>(((b * (h + 1) + i) * (w + 2) + j) * c + ch)];
          const double want = i < h && j < w ? x[static_cast<size_t>(((b * h + i) * w + j) * c + ch)]
                                             : static_cast<double>(0.447f);
          ASSERT_EQ(got, want) << b << " " << i << " " << j << " " << ch;
        }
}

TEST(TtaScale, BilinearTapFollowsTorch) {
  // 4 -> 2: sources 0.5 and 2.5.
  auto t = kernels::bilinear_tap<double>(0, 4, 2);
  EXPECT_EQ(t.i0, 0);
  EXPECT_EQ(t.i1, 1);
  EXPECT_EQ(t.w0, 0.5);
  EXPECT_EQ(t.w1, 0.5);
  t = kernels::bilinear_tap<double>(1, 4, 2);
  EXPECT_EQ(t.i0, 2);
  EXPECT_EQ(t.i1, 3);
  // 2 -> 4: source -0.25 clamps to 0; source 1.25 has no right neighbour.
  t = kernels::bilinear_tap<double>(0, 2, 4);
  EXPECT_EQ(t.i0, 0);
  EXPECT_EQ(t.i1, 1);
  EXPECT_EQ(t.w0, 1.0);
  EXPECT_EQ(t.w1, 0.0);
  t = kernels::bilinear_tap<double>(3, 2, 4);
  EXPECT_EQ(t.i0, 1);
  EXPECT_EQ(t.i1, 1);
  EXPECT_EQ(t.w0, 0.75);
  EXPECT_EQ(t.w1, 0.25);
  // 10 -> 3 (scale 10/3): dst 2 reads source 7.8333...
  const auto f = kernels::bilinear_tap<double>(2, 10, 3);
  EXPECT_EQ(f.i0, 7);
  EXPECT_EQ(f.i1, 8);
  EXPECT_NEAR(f.w1, 5.0 / 6.0, 1e-14);
  EXPECT_NEAR(f.w0 + f.w1, 1.0, 1e-15);
  EXPECT_EQ(kernels::tta_source_column(0, 10, true), 9);
  EXPECT_EQ(kernels::tta_source_column(9, 10, true), 0);
  EXPECT_EQ(kernels::tta_source_column(4, 10, false), 4);
}

TEST(TtaDescale, DividesBoxesByTheScaleAndUnmirrorsX) {
  const int64_t rows = 5, no = 8;
  const std::vector<double> p = [&] {
    std::vector<double> v = random_values(static_cast<size_t>(rows * no), 9);
    for (double& e : v) e *= 500;
    return v;
  }();
  for (bool flip : {false, true}) {
    for (double scale : {1.0, 0.83, 0.67}) {
      SCOPED_TRACE(::testing::Message() << "flip " << flip << " scale " << scale);
      const double img_w = 640;
      // float64: the reference's formulas exactly.
      std::vector<double> d = p;
      kernels::tta_descale_cpu(DType::F64, d.data(), rows, no, scale, flip, img_w);
      // float32: the same operations in float.
      std::vector<float> f(p.begin(), p.end());
      kernels::tta_descale_cpu(DType::F32, f.data(), rows, no, scale, flip, img_w);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t col = 0; col < no; ++col) {
          const size_t k = static_cast<size_t>(r * no + col);
          double want = p[k];
          float want_f = static_cast<float>(p[k]);
          if (col < 4) {
            want /= scale;
            want_f /= static_cast<float>(scale);
            if (col == 0 && flip) {
              want = img_w - want;
              want_f = static_cast<float>(img_w) - want_f;
            }
          }
          EXPECT_EQ(d[k], want) << "row " << r << " col " << col;
          EXPECT_EQ(f[k], want_f) << "row " << r << " col " << col;
        }
      }
    }
  }
  // A hand case: x 100, y 50, w 20, h 10 at scale 0.5 in a mirrored pass of a 640-wide image.
  std::vector<double> one = {100, 50, 20, 10, 0.9, 0.1};
  kernels::tta_descale_cpu(DType::F64, one.data(), 1, 6, 0.5, true, 640);
  EXPECT_EQ(one, (std::vector<double>{440, 100, 40, 20, 0.9, 0.1}));
  // No rows: nothing happens.
  kernels::tta_descale_cpu(DType::F64, nullptr, 0, 6, 0.5, true, 640);
}

TEST(Tta, HalfPrecisionIsRefusedOnTheCpu) {
  std::vector<uint16_t> buf(16, 0);
  TtaScaleShape s;
  s.n = s.in_h = s.in_w = s.c = s.out_h = s.out_w = s.padded_h = s.padded_w = 1;
  std::string msg = kestrel::testing::error_of([&] { kernels::tta_scale_cpu(DType::F16, buf.data(), buf.data(), s); });
  EXPECT_NE(msg.find("tta_scale"), std::string::npos) << msg;
  msg = kestrel::testing::error_of([&] { kernels::tta_descale_cpu(DType::BF16, buf.data(), 1, 6, 0.5, false, 640); });
  EXPECT_NE(msg.find("tta_descale"), std::string::npos) << msg;
}
