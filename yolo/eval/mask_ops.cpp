#include "yolo/eval/mask_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "kernels/tta.h"

namespace kestrel::yolo {
namespace {

using Tap = kernels::BilinearTap<float>;

std::string describe(const Tensor& t) {
  return t.defined() ? t.describe() : std::string("an undefined tensor");
}

// A CPU tensor of `dtype` with `dims` dimensions, contiguous (a copy when it is not).
Tensor cpu_input(const Tensor& t, DType dtype, int64_t dims, const char* op, const char* what) {
  KESTREL_CHECK(t.defined() && t.device().is_cpu() && t.dtype() == dtype && t.dim() == dims, op,
                ": expected ", what, " as a CPU ", dtype_name(dtype), " tensor of ", dims,
                " dimensions, got ", describe(t), "; move it with .to(Device::cpu())");
  return t.contiguous();
}

// Indices i in [0, size) with lo <= i < hi, compared in float32 as crop_mask does: [begin, end).
struct Range {
  int64_t begin = 0, end = 0;
  bool empty() const { return end <= begin; }
};
Range crop_range(float lo, float hi, int64_t size) {
  Range r{size, size};
  for (int64_t i = 0; i < size; ++i)
    if (static_cast<float>(i) >= lo && static_cast<float>(i) < hi) {
      if (r.begin == size) r.begin = i;
      r.end = i + 1;
    }
  return r.begin == size ? Range{} : r;
}

// The taps of every output index of one axis.
std::vector<Tap> taps(int64_t in_size, int64_t out_size) {
  std::vector<Tap> t(static_cast<size_t>(out_size));
  for (int64_t i = 0; i < out_size; ++i) t[i] = kernels::bilinear_tap<float>(i, in_size, out_size);
  return t;
}
// The input indices that the outputs in `out` read: [first i0, last i1].
Range tap_span(const std::vector<Tap>& t, Range out) {
  if (out.empty()) return {};
  return {t[out.begin].i0, t[out.end - 1].i1 + 1};
}

struct Inputs {
  Tensor protos, coefficients, boxes;
  int64_t mh = 0, mw = 0, nm = 0, n = 0;
};
Inputs check_inputs(const Tensor& protos, const Tensor& coefficients, const Tensor& boxes, const char* op) {
  Inputs in;
  in.protos = cpu_input(protos, DType::F32, 3, op, "prototypes (mh, mw, nm)");
  in.coefficients = cpu_input(coefficients, DType::F32, 2, op, "mask coefficients (n, nm)");
  in.boxes = cpu_input(boxes, DType::F32, 2, op, "boxes (n, 4: x1, y1, x2, y2)");
  in.mh = protos.size(0), in.mw = protos.size(1), in.nm = protos.size(2), in.n = coefficients.size(0);
  KESTREL_CHECK(coefficients.size(1) == in.nm, op, ": ", coefficients.size(1),
                " coefficients per detection for ", in.nm,
                " prototypes; pass the NMS rows' columns 6.. and "
                "one image's prototypes (mh, mw, nm)");
  KESTREL_CHECK(boxes.size(0) == in.n && boxes.size(1) == 4, op, ": boxes ", boxes.describe(), " for ", in.n,
                " detections; expected (", in.n, ", 4)");
  return in;
}

// The sigmoid of detection i's mask over rows y and columns x of the prototype grid, written into
// grid (rows of `stride` floats, indexed from (y0, x0) = (top, left)); other pixels untouched.
void sigmoid_region(const Inputs& in, int64_t i, Range y, Range x, int64_t top, int64_t left, int64_t stride,
                    float* grid) {
  const float* c = in.coefficients.data<float>() + i * in.nm;
  const float* p = in.protos.data<float>();
  for (int64_t r = y.begin; r < y.end; ++r)
    for (int64_t q = x.begin; q < x.end; ++q) {
      const float* v = p + (r * in.mw + q) * in.nm;
      double dot = 0;
      for (int64_t k = 0; k < in.nm; ++k) dot += static_cast<double>(c[k]) * v[k];
      const float s = static_cast<float>(dot);
      grid[(r - top) * stride + (q - left)] = 1.0f / (1.0f + std::exp(-s));
    }
}

// One output pixel of the bilinear resize of `grid` (rows of `stride`), mixed as torch's generic
// CPU kernel (upsample_generic_Nd_kernel_impl) does in its AVX2/AVX512 builds, where the compiler
// fuses the first product of each pair: fma(v0, w0, v1 * w1), along x, then along y.
float lerp_pair(float v0, float w0, float v1, float w1) { return std::fma(v0, w0, v1 * w1); }
float bilinear_at(const float* grid, int64_t stride, const Tap& ty, const Tap& tx) {
  const float* r0 = grid + ty.i0 * stride;
  const float* r1 = grid + ty.i1 * stride;
  return lerp_pair(lerp_pair(r0[tx.i0], tx.w0, r0[tx.i1], tx.w1), ty.w0,
                   lerp_pair(r1[tx.i0], tx.w0, r1[tx.i1], tx.w1), ty.w1);
}

// Masks made on the window rows [top, top + gh) x columns [left, left + gw) of the prototype
// grid, upsampled to `out`, then cropped with boxes in the pixels of `out`, thresholded.
Tensor upsample_then_crop(const Inputs& in, int64_t top, int64_t left, int64_t gh, int64_t gw,
                          ImageSize out) {
  Tensor masks = Tensor::zeros({in.n, out.height, out.width}, DType::U8);
  const std::vector<Tap> ty = taps(gh, out.height), tx = taps(gw, out.width);
  std::vector<float> grid(static_cast<size_t>(gh * gw));
  const float* b = in.boxes.data<float>();
  for (int64_t i = 0; i < in.n; ++i) {
    const Range oy = crop_range(b[4 * i + 1], b[4 * i + 3], out.height);
    const Range ox = crop_range(b[4 * i + 0], b[4 * i + 2], out.width);
    if (oy.empty() || ox.empty()) continue;
    const Range gy = tap_span(ty, oy), gx = tap_span(tx, ox);
    sigmoid_region(in, i, {gy.begin + top, gy.end + top}, {gx.begin + left, gx.end + left}, top, left, gw,
                   grid.data());
    uint8_t* m = masks.data<uint8_t>() + i * out.height * out.width;
    for (int64_t y = oy.begin; y < oy.end; ++y)
      for (int64_t x = ox.begin; x < ox.end; ++x)
        m[y * out.width + x] = bilinear_at(grid.data(), gw, ty[y], tx[x]) > 0.5f;
  }
  return masks;
}

void check_size(ImageSize s, const char* op) {
  KESTREL_CHECK(s.height > 0 && s.width > 0, op, ": image size ", s.height, " x ", s.width,
                " is not positive");
}

// The reference's letterbox padding of `inner` centred in `outer` (pad = (outer - inner * gain) /
// 2 with gain the smaller ratio), as int() cuts it: [top, bottom) x [left, right).
struct Window {
  int64_t top, bottom, left, right;
};
Window unpadded(ImageSize outer, ImageSize inner, std::optional<RatioPad> ratio_pad) {
  double pad_w, pad_h;
  if (ratio_pad) {
    pad_w = ratio_pad->pad_w, pad_h = ratio_pad->pad_h;
  } else {
    const double gain = std::min(static_cast<double>(outer.height) / static_cast<double>(inner.height),
                                 static_cast<double>(outer.width) / static_cast<double>(inner.width));
    pad_w = (static_cast<double>(outer.width) - static_cast<double>(inner.width) * gain) / 2;
    pad_h = (static_cast<double>(outer.height) - static_cast<double>(inner.height) * gain) / 2;
  }
  const auto trunc = [](double v) { return static_cast<int64_t>(v); };
  Window w{trunc(pad_h), trunc(static_cast<double>(outer.height) - pad_h), trunc(pad_w),
           trunc(static_cast<double>(outer.width) - pad_w)};
  KESTREL_CHECK(w.top >= 0 && w.left >= 0 && w.bottom <= outer.height && w.right <= outer.width &&
                    w.top < w.bottom && w.left < w.right,
                "the letterbox padding (", pad_w, ", ", pad_h, ") leaves nothing of a ", outer.height, " x ",
                outer.width, " grid; check the image sizes and ratio_pad");
  return w;
}

}  // namespace

Tensor crop_mask(const Tensor& masks, const Tensor& boxes) {
  const Tensor m = cpu_input(masks, DType::F32, 3, "crop_mask", "masks (n, h, w)");
  const Tensor b = cpu_input(boxes, DType::F32, 2, "crop_mask", "boxes (n, 4)");
  const int64_t n = m.size(0), h = m.size(1), w = m.size(2);
  KESTREL_CHECK(b.size(0) == n && b.size(1) == 4, "crop_mask: boxes ", b.describe(), " for ", n,
                " masks; expected (", n, ", 4)");
  Tensor out = Tensor::zeros({n, h, w}, DType::F32);
  const float* src = m.data<float>();
  const float* bb = b.data<float>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const Range ry = crop_range(bb[4 * i + 1], bb[4 * i + 3], h),
                rx = crop_range(bb[4 * i], bb[4 * i + 2], w);
    for (int64_t y = ry.begin; y < ry.end; ++y)
      for (int64_t x = rx.begin; x < rx.end; ++x) dst[(i * h + y) * w + x] = src[(i * h + y) * w + x];
  }
  return out;
}

