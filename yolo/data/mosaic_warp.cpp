#include "yolo/data/mosaic_warp.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <emmintrin.h>
#include <immintrin.h>
#include <vector>

#include "base/error.h"
#include "yolo/data/augment.h"

namespace kestrel::yolo::data {
namespace {

// OpenCV's warp constants: 1/32-pixel cells (INTER_BITS 5), positions in 1/1024 (AB_BITS 10)
// rounded to the cell's centre, 15-bit bilinear weights (INTER_REMAP_COEF_BITS).
constexpr int kInterBits = 5, kCells = 1 << kInterBits;
constexpr int kAbBits = 10;
constexpr double kAbScale = 1 << kAbBits;
constexpr int kRoundDelta = (1 << kAbBits) / kCells / 2;
constexpr int kCoefBits = 15, kCoefScale = 1 << kCoefBits;

// saturate_cast<int>(double): round half to even, clamped.
int round_to_int(double v) {
  const double r = std::nearbyint(v);
  return r >= INT_MAX ? INT_MAX : r <= INT_MIN ? INT_MIN : static_cast<int>(r);
}
int saturate_short(int v) { return std::clamp(v, int{SHRT_MIN}, int{SHRT_MAX}); }

// The four weights (top-left, top-right, bottom-left, bottom-right) of each 1/32 x 1/32 cell, as
// OpenCV's initInterTab2D makes them: float products rounded to 15 bits; where they do not sum to
// 32768 (only the cell (0, 0), whose 1.0 saturates to 32767) the bottom-right tap takes the rest.
struct BilinearTable {
  int16_t w[kCells * kCells][4];
  BilinearTable() {
    const float scale = 1.f / kCells;
    for (int i = 0; i < kCells; ++i)
      for (int j = 0; j < kCells; ++j) {
        const float fy[2] = {1.f - i * scale, i * scale}, fx[2] = {1.f - j * scale, j * scale};
        int16_t* t = w[i * kCells + j];
        int sum = 0;
        for (int k = 0; k < 4; ++k) {
          const float v = fy[k / 2] * fx[k % 2] * kCoefScale;
          t[k] = static_cast<int16_t>(std::clamp(std::lrint(v), long{SHRT_MIN}, long{SHRT_MAX}));
          sum += t[k];
        }
        t[3] = static_cast<int16_t>(t[3] + kCoefScale - sum);
      }
  }
};

const BilinearTable& bilinear_table() {
  static const BilinearTable table;  // immutable after its thread-safe construction
  return table;
}

// The canvas as a function of its pixel: a tile's pixel or the grey pad.
struct Canvas {
  struct Tile {
    const uint8_t* data;  // the tile's pixel (0, 0), at canvas (dx, dy)
    size_t step;
    int dx, dy;
    int x1, y1, x2, y2;
    // Canvas pixel (x, y) of this tile; offsets are taken from `data` itself, never from a base
    // moved outside the tile's allocation.
    const uint8_t* at(int x, int y) const {
      return data + static_cast<ptrdiff_t>(y - dy) * static_cast<ptrdiff_t>(step) + 3 * (x - dx);
    }
  };
  Tile tiles[4];
  int size, xc, yc;
  uint8_t grey[3] = {kPadValue, kPadValue, kPadValue};

