// The copy's indexing helpers on the CPU (the CUDA copy runs the same host-device code): the
// magic-number divider against plain division, coalescing against the layouts it replaces, and
// the 32-bit indexer against StridedLayout::offset_of, with its refusals at the int32 limits.
#include "kernels/strided_index.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "base/error.h"

using namespace kestrel;
using kernels::StridedLayout;

namespace {

StridedLayout layout(std::vector<int64_t> shape, std::vector<int64_t> stride) {
  StridedLayout l;
  l.rank = static_cast<int>(shape.size());
  for (int d = 0; d < l.rank; ++d) l.shape[d] = shape[d], l.stride[d] = stride[d];
  return l;
}

// The Detect head's permute as the engine runs it: the conv's NHWC output [B, ny, nx, na * no]
// viewed as [B, na, ny, nx, no] (source strides), into a contiguous [B, na, ny, nx, no].
void detect_permute(int64_t b, int64_t na, int64_t ny, int64_t nx, int64_t no, StridedLayout& src,
                    StridedLayout& dst) {
  src = layout({b, na, ny, nx, no}, {ny * nx * na * no, no, nx * na * no, na * no, 1});
  dst = layout({b, na, ny, nx, no}, {na * ny * nx * no, ny * nx * no, nx * no, no, 1});
}

}  // namespace

TEST(IntDivider, EqualsPlainDivision) {
  std::mt19937 rng(3);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (int k = 0; k < 300; ++k) divisors.push_back(1 + rng() % (1u << 31));
  for (uint32_t s = 0; s <= 31; ++s) {
    divisors.push_back(1u << s);
    if (s > 1) divisors.push_back((1u << s) - 1);
    if (s > 1 && s < 31) divisors.push_back((1u << s) + 1);
  }
  const uint32_t kMaxN = (1u << 31) - 1;
  for (uint32_t d : divisors) {
    const kernels::IntDivider div(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, kMaxN, kMaxN - 1, kMaxN / d * d, kMaxN / d * d - 1};
    if (d <= kMaxN / 2) ns.push_back(2 * d - 1), ns.push_back(2 * d);
    for (int k = 0; k < 200; ++k) ns.push_back(rng() % (kMaxN + 1u));
    for (uint32_t n : ns) {
      if (n > kMaxN) continue;
      ASSERT_EQ(div.div(n), n / d) << n << " / " << d;
    }
  }
  EXPECT_THROW(kernels::IntDivider(0), Error);
  EXPECT_THROW(kernels::IntDivider((1u << 31) + 1), Error);
}

TEST(Coalesce, MergesWhatBothLayoutsWalkAsOne) {
  StridedLayout s, d;
  detect_permute(2, 3, 80, 80, 85, s, d);
  kernels::coalesce(s, d);
  // ny and nx merge (both layouts walk them as one); b, na and no cannot.
  ASSERT_EQ(s.rank, 4);
  const int64_t shape[] = {2, 3, 6400, 85};
  const int64_t src_stride[] = {6400 * 255, 85, 255, 1}, dst_stride[] = {3 * 6400 * 85, 6400 * 85, 85, 1};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(s.shape[k], shape[k]);
    EXPECT_EQ(d.shape[k], shape[k]);
    EXPECT_EQ(s.stride[k], src_stride[k]) << k;
    EXPECT_EQ(d.stride[k], dst_stride[k]) << k;
  }
  // Contiguous in both: one dimension. Size-1 dimensions vanish, whatever their strides.
  StridedLayout a = layout({4, 1, 5, 6}, {30, 999, 6, 1}), b = layout({4, 1, 5, 6}, {30, 30, 6, 1});
  kernels::coalesce(a, b);
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.shape[0], 120);
  // A transpose keeps its two dimensions; all-ones become rank 0 (one element).
  StridedLayout t = layout({3, 4}, {1, 3}), c = layout({3, 4}, {4, 1});
  kernels::coalesce(t, c);
  EXPECT_EQ(t.rank, 2);
  StridedLayout one = layout({1, 1}, {7, 7}), one2 = layout({1, 1}, {1, 1});
  kernels::coalesce(one, one2);
  EXPECT_EQ(one.rank, 0);
  EXPECT_EQ(one.numel(), 1);
  StridedLayout x = layout({2, 3}, {3, 1}), y = layout({3, 2}, {2, 1});
  EXPECT_THROW(kernels::coalesce(x, y), Error);
}