Tensor upsample_bilinear(const Tensor& masks, int64_t out_h, int64_t out_w) {
  const Tensor m = cpu_input(masks, DType::F32, 3, "upsample_bilinear", "masks (n, h, w)");
  const int64_t n = m.size(0), h = m.size(1), w = m.size(2);
  KESTREL_CHECK(h > 0 && w > 0 && out_h > 0 && out_w > 0, "upsample_bilinear: cannot resize ", h, " x ", w,
                " to ", out_h, " x ", out_w);
  const std::vector<Tap> ty = taps(h, out_h), tx = taps(w, out_w);
  Tensor out = Tensor::empty({n, out_h, out_w}, DType::F32);
  float* dst = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < out_h; ++y)
      for (int64_t x = 0; x < out_w; ++x)
        dst[(i * out_h + y) * out_w + x] = bilinear_at(m.data<float>() + i * h * w, w, ty[y], tx[x]);
  return out;
}

Tensor process_mask(const Tensor& protos, const Tensor& coefficients, const Tensor& boxes, ImageSize shape,
                    bool upsample) {
  const Inputs in = check_inputs(protos, coefficients, boxes, "process_mask");
  check_size(shape, "process_mask");
  // The boxes on the prototype grid: each edge times mw / iw or mh / ih, a double rounded to
  // float32 as torch multiplies a float tensor by a Python number.
  const float sx = static_cast<float>(static_cast<double>(in.mw) / static_cast<double>(shape.width));
  const float sy = static_cast<float>(static_cast<double>(in.mh) / static_cast<double>(shape.height));
  const float* b = in.boxes.data<float>();
  const int64_t oh = upsample ? shape.height : in.mh, ow = upsample ? shape.width : in.mw;
  Tensor masks = Tensor::zeros({in.n, oh, ow}, DType::U8);
  const std::vector<Tap> ty = taps(in.mh, oh), tx = taps(in.mw, ow);
  std::vector<float> grid(static_cast<size_t>(in.mh * in.mw));
  for (int64_t i = 0; i < in.n; ++i) {
    const Range gy = crop_range(b[4 * i + 1] * sy, b[4 * i + 3] * sy, in.mh);
    const Range gx = crop_range(b[4 * i + 0] * sx, b[4 * i + 2] * sx, in.mw);
    if (gy.empty() || gx.empty()) continue;
    std::fill(grid.begin(), grid.end(), 0.0f);  // the crop's zeros around the box
    sigmoid_region(in, i, gy, gx, 0, 0, in.mw, grid.data());
    uint8_t* m = masks.data<uint8_t>() + i * oh * ow;
    for (int64_t y = 0; y < oh; ++y) {
      if (std::max(ty[y].i0, ty[y].i1) < gy.begin || std::min(ty[y].i0, ty[y].i1) >= gy.end) continue;
      for (int64_t x = 0; x < ow; ++x) {
        if (std::max(tx[x].i0, tx[x].i1) < gx.begin || std::min(tx[x].i0, tx[x].i1) >= gx.end) continue;
        m[y * ow + x] = bilinear_at(grid.data(), in.mw, ty[y], tx[x]) > 0.5f;
      }
    }
  }
  return masks;
}