  const Tile& quadrant(int x, int y) const { return tiles[(y >= yc) * 2 + (x >= xc)]; }
  const uint8_t* pixel(int x, int y) const {
    if (static_cast<unsigned>(x) >= static_cast<unsigned>(size) ||
        static_cast<unsigned>(y) >= static_cast<unsigned>(size))
      return grey;
    const Tile& t = quadrant(x, y);
    if (x < t.x1 || x >= t.x2 || y < t.y1 || y >= t.y2) return grey;
    return t.at(x, y);
  }
};

// Canvas row r for the columns [lo, lo + n), 3 bytes a pixel, into buf.
void canvas_row(const Canvas& c, int r, int lo, int n, uint8_t* buf) {
  std::memset(buf, kPadValue, 3 * static_cast<size_t>(n));
  if (r < 0 || r >= c.size) return;
  for (int q = r < c.yc ? 0 : 2; q < (r < c.yc ? 2 : 4); ++q) {
    const Canvas::Tile& t = c.tiles[q];
    const int x1 = std::max(t.x1, lo), x2 = std::min(t.x2, lo + n);
    if (r < t.y1 || r >= t.y2 || x2 <= x1) continue;
    std::memcpy(buf + 3 * (x1 - lo), t.at(x1, r),
                3 * static_cast<size_t>(x2 - x1));
  }
}

// The separable warp's two passes with AVX2, chosen at run time (the SSE2 loops below serve other
// CPUs). Horizontal: four output pixels a step, two per 128-bit lane; each lane loads the 16 canvas
// bytes from its pair's leftmost tap, a per-pair byte shuffle lines up (left, right) tap pairs per
// channel and pmaddubsw applies ((32 - cx), cx): the same sums as the SSE2 products.
__attribute__((target("avx2"))) void horizontal_avx2(const uint8_t* src, const int* pair_base,
                                                     const uint8_t* masks, const uint8_t* weights,
                                                     int quads, int16_t* dst) {
  const __m256i compact = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
  for (int q = 0; q < quads; ++q) {
    const __m256i bytes = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + pair_base[2 * q]))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + pair_base[2 * q + 1])), 1);
    const __m256i taps = _mm256_shuffle_epi8(
        bytes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(masks + 32 * q)));
    const __m256i sums = _mm256_maddubs_epi16(
        taps, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + 32 * q)));
    // Six sums a lane (two pixels), then 12 contiguous; the 4 spare values at the end are written
    // over by the next step (the row has room for them).
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 12 * q),
                        _mm256_permutevar8x32_epi32(sums, compact));
  }
}

// Vertical: ((32 - cy) top + cy bottom + 512) >> 10 as pmaddwd on interleaved (top, bottom) pairs,
// 32 values a step; returns how many it did (the caller finishes the rest).
__attribute__((target("avx2"))) int vertical_avx2(const int16_t* top, const int16_t* bottom, int a,
                                                  int b, int n, uint8_t* dst) {
  const __m256i w = _mm256_set1_epi32((b << 16) | a), round = _mm256_set1_epi32(512);
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i half[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(top + i + 16 * k));
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bottom + i + 16 * k));
      const __m256i lo = _mm256_srai_epi32(
          _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi16(t, u), w), round), 10);
      const __m256i hi = _mm256_srai_epi32(
          _mm256_add_epi32(_mm256_madd_epi16(_mm256_unpackhi_epi16(t, u), w), round), 10);
      // Back in the order of t: unpack and pack both work per 128-bit lane.
      half[k] = _mm256_packs_epi32(lo, hi);
    }
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(half[0], half[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bytes);
  }
  return i;
}

bool has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

