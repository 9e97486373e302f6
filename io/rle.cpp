#include "io/rle.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "base/error.h"

namespace kestrel::rle {

Rle encode(const uint8_t* mask, int64_t height, int64_t width) {
  KESTREL_CHECK(height >= 0 && width >= 0, "rle::encode: mask size ", height, " x ", width, " is negative");
  KESTREL_CHECK(mask != nullptr || height * width == 0, "rle::encode: no mask data for a ", height, " x ",
                width, " mask");
  Rle r{height, width, {}};
  uint8_t current = 0;
  uint32_t run = 0;
  for (int64_t x = 0; x < width; ++x)
    for (int64_t y = 0; y < height; ++y) {
      const uint8_t v = mask[y * width + x];
      KESTREL_CHECK(v <= 1, "rle::encode: pixel (", y, ", ", x, ") is ", int(v),
                    "; a mask holds 0 or 1 (threshold it first)");
      if (v != current) {
        r.counts.push_back(run);
        run = 0;
        current = v;
      }
      ++run;
    }
  r.counts.push_back(run);
  return r;
}

std::vector<uint8_t> decode(const Rle& rle) {
  KESTREL_CHECK(rle.height >= 0 && rle.width >= 0, "rle::decode: mask size ", rle.height, " x ", rle.width,
                " is negative");
  const int64_t total = rle.height * rle.width;
  int64_t sum = 0;
  for (uint32_t c : rle.counts) sum += c;
  KESTREL_CHECK(sum == total, "rle::decode: the counts add up to ", sum, " pixels, but the mask is ",
                rle.height, " x ", rle.width, " = ", total, "; the size and counts do not belong together");
  std::vector<uint8_t> mask(static_cast<size_t>(total), 0);
  int64_t j = 0;  // column-major pixel index
  for (size_t i = 0; i < rle.counts.size(); ++i) {
    for (uint32_t k = 0; k < rle.counts[i]; ++k, ++j)
      if (i % 2 == 1) mask[(j % rle.height) * rle.width + j / rle.height] = 1;
  }
  return mask;
}

std::string to_string(const std::vector<uint32_t>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t x = counts[i];
    if (i > 2) x -= counts[i - 2];
    for (bool more = true; more;) {
      int c = static_cast<int>(x & 0x1f);
      x >>= 5;  // arithmetic: a negative difference keeps its sign bits
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) c |= 0x20;
      s.push_back(static_cast<char>(c + 48));
    }
  }
  return s;
}

std::vector<uint32_t> from_string(std::string_view s) {
  std::vector<uint32_t> counts;
  size_t p = 0;
  while (p < s.size()) {
    const size_t start = p;
    int64_t x = 0;
    for (int k = 0;; ++k) {
      KESTREL_CHECK(p < s.size(), "rle::from_string: the string ends inside the value that starts at offset ",
                    start, "; it is truncated");
      KESTREL_CHECK(k < 7, "rle::from_string: the value at offset ", start,
                    " runs past 7 characters; this is not an RLE string");
      const int c = static_cast<unsigned char>(s[p]) - 48;
      KESTREL_CHECK(c >= 0 && c < 64, "rle::from_string: character ", int(static_cast<unsigned char>(s[p])),
                    " at offset ", p, " is outside '0'..'o'; this is not an RLE string");
      ++p;
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      if (!(c & 0x20)) {
        if (c & 0x10) x |= ~int64_t{0} << (5 * (k + 1));
        break;
      }
    }
    const size_t m = counts.size();
    if (m > 2) x += counts[m - 2];
    KESTREL_CHECK(x >= 0 && x <= UINT32_MAX, "rle::from_string: count ", m, " (offset ", start,
                  ") decodes to ", x, ", outside 0..2^32-1");
    counts.push_back(static_cast<uint32_t>(x));
  }
  return counts;
}

uint64_t area(const Rle& rle) {
  uint64_t a = 0;
  for (size_t i = 1; i < rle.counts.size(); i += 2) a += rle.counts[i];
  return a;
}

Bbox bbox(const Rle& rle) {
  // rleToBbox (2.0.11): the first and last pixel of every non-empty run of ones, in its unsigned
  // arithmetic; a trailing run of zeros is dropped first.
  const size_t m = rle.counts.size() / 2 * 2;
  if (m == 0) return {};
  KESTREL_CHECK(rle.height > 0, "rle::bbox: counts ", rle.counts.size(), " for a mask of height ", rle.height,
                "; the size and counts do not belong together");
  const auto h = static_cast<uint32_t>(rle.height), w = static_cast<uint32_t>(rle.width);
  uint32_t xs = w, ys = h, xe = 0, ye = 0, cc = 0;
  for (size_t j = 0; j < m; ++j) {
    const uint32_t start = cc;
    cc += rle.counts[j];
    if (j % 2 == 0 || rle.counts[j] == 0) continue;
    const uint32_t y0 = start % h, x0 = (start - y0) / h;
    const uint32_t y1 = (cc - 1) % h, x1 = (cc - 1 - y1) / h;
    xs = std::min(xs, x0);
    xe = std::max(xe, x1);
    if (x0 < x1) {  // the run goes on into a later column: the full height
      ys = 0;
      ye = h - 1;
    } else {
      ys = std::min(ys, y0);
      ye = std::max(ye, y1);
    }
  }
  return {double(xs), double(ys), double(xe - xs + 1), double(ye - ys + 1)};
}