Tensor process_mask_upsample(const Tensor& protos, const Tensor& coefficients, const Tensor& boxes,
                             ImageSize shape) {
  const Inputs in = check_inputs(protos, coefficients, boxes, "process_mask_upsample");
  check_size(shape, "process_mask_upsample");
  return upsample_then_crop(in, 0, 0, in.mh, in.mw, shape);
}

Tensor process_mask_native(const Tensor& protos, const Tensor& coefficients, const Tensor& boxes,
                           ImageSize original) {
  const Inputs in = check_inputs(protos, coefficients, boxes, "process_mask_native");
  check_size(original, "process_mask_native");
  const Window w = unpadded({in.mh, in.mw}, original, std::nullopt);
  return upsample_then_crop(in, w.top, w.left, w.bottom - w.top, w.right - w.left, original);
}

Tensor mask_iou(const Tensor& a, const Tensor& b) {
  KESTREL_CHECK(a.defined() && b.defined() && a.dim() >= 1 && b.dim() >= 1 &&
                    a.numel() * b.size(0) == b.numel() * a.size(0),
                "mask_iou: expected two stacks of masks with the same number of pixels, got ", describe(a),
                " and ", describe(b));
  const Tensor ma = cpu_input(a, DType::U8, a.dim(), "mask_iou", "masks (N, ...)");
  const Tensor mb = cpu_input(b, DType::U8, b.dim(), "mask_iou", "masks (M, ...)");
  const int64_t na = a.size(0), nb = b.size(0);
  const int64_t pixels = na > 0 ? a.numel() / na : (nb > 0 ? b.numel() / nb : 0);
  const int64_t words = (pixels + 63) / 64;
  // Each mask as bits: the intersections are popcounts of ANDed words.
  const auto pack = [&](const Tensor& t, int64_t n, std::vector<uint64_t>& bits, std::vector<int64_t>& area) {
    bits.assign(static_cast<size_t>(n * words), 0);
    area.assign(static_cast<size_t>(n), 0);
    const uint8_t* p = t.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < pixels; ++k) {
        const uint8_t v = p[i * pixels + k];
        KESTREL_CHECK(v <= 1, "mask_iou: mask ", i, " holds ", int(v), " at pixel ", k,
                      "; masks hold 0 or 1 (threshold them first)");
        bits[i * words + k / 64] |= static_cast<uint64_t>(v) << (k % 64);
        area[i] += v;
      }
  };
  std::vector<uint64_t> ba, bb;
  std::vector<int64_t> area_a, area_b;
  pack(ma, na, ba, area_a);
  pack(mb, nb, bb, area_b);
  Tensor iou = Tensor::empty({na, nb}, DType::F32);
  float* o = iou.data<float>();
  for (int64_t i = 0; i < na; ++i)
    for (int64_t j = 0; j < nb; ++j) {
      int64_t inter = 0;
      for (int64_t k = 0; k < words; ++k) inter += std::popcount(ba[i * words + k] & bb[j * words + k]);
      const float fi = static_cast<float>(inter);
      const float uni = (static_cast<float>(area_a[i]) + static_cast<float>(area_b[j])) - fi;
      o[i * nb + j] = fi / (uni + 1e-7f);
    }
  return iou;
}