// The warp when neither rotation nor shear mixes the axes (the default hyperparameters): the
// source column and its 1/32 cell depend on the output column only, the source row and its cell on
// the output row only, so it runs as a resize does: each canvas row is interpolated horizontally
// once, then pairs of those rows vertically. OpenCV's table weights are the products
// 32 (32 - cy or cy)(32 - cx or cx) exactly (the cell (0, 0)'s 32767 + 1 rounds as 32768 does: the
// stray unit moves a sum by less than half a step), so (sum + 2^14) >> 15 equals
// ((32 - cy) h0 + cy h1 + 512) >> 10 with h the horizontal sums (32 - cx) a + cx b: the same bits.
void warp_separable(const Canvas& canvas, const std::vector<int>& sx, const std::vector<int>& cx,
                    double m4, double m5, cv::Mat& out, bool flip_ud) {
  const int out_w = out.cols, out_h = out.rows;
  const int lo = *std::min_element(sx.begin(), sx.end());
  const int n = *std::max_element(sx.begin(), sx.end()) - lo + 2;
  // The row buffer and the interpolated rows have slack at the end: each pixel reads 8 bytes and
  // writes 4 lanes (the fourth is the next pixel's, written over by it); an AVX2 pair reads 16
  // bytes and a step writes 16 lanes.
  std::vector<uint8_t> row(3 * static_cast<size_t>(n) + 16);
  std::vector<int> offset(out_w);
  std::vector<int16_t> weights(8 * static_cast<size_t>(out_w));  // per x: 4 x (32 - cx), 4 x cx
  for (int x = 0; x < out_w; ++x) {
    offset[x] = 3 * (sx[x] - lo);
    std::fill_n(weights.begin() + 8 * x, 4, static_cast<int16_t>(kCells - cx[x]));
    std::fill_n(weights.begin() + 8 * x + 4, 4, static_cast<int16_t>(cx[x]));
  }
  // Two horizontally interpolated canvas rows, kept while consecutive output rows reuse them.
  std::vector<int16_t> h[2] = {std::vector<int16_t>(3 * out_w + 16),
                               std::vector<int16_t>(3 * out_w + 16)};
  // The AVX2 horizontal pass on the first 4 * quads pixels, where each pair's taps lie within 16
  // bytes (always at the default scales 0.5-1.5; else the SSE2 loop takes the whole row).
  int quads = has_avx2() ? out_w / 4 : 0;
  std::vector<int> pair_base(2 * static_cast<size_t>(quads));
  std::vector<uint8_t> masks(32 * static_cast<size_t>(quads)),
      pair_weights(32 * static_cast<size_t>(quads));
  for (int j = 0; j < 2 * quads; ++j) {
    const int o0 = offset[2 * j], o1 = offset[2 * j + 1], base = std::min(o0, o1);
    if (std::max(o0, o1) - base > 10) {
      quads = 0;
      break;
    }
    pair_base[j] = base;
    uint8_t* m = masks.data() + 16 * j;
    uint8_t* w = pair_weights.data() + 16 * j;
    for (int k = 0; k < 2; ++k) {
      const int d = (k ? o1 : o0) - base, c = cx[2 * j + k];
      for (int ch = 0; ch < 3; ++ch) {
        m[6 * k + 2 * ch] = static_cast<uint8_t>(d + ch),
                      m[6 * k + 2 * ch + 1] = static_cast<uint8_t>(d + ch + 3);
        w[6 * k + 2 * ch] = static_cast<uint8_t>(kCells - c),
                      w[6 * k + 2 * ch + 1] = static_cast<uint8_t>(c);
      }
    }
    std::fill(m + 12, m + 16, uint8_t{0x80});
    std::fill(w + 12, w + 16, uint8_t{0});
  }
  int h_row[2] = {INT_MIN, INT_MIN};
  auto horizontal = [&](int r, int16_t* dst) {
    canvas_row(canvas, r, lo, n, row.data());
    const uint8_t* src = row.data();
    const __m128i zero = _mm_setzero_si128();
    if (quads > 0)
      horizontal_avx2(src, pair_base.data(), masks.data(), pair_weights.data(), quads, dst);
    for (int x = 4 * quads; x < out_w; ++x) {
      // Bytes B G R of the pixel and of its right neighbour as 16-bit lanes 0-2 and 3-5; the
      // neighbour moved to lanes 4-6, both scaled by their weight, the halves added.
      const __m128i v = _mm_unpacklo_epi8(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + offset[x])), zero);
      const __m128i pair = _mm_unpacklo_epi64(v, _mm_srli_si128(v, 6));
      const __m128i scaled = _mm_mullo_epi16(
          pair, _mm_loadu_si128(reinterpret_cast<const __m128i*>(weights.data() + 8 * x)));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 3 * x),
                       _mm_add_epi16(scaled, _mm_srli_si128(scaled, 8)));
    }
  };
  auto interpolated = [&](int r) -> const int16_t* {
    for (int k = 0; k < 2; ++k)
      if (h_row[k] == r) return h[k].data();
    const int k = h_row[0] == r - 1 ? 1 : 0;  // keep the row above: it is the pair's other half
    horizontal(r, h[k].data());
    h_row[k] = r;
    return h[k].data();
  };
  for (int y = 0; y < out_h; ++y) {
    const int Y = (round_to_int((m4 * y + m5) * kAbScale) + kRoundDelta) >> (kAbBits - kInterBits);
    const int sy = saturate_short(Y >> kInterBits), b = Y & (kCells - 1), a = kCells - b;
    const int16_t* top = interpolated(sy);
    const int16_t* bottom = interpolated(sy + 1);
    uint8_t* dst = out.ptr<uint8_t>(flip_ud ? out_h - 1 - y : y);
    const int done = has_avx2() ? vertical_avx2(top, bottom, a, b, 3 * out_w, dst) : 0;
    for (int i = done; i < 3 * out_w; ++i)
      dst[i] = static_cast<uint8_t>((a * top[i] + b * bottom[i] + 512) >> 10);
  }
}

}  // namespace

