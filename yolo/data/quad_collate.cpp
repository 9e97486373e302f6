#include "yolo/data/quad_collate.h"

#include <cstring>
#include <vector>

#include "base/error.h"

namespace kestrel::yolo::data {
namespace {

// Output index o of a 2x upsampling: source rows lo and hi with weights (in quarters) wl + wh = 4.
// The source coordinate is max(0, (o + 0.5) / 2 - 0.5), as PyTorch's area_pixel_compute_source_index.
struct Tap {
  int lo, hi, wl, wh;
};
Tap tap(int o, int n) {
  const int q = o == 0 ? 0 : 2 * o - 1;  // the source coordinate in quarters: 0.5 o - 0.25
  const int lo = q / 4, frac = q % 4;
  return {lo, lo < n - 1 ? lo + 1 : lo, 4 - frac, frac};
}

}  // namespace

void upsample_bilinear_2x(const uint8_t* src, int h, int w, uint8_t* dst) {
  std::vector<Tap> xs(static_cast<size_t>(2 * w));
  for (int x = 0; x < 2 * w; ++x) xs[x] = tap(x, w);
  for (int y = 0; y < 2 * h; ++y) {
    const Tap ty = tap(y, h);
    const uint8_t* r0 = src + static_cast<size_t>(ty.lo) * w * 3;
    const uint8_t* r1 = src + static_cast<size_t>(ty.hi) * w * 3;
    uint8_t* out = dst + static_cast<size_t>(y) * 2 * w * 3;
    for (int x = 0; x < 2 * w; ++x) {
      const Tap& tx = xs[x];
      for (int c = 0; c < 3; ++c) {
        const int top = tx.wl * r0[tx.lo * 3 + c] + tx.wh * r0[tx.hi * 3 + c];
        const int bottom = tx.wl * r1[tx.lo * 3 + c] + tx.wh * r1[tx.hi * 3 + c];
        out[x * 3 + c] = static_cast<uint8_t>((ty.wl * top + ty.wh * bottom) / 16);  // truncation
      }
    }
  }
}

Generator quad_generator(uint64_t seed, int rank, int64_t epoch, int64_t batch) {
  KESTREL_CHECK(rank >= 0 && epoch >= 0 && epoch < (int64_t{1} << 30) && batch >= 0 && batch < (int64_t{1} << 32),
                "quad_generator: rank ", rank, ", epoch ", epoch, " or batch ", batch, " out of range");
  return Generator(seed + 1 + static_cast<uint64_t>(rank),
                   (uint64_t{1} << 62) | (static_cast<uint64_t>(epoch) << 32) | static_cast<uint64_t>(batch));
}

Batch quad_collate(const Batch& batch, Generator& gen, bool pinned) {
  const int64_t n = batch.images.size(0), h = batch.images.size(1), w = batch.images.size(2);
  const int64_t groups = n / 4;
  KESTREL_CHECK(groups > 0, "--quad: batch ", batch.index, " holds ", n, " images; the quad collate needs ",
                "groups of 4 (use a --batch-size per rank that is a multiple of 4)");
  const int64_t rows = batch.targets.size(0);
  const auto* t = batch.targets.data<float>();
  // Each label row [image, class, x, y, w, h] by the image it belongs to.
  std::vector<std::vector<const float*>> labels(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    KESTREL_CHECK(t[r * 6] >= 0 && t[r * 6] < static_cast<float>(n), "--quad: batch ", batch.index, " has a label of ",
                  "image ", t[r * 6], " in a batch of ", n);
    labels[static_cast<size_t>(t[r * 6])].push_back(t + r * 6);
  }

  Batch out;
  out.index = batch.index;
  out.images = Tensor::empty({groups, 2 * h, 2 * w, 3}, DType::U8, Device::cpu(), pinned);
  std::vector<float> targets;
  const auto* in = batch.images.data<uint8_t>();
  auto* pixels = out.images.data<uint8_t>();
  const size_t in_bytes = static_cast<size_t>(h * w * 3), row_bytes = static_cast<size_t>(w * 3);
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* quad = pixels + g * 4 * in_bytes;
    const int64_t first = 4 * g;
    if (gen.uniform() < 0.5) {
      upsample_bilinear_2x(in + first * in_bytes, static_cast<int>(h), static_cast<int>(w), quad);
      for (const float* l : labels[first]) targets.insert(targets.end(), {float(g), l[1], l[2], l[3], l[4], l[5]});
    } else {
      for (int k = 0; k < 4; ++k) {  // tile k: column k / 2, row k % 2
        const int64_t col = k / 2, row = k % 2;
        const uint8_t* tile = in + (first + k) * in_bytes;
        for (int64_t y = 0; y < h; ++y)
          std::memcpy(quad + ((row * h + y) * 2 * w + col * w) * 3, tile + y * row_bytes, row_bytes);
        // The reference adds the offsets to the float32 labels, then multiplies by 0.5.
        for (const float* l : labels[first + k])
          targets.insert(targets.end(), {float(g), l[1], (l[2] + float(col)) * 0.5f, (l[3] + float(row)) * 0.5f,
                                         l[4] * 0.5f, l[5] * 0.5f});
      }
    }
    out.paths.push_back(batch.paths[first]);
    out.shapes.push_back(std::nullopt);
  }
  const int64_t m = static_cast<int64_t>(targets.size() / 6);
  out.targets = Tensor::empty({m, 6}, DType::F32, Device::cpu(), pinned);
  if (m) std::memcpy(out.targets.data<float>(), targets.data(), targets.size() * sizeof(float));
  return out;
}

}  // namespace kestrel::yolo::data