Tensor label_masks(const Tensor& gt, int64_t nl, bool overlap, ImageSize size) {
  KESTREL_CHECK(gt.defined() && gt.device().is_cpu() &&
                    (gt.dtype() == DType::F32 || gt.dtype() == DType::U8) &&
                    (gt.dim() == 3 || (overlap && gt.dim() == 2)),
                "label_masks: expected the label masks as a CPU float32 or uint8 (k, h, w) tensor",
                overlap ? " (or (h, w) with overlap)" : "", ", got ", describe(gt));
  check_size(size, "label_masks");
  const int64_t gh = gt.size(-2), gw = gt.size(-1);
  Tensor masks = gt.to(DType::F32).contiguous().reshape({gt.dim() == 3 ? gt.size(0) : 1, gh, gw});
  if (overlap) {
    KESTREL_CHECK(masks.size(0) == 1, "label_masks: an overlap mask is one image, got ", masks.size(0));
    Tensor split = Tensor::zeros({nl, gh, gw}, DType::F32);
    const float* src = masks.data<float>();
    float* dst = split.data<float>();
    for (int64_t k = 0; k < gh * gw; ++k)
      for (int64_t l = 0; l < nl; ++l)
        dst[l * gh * gw + k] = src[k] == static_cast<float>(l + 1) ? 1.0f : 0.0f;
    masks = split;
  }
  KESTREL_CHECK(masks.size(0) == nl, "label_masks: ", masks.size(0), " masks for ", nl,
                " labels; pass one mask per label, or the image's overlap mask with overlap");
  const bool resize = gh != size.height || gw != size.width;
  if (resize) masks = upsample_bilinear(masks, size.height, size.width);
  Tensor out = Tensor::empty({nl, size.height, size.width}, DType::U8);
  const float* src = masks.data<float>();
  uint8_t* dst = out.data<uint8_t>();
  for (int64_t k = 0; k < out.numel(); ++k) {
    KESTREL_CHECK(resize || src[k] == 0.0f || src[k] == 1.0f, "label_masks: pixel ", k, " is ", src[k],
                  "; label masks hold 0 or 1 (with overlap, the label's number)");
    dst[k] = src[k] > 0.5f;
  }
  return out;
}