Rle from_polygon(const double* xy, size_t points, int64_t height, int64_t width) {
  KESTREL_CHECK(height >= 0 && width >= 0 && height * width <= UINT32_MAX, "rle::from_polygon: mask size ", height,
                " x ", width, " is negative or above 2^32 pixels");
  constexpr double kScale = 5;
  // The vertices on the fine grid, closed.
  std::vector<int> fx(points + 1), fy(points + 1);
  for (size_t j = 0; j < points; ++j)
    for (int c = 0; c < 2; ++c) {
      const double v = kScale * xy[2 * j + c] + .5;
      KESTREL_CHECK(v > -2147483648.0 && v < 2147483648.0, "rle::from_polygon: vertex ", j, " (", xy[2 * j], ", ",
                    xy[2 * j + 1], ") is not a finite pixel position within reach of an int");
      (c ? fy : fx)[j] = static_cast<int>(v);
    }
  if (points) {
    fx[points] = fx[0];
    fy[points] = fy[0];
  }
  int64_t walk = 0;  // pycocotools holds every point of the walk; refuse what it could not
  for (size_t j = 0; j < points; ++j)
    walk += std::max(std::abs(int64_t{fx[j]} - fx[j + 1]), std::abs(int64_t{fy[j]} - fy[j + 1])) + 1;
  KESTREL_CHECK(walk <= (int64_t{1} << 30), "rle::from_polygon: the polygon's boundary is ", walk,
                " points long on pycocotools' 5x grid; its vertices lie far outside any image");
  // width - 1 as pycocotools' unsigned size: no column limit for a mask without columns.
  const double last_column = static_cast<double>(static_cast<uint64_t>(width) - 1);
  // Walk the boundary point by point; a step between fine columns that lands on a coarse column's
  // centre is a crossing. Only consecutive points matter, so none are stored.
  std::vector<uint32_t> crossings;
  const auto h = static_cast<int64_t>(height);
  bool have_prev = false;
  int64_t pu = 0, pv = 0;
  auto visit = [&](int64_t u, int64_t v) {
    if (have_prev && u != pu) {
      double xd = static_cast<double>(u < pu ? u : u - 1);
      xd = (xd + .5) / kScale - .5;
      if (std::floor(xd) == xd && xd >= 0 && xd <= last_column) {
        double yd = static_cast<double>(v < pv ? v : pv);
        yd = (yd + .5) / kScale - .5;
        if (yd < 0) yd = 0;
        else if (yd > static_cast<double>(h)) yd = static_cast<double>(h);
        yd = std::ceil(yd);
        crossings.push_back(static_cast<uint32_t>(static_cast<int64_t>(xd) * h + static_cast<int64_t>(yd)));
      }
    }
    have_prev = true;
    pu = u;
    pv = v;
  };
  for (size_t j = 0; j < points; ++j) {
    int64_t xs = fx[j], xe = fx[j + 1], ys = fy[j], ye = fy[j + 1];
    const int64_t dx = std::abs(xe - xs), dy = std::abs(ys - ye);
    const bool flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
    if (flip) {
      std::swap(xs, xe);
      std::swap(ys, ye);
    }
    if (dx == 0 && dy == 0) {  // pycocotools' slope is 0/0 here; the point's row is never read
      visit(xs, ys);
      continue;
    }
    if (dx >= dy) {
      const double s = static_cast<double>(static_cast<int>(ye - ys)) / static_cast<double>(dx);
      for (int64_t d = 0; d <= dx; ++d) {
        const int64_t t = flip ? dx - d : d;
        visit(t + xs, static_cast<int>(static_cast<double>(ys) + s * static_cast<double>(t) + .5));
      }
    } else {
      const double s = static_cast<double>(static_cast<int>(xe - xs)) / static_cast<double>(dy);
      for (int64_t d = 0; d <= dy; ++d) {
        const int64_t t = flip ? dy - d : d;
        visit(static_cast<int>(static_cast<double>(xs) + s * static_cast<double>(t) + .5), t + ys);
      }
    }
  }
  // The crossings, sorted, as differences; a zero difference (a crossing repeated) folds the run
  // after it into the one before.
  crossings.push_back(static_cast<uint32_t>(height * width));
  std::sort(crossings.begin(), crossings.end());
  uint32_t prev = 0;
  for (uint32_t& c : crossings) {
    const uint32_t t = c;
    c -= prev;
    prev = t;
  }
  Rle r{height, width, {}};
  r.counts.push_back(crossings[0]);
  for (size_t j = 1; j < crossings.size();) {
    if (crossings[j] > 0) {
      r.counts.push_back(crossings[j++]);
    } else if (++j < crossings.size()) {
      r.counts.back() += crossings[j++];
    }
  }
  return r;
}

