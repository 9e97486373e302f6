#include "io/rle.h"

#include <algorithm>

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
  // rleToBbox's unsigned arithmetic, step for step; a trailing run of zeros is dropped first.
  const size_t m = rle.counts.size() / 2 * 2;
  if (m == 0) return {};
  KESTREL_CHECK(rle.height > 0, "rle::bbox: counts ", rle.counts.size(), " for a mask of height ", rle.height,
                "; the size and counts do not belong together");
  const auto h = static_cast<uint32_t>(rle.height), w = static_cast<uint32_t>(rle.width);
  uint32_t xs = w, ys = h, xe = 0, ye = 0, cc = 0, xp = 0;
  for (size_t j = 0; j < m; ++j) {
    cc += rle.counts[j];
    const uint32_t t = cc - static_cast<uint32_t>(j % 2);
    const uint32_t y = t % h, x = (t - y) / h;
    if (j % 2 == 0) {
      xp = x;
    } else if (xp < x) {
      ys = 0;
      ye = h - 1;
    }
    xs = std::min(xs, x);
    xe = std::max(xe, x);
    ys = std::min(ys, y);
    ye = std::max(ye, y);
  }
  return {double(xs), double(ys), double(xe - xs + 1), double(ye - ys + 1)};
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