// Random layouts (permutes, slices with steps, broadcasts, negative strides): coalescing keeps
// every element's offsets, and the 32-bit indexer gives the 64-bit offsets.
TEST(StridedIndexer32, MatchesOffsetOfOnRandomLayouts) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 6);
    std::vector<int64_t> shape(rank), ss(rank), ds(rank), dense(rank);
    int64_t n = 1;
    for (int k = rank - 1; k >= 0; --k) {
      shape[k] = 1 + rng() % 5;
      dense[k] = n;
      n *= shape[k];
    }
    std::vector<int> perm(rank);
    for (int k = 0; k < rank; ++k) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int k = 0; k < rank; ++k) {
      const int64_t kind = rng() % 5;
      ss[k] = kind == 0 ? 0 : kind == 1 ? -dense[perm[k]] : dense[perm[k]] * (1 + rng() % 2);
      ds[k] = dense[k];
    }
    const StridedLayout src0 = layout(shape, ss), dst0 = layout(shape, ds);
    StridedLayout src = src0, dst = dst0;
    kernels::coalesce(src, dst);
    ASSERT_LE(src.rank, rank);
    kernels::StridedIndexer32 index;
    ASSERT_TRUE(kernels::make_indexer32(src, dst, index));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(src.offset_of(i), src0.offset_of(i)) << "trial " << trial << " element " << i;
      ASSERT_EQ(dst.offset_of(i), dst0.offset_of(i)) << "trial " << trial << " element " << i;
      int32_t s, d;
      index.offsets(static_cast<uint32_t>(i), s, d);
      ASSERT_EQ(s, src0.offset_of(i)) << "trial " << trial << " element " << i;
      ASSERT_EQ(d, dst0.offset_of(i)) << "trial " << trial << " element " << i;
    }
  }
}

// YOLOv5s's largest Detect permute at batch 64 / 640 (P3: 80x80, 3 anchors, 85 outputs) fits
// 32-bit indexing; every element's offsets agree (sampled densely at the ends and in between).
TEST(StridedIndexer32, DetectPermuteAtBatch64) {
  StridedLayout s0, d0;
  detect_permute(64, 3, 80, 80, 85, s0, d0);
  StridedLayout s = s0, d = d0;
  kernels::coalesce(s, d);
  kernels::StridedIndexer32 index;
  ASSERT_TRUE(kernels::make_indexer32(s, d, index));
  const int64_t n = s0.numel();
  for (int64_t i = 0; i < n; i += (i < 100000 || i > n - 100000) ? 1 : 997) {
    int32_t so, dof;
    index.offsets(static_cast<uint32_t>(i), so, dof);
    ASSERT_EQ(so, s0.offset_of(i)) << i;
    ASSERT_EQ(dof, d0.offset_of(i)) << i;
  }
}

TEST(StridedIndexer32, RefusesWhatDoesNotFit) {
  kernels::StridedIndexer32 index;
  const int64_t big = int64_t{1} << 31;
  // 2^31 elements: too many; one fewer fits.
  EXPECT_FALSE(kernels::make_indexer32(layout({big}, {1}), layout({big}, {1}), index));
  EXPECT_TRUE(kernels::make_indexer32(layout({big - 1}, {1}), layout({big - 1}, {1}), index));
  // Few elements, but an offset past int32 in either layout (or below it).
  EXPECT_FALSE(kernels::make_indexer32(layout({3}, {big / 2}), layout({3}, {1}), index));
  EXPECT_FALSE(kernels::make_indexer32(layout({3}, {1}), layout({3}, {-(big / 2) - 1}), index));
  EXPECT_TRUE(kernels::make_indexer32(layout({2}, {big - 1}), layout({2}, {1}), index));
  EXPECT_TRUE(kernels::make_indexer32(layout({3}, {-(big / 2)}), layout({3}, {1}), index));
  EXPECT_FALSE(kernels::make_indexer32(layout({0, 4}, {4, 1}), layout({0, 4}, {4, 1}), index));
}