Rle from_box(const Bbox& box, int64_t height, int64_t width) {
  const double xs = box.x, xe = xs + box.w, ys = box.y, ye = ys + box.h;
  const double xy[8] = {xs, ys, xs, ye, xe, ye, xe, ys};
  return from_polygon(xy, 4, height, width);
}

Rle merge(const std::vector<Rle>& rles, bool intersect) {
  if (rles.empty()) return {};
  Rle out = rles[0];
  for (size_t i = 1; i < rles.size(); ++i) {
    const Rle& b = rles[i];
    if (b.height != out.height || b.width != out.width) return {};
    const std::vector<uint32_t> a = std::move(out.counts);
    out.counts.clear();
    // Both run lists walked together; a boundary is written where the merged value changes.
    uint32_t ca = a.empty() ? 0 : a[0], cb = b.counts.empty() ? 0 : b.counts[0], cc = 0;
    size_t ia = 1, ib = 1;
    bool va = false, vb = false, v = false;
    for (uint32_t rest = 1; rest > 0;) {
      const uint32_t c = std::min(ca, cb);
      cc += c;
      rest = 0;
      ca -= c;
      if (!ca && ia < a.size()) {
        ca = a[ia++];
        va = !va;
      }
      rest += ca;
      cb -= c;
      if (!cb && ib < b.counts.size()) {
        cb = b.counts[ib++];
        vb = !vb;
      }
      rest += cb;
      const bool before = v;
      v = intersect ? va && vb : va || vb;
      if (v != before || rest == 0) {
        out.counts.push_back(cc);
        cc = 0;
      }
    }
  }
  return out;
}

double iou(const Rle& dt, const Rle& gt, bool gt_crowd) { return iou(dt, gt, gt_crowd, bbox(dt), bbox(gt)); }

double iou(const Rle& dt, const Rle& gt, bool gt_crowd, const Bbox& db, const Bbox& gb) {
  // bbIou first: nothing to walk where the boxes do not overlap.
  const double bw = std::fmin(db.w + db.x, gb.w + gb.x) - std::fmax(db.x, gb.x);
  if (bw <= 0) return 0;
  const double bh = std::fmin(db.h + db.y, gb.h + gb.y) - std::fmax(db.y, gb.y);
  if (bh <= 0) return 0;
  if (dt.height != gt.height || dt.width != gt.width) return -1;
  const std::vector<uint32_t>& a = dt.counts;
  const std::vector<uint32_t>& b = gt.counts;
  uint32_t ca = a.empty() ? 0 : a[0], cb = b.empty() ? 0 : b[0], inter = 0, uni = 0;
  size_t ia = 1, ib = 1;
  bool va = false, vb = false;
  for (uint32_t rest = 1; rest > 0;) {
    const uint32_t c = std::min(ca, cb);
    if (va || vb) {
      uni += c;
      if (va && vb) inter += c;
    }
    rest = 0;
    ca -= c;
    if (!ca && ia < a.size()) {
      ca = a[ia++];
      va = !va;
    }
    rest += ca;
    cb -= c;
    if (!cb && ib < b.size()) {
      cb = b[ib++];
      vb = !vb;
    }
    rest += cb;
  }
  if (inter == 0) uni = 1;
  else if (gt_crowd) uni = static_cast<uint32_t>(area(dt));
  return static_cast<double>(inter) / static_cast<double>(uni);
}

json::Value to_json(const Rle& rle) {
  return json::Object{{"size", json::Array{rle.height, rle.width}}, {"counts", to_string(rle.counts)}};
}

Rle from_json(const json::Value& value, const std::string& where) {
  const json::Value* size = value.is_object() ? value.find("size") : nullptr;
  const json::Value* counts = value.is_object() ? value.find("counts") : nullptr;
  KESTREL_CHECK(size && counts && size->is_array() && size->as_array().size() == 2, where,
                ": expected an RLE object {\"size\": [h, w], \"counts\": ...}");
  Rle r{size->as_array()[0].as_integer(), size->as_array()[1].as_integer(), {}};
  KESTREL_CHECK(r.height >= 0 && r.width >= 0, where, ": RLE size ", r.height, " x ", r.width,
                " is negative");
  if (counts->is_string()) {
    r.counts = from_string(counts->as_string());
  } else {
    KESTREL_CHECK(counts->is_array(), where, ": RLE counts are a ", json::kind_name(counts->kind()),
                  "; expected a string or an array of integers");
    for (const json::Value& c : counts->as_array()) {
      const int64_t v = c.as_integer();
      KESTREL_CHECK(v >= 0 && v <= UINT32_MAX, where, ": RLE count ", v, " is outside 0..2^32-1");
      r.counts.push_back(static_cast<uint32_t>(v));
    }
  }
  return r;
}

}  // namespace kestrel::rle