Tensor scale_masks_to_original(const Tensor& masks, ImageSize original, std::optional<RatioPad> ratio_pad) {
  const Tensor m = cpu_input(masks, DType::U8, 3, "scale_masks_to_original", "masks (n, h, w)");
  check_size(original, "scale_masks_to_original");
  const int64_t n = m.size(0), h = m.size(1), w = m.size(2);
  const Window win = unpadded({h, w}, original, ratio_pad);
  const int64_t ch = win.bottom - win.top, cw = win.right - win.left;
  Tensor out = Tensor::empty({n, original.height, original.width}, DType::U8);
  // cv2.resize runs on the (h, w, n) array: interleave, resize (CV_CN_MAX channels at a time),
  // split back.
  const uint8_t* src = m.data<uint8_t>();
  uint8_t* dst = out.data<uint8_t>();
  const int64_t area = original.height * original.width;
  for (int64_t first = 0; first < n; first += CV_CN_MAX) {
    const int cn = static_cast<int>(std::min<int64_t>(CV_CN_MAX, n - first));
    cv::Mat in(static_cast<int>(ch), static_cast<int>(cw), CV_8UC(cn));
    for (int64_t y = 0; y < ch; ++y)
      for (int64_t x = 0; x < cw; ++x)
        for (int c = 0; c < cn; ++c)
          in.ptr<uint8_t>(static_cast<int>(y))[x * cn + c] =
              src[((first + c) * h + win.top + y) * w + win.left + x];
    cv::Mat resized;
    cv::resize(in, resized, cv::Size(static_cast<int>(original.width), static_cast<int>(original.height)));
    for (int64_t y = 0; y < original.height; ++y)
      for (int64_t x = 0; x < original.width; ++x)
        for (int c = 0; c < cn; ++c)
          dst[(first + c) * area + y * original.width + x] =
              resized.ptr<uint8_t>(static_cast<int>(y))[x * cn + c];
  }
  return out;
}

std::vector<MaskPolygon> masks_to_segments(const Tensor& masks, SegmentStrategy strategy) {
  const Tensor m = cpu_input(masks, DType::U8, 3, "masks_to_segments", "masks (n, h, w)");
  const int64_t n = m.size(0), h = m.size(1), w = m.size(2);
  std::vector<MaskPolygon> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    cv::Mat mask =
        cv::Mat(static_cast<int>(h), static_cast<int>(w), CV_8UC1, m.data<uint8_t>() + i * h * w).clone();
    std::vector<std::vector<cv::Point>> contours;
    cv::findContours(mask, contours, cv::RETR_EXTERNAL, cv::CHAIN_APPROX_SIMPLE);
    if (contours.empty()) continue;
    size_t first = 0, last = contours.size();
    if (strategy == SegmentStrategy::kLargest) {
      for (size_t k = 1; k < contours.size(); ++k)
        if (contours[k].size() > contours[first].size()) first = k;
      last = first + 1;
    }
    for (size_t k = first; k < last; ++k)
      for (const cv::Point& p : contours[k])
        out[i].push_back({static_cast<float>(p.x), static_cast<float>(p.y)});
  }
  return out;
}

}  // namespace kestrel::yolo