std::array<TilePlacement, 4> place_tiles(const std::array<cv::Size, 4>& sizes, int s, int xc,
                                         int yc) {
  KESTREL_CHECK(s > 0 && xc >= 0 && xc <= 2 * s && yc >= 0 && yc <= 2 * s,
                "place_mosaic: centre (", xc, ", ", yc, ") must lie on the 2s canvas, s = ", s);
  std::array<TilePlacement, 4> out;
  for (int i = 0; i < 4; ++i) {
    const int w = sizes[i].width, h = sizes[i].height;
    KESTREL_CHECK(w > 0 && h > 0 && w <= s && h <= s, "place_mosaic: tile ", i,
                  " must have long side <= ", s, ", got ", w, "x", h);
    // (a) the tile's rectangle on the canvas, (b) the part of the tile that fills it.
    int x1a, y1a, x2a, y2a, x1b, y1b;
    if (i == 0) {
      x1a = std::max(xc - w, 0), y1a = std::max(yc - h, 0), x2a = xc, y2a = yc;
      x1b = w - (x2a - x1a), y1b = h - (y2a - y1a);
    } else if (i == 1) {
      x1a = xc, y1a = std::max(yc - h, 0), x2a = std::min(xc + w, 2 * s), y2a = yc;
      x1b = 0, y1b = h - (y2a - y1a);
    } else if (i == 2) {
      x1a = std::max(xc - w, 0), y1a = yc, x2a = xc, y2a = std::min(2 * s, yc + h);
      x1b = w - (x2a - x1a), y1b = 0;
    } else {
      x1a = xc, y1a = yc, x2a = std::min(xc + w, 2 * s), y2a = std::min(2 * s, yc + h);
      x1b = 0, y1b = 0;
    }
    out[i] = {x1a, y1a, x2a, y2a, x1a - x1b, y1a - y1b};
  }
  return out;
}

cv::Mat warp_mosaic_affine(const std::array<cv::Mat, 4>& tiles,
                           const std::array<TilePlacement, 4>& placement, int s, int xc, int yc,
                           const cv::Matx23d& M, int out_w, int out_h, bool flip_lr,
                           bool flip_ud, cv::Mat into) {
  KESTREL_CHECK(out_w > 0 && out_h > 0, "warp_mosaic_affine: empty output ", out_w, "x", out_h);
  Canvas canvas{{}, 2 * s, xc, yc};
  for (int i = 0; i < 4; ++i) {
    const cv::Mat& t = tiles[i];
    const TilePlacement& p = placement[i];
    KESTREL_CHECK(t.type() == CV_8UC3 && t.cols >= p.x2 - p.dx && t.rows >= p.y2 - p.dy,
                  "warp_mosaic_affine: tile ", i, " (", t.cols, "x", t.rows,
                  ") does not cover its placement");
    canvas.tiles[i] = {t.data, t.step, p.dx, p.dy, p.x1, p.y1, p.x2, p.y2};
  }
  // cv::warpAffine maps output to source through the inverse of M, inverted this way.
  double m[6] = {M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2)};
  double d = m[0] * m[4] - m[1] * m[3];
  d = d != 0 ? 1. / d : 0;
  const double a11 = m[4] * d, a22 = m[0] * d;
  m[0] = a11, m[1] *= -d, m[3] *= -d, m[4] = a22;
  const double b1 = -m[0] * m[2] - m[1] * m[5], b2 = -m[3] * m[2] - m[4] * m[5];
  m[2] = b1, m[5] = b2;

  std::vector<int> adelta(out_w), bdelta(out_w);
  for (int x = 0; x < out_w; ++x) {
    adelta[x] = round_to_int(m[0] * x * kAbScale);
    bdelta[x] = round_to_int(m[3] * x * kAbScale);
  }
  cv::Mat out = into;
  out.create(out_h, out_w, CV_8UC3);  // keeps `into` when it has this shape
  // Without rotation or shear: the separable form (same bits), else the general loop.
  const int x_row0 = round_to_int((m[1] * 0 + m[2]) * kAbScale) + kRoundDelta;
  if (m[1] == 0 && std::all_of(bdelta.begin(), bdelta.end(), [](int v) { return v == 0; })) {
    std::vector<int> sx(out_w), cx(out_w);
    for (int x = 0; x < out_w; ++x) {
      const int X = (x_row0 + adelta[x]) >> (kAbBits - kInterBits);
      const int at = flip_lr ? out_w - 1 - x : x;
      sx[at] = saturate_short(X >> kInterBits);
      cx[at] = X & (kCells - 1);
    }
    const int span = *std::max_element(sx.begin(), sx.end()) - *std::min_element(sx.begin(), sx.end());
    if (span <= 8 * canvas.size) {  // else a degenerate matrix: the general loop below
      warp_separable(canvas, sx, cx, m[4], m[5], out, flip_ud);
      return out;
    }
  }
  const BilinearTable& table = bilinear_table();
  for (int y = 0; y < out_h; ++y) {
    const int x0 = round_to_int((m[1] * y + m[2]) * kAbScale) + kRoundDelta;
    const int y0 = round_to_int((m[4] * y + m[5]) * kAbScale) + kRoundDelta;
    uint8_t* row = out.ptr<uint8_t>(flip_ud ? out_h - 1 - y : y);
    uint8_t* dst = flip_lr ? row + 3 * (out_w - 1) : row;
    const ptrdiff_t dst_step = flip_lr ? -3 : 3;
    for (int x = 0; x < out_w; ++x, dst += dst_step) {
      const int X = (x0 + adelta[x]) >> (kAbBits - kInterBits);
      const int Y = (y0 + bdelta[x]) >> (kAbBits - kInterBits);
      const int sx = saturate_short(X >> kInterBits), sy = saturate_short(Y >> kInterBits);
      const int16_t* w = table.w[(Y & (kCells - 1)) * kCells + (X & (kCells - 1))];
      const uint8_t *p00, *p01, *p10, *p11;
      const Canvas::Tile& t = canvas.quadrant(sx, sy);
      if (sx >= t.x1 && sx + 1 < t.x2 && sy >= t.y1 && sy + 1 < t.y2) {  // inside one tile
        p00 = t.at(sx, sy);
        p01 = p00 + 3, p10 = p00 + t.step, p11 = p10 + 3;
      } else {  // across a seam, the pad or the canvas edge: each tap on its own
        p00 = canvas.pixel(sx, sy), p01 = canvas.pixel(sx + 1, sy);
        p10 = canvas.pixel(sx, sy + 1), p11 = canvas.pixel(sx + 1, sy + 1);
      }
      for (int c = 0; c < 3; ++c)
        dst[c] = static_cast<uint8_t>(
            (p00[c] * w[0] + p01[c] * w[1] + p10[c] * w[2] + p11[c] * w[3] + (1 << (kCoefBits - 1))) >>
            kCoefBits);
    }
  }
  return out;
}

}  // namespace kestrel::yolo::data
