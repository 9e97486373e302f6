// CUDA NMS: per-box candidate counts (stage 1); then (stage 2) an exclusive scan places every
// candidate in index order, a stable radix sort on (image, conf descending) orders them as the CPU
// reference does, the first max_nms per image are packed with their class-offset boxes, per-block
// IoU bitmasks are computed in parallel (torchvision's scheme: bit k of word (i, c) says box i
// suppresses box 64c + k > i), and one block per image sweeps the masks in order, stopping at
// max_det kept boxes.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/nms.h"

namespace kestrel::kernels {
namespace {

constexpr int kMaskBits = 64;
constexpr int kSweepThreads = 256;

// Ascending order of unsigned keys = descending order of the floats (any sign).
__device__ inline uint32_t descending_key(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~ascending;
}

template <class T>
__global__ void count_kernel(const T* pred, NmsShape s, NmsParams p, int32_t* box_counts,
                             int32_t* image_counts) {
  const int64_t n = s.batch * s.boxes;
  const int64_t slots = s.slots(p.multi_label);
  const float thr = static_cast<float>(p.conf_thres);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  // Whole warps go round the loop together so that the warp-level sum below is legal.
  for (int64_t base = int64_t(blockIdx.x) * blockDim.x; base < n; base += stride) {
    const int64_t g = base + threadIdx.x;
    int32_t c = 0;
    int64_t b = -1;
    if (g < n) {
      b = g / s.boxes;
      const T* row = pred + g * s.no;
      float conf;
      int32_t cls;
      for (int64_t slot = 0; slot < slots; ++slot)
        c += nms_candidate(row, slot, s, p, thr, &conf, &cls);
      box_counts[g] = c;
    }
    const int64_t b0 = __shfl_sync(0xffffffffu, b, 0);
    if (__all_sync(0xffffffffu, b == b0)) {
      const int32_t sum = __reduce_add_sync(0xffffffffu, static_cast<uint32_t>(c));
      if ((threadIdx.x & 31) == 0 && sum > 0) atomicAdd(image_counts + b0, sum);
    } else if (c > 0) {
      atomicAdd(image_counts + b, c);
    }
  }
}

template <class T>
__global__ void scatter_kernel(const T* pred, NmsShape s, NmsParams p, const int32_t* box_counts,
                               const int32_t* box_offsets, uint64_t* keys, int32_t* vals) {
  const int64_t n = s.batch * s.boxes;
  const int64_t slots = s.slots(p.multi_label);
  const float thr = static_cast<float>(p.conf_thres);
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < n;
       g += int64_t(gridDim.x) * blockDim.x) {
    if (box_counts[g] == 0) continue;
    const int64_t b = g / s.boxes, i = g % s.boxes;
    const T* row = pred + g * s.no;
    int32_t pos = box_offsets[g];
    for (int64_t slot = 0; slot < slots; ++slot) {
      float conf;
      int32_t cls;
      if (!nms_candidate(row, slot, s, p, thr, &conf, &cls)) continue;
      keys[pos] = (static_cast<uint64_t>(b) << 32) | descending_key(conf);
      vals[pos] = static_cast<int32_t>(i * slots + slot);
      ++pos;
    }
  }
}

struct ImageLayout {
  int64_t* seg_start;  // first sorted candidate of the image
  int32_t* m;          // candidates entering suppression: min(count, max_nms)
  int64_t* box_base;   // first packed box of the image
  int64_t* mask_base;  // first mask word of the image
};

__global__ void layout_kernel(const int32_t* image_counts, int64_t batch, int64_t max_nms,
                              ImageLayout l) {
  int64_t seg = 0, box = 0, mask = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t m = std::min<int64_t>(image_counts[b], max_nms);
    l.seg_start[b] = seg;
    l.m[b] = static_cast<int32_t>(m);
    l.box_base[b] = box;
    l.mask_base[b] = mask;
    seg += image_counts[b];
    box += m;
    mask += m * ((m + kMaskBits - 1) / kMaskBits);
  }
}

struct Packed {
  float4* offset_box;  // class-offset xyxy, what the IoUs are taken of
  float* area;
  float4* box;         // plain xyxy, what is output
  float* conf;
  int32_t* cls;
  int32_t* index;      // the box's row in its image's predictions (for the mask coefficients)
};

template <class T>
__global__ void pack_kernel(const T* pred, NmsShape s, NmsParams p, int64_t candidates,
                            const uint64_t* keys, const int32_t* vals, ImageLayout l, Packed out) {
  const int64_t slots = s.slots(p.multi_label);
  const float thr = static_cast<float>(p.conf_thres);
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < candidates;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = static_cast<int64_t>(keys[k] >> 32);
    const int64_t r = k - l.seg_start[b];
    if (r >= l.m[b]) continue;
    const int64_t i = vals[k] / slots, slot = vals[k] % slots;
    const T* row = pred + (b * s.boxes + i) * s.no;
    float conf = 0.0f;
    int32_t cls = 0;
    nms_candidate(row, slot, s, p, thr, &conf, &cls);  // passes: it did in scatter_kernel
    float xyxy[4], o[4];
    nms_xyxy(row, xyxy);
    const float offset = p.agnostic ? 0.0f : mul_rn(static_cast<float>(cls), p.max_wh);
    for (int c = 0; c < 4; ++c) o[c] = xyxy[c] + offset;
    const int64_t at = l.box_base[b] + r;
    out.offset_box[at] = make_float4(o[0], o[1], o[2], o[3]);
    out.area[at] = nms_area(o);
    out.box[at] = make_float4(xyxy[0], xyxy[1], xyxy[2], xyxy[3]);
    out.conf[at] = conf;
    out.cls[at] = cls;
    out.index[at] = static_cast<int32_t>(i);
  }
}

// Block (column c, row r, image b): bits of rows 64r.. against columns 64c.. (c >= r only; the
// words left of the diagonal are never read).
__global__ void mask_kernel(Packed boxes, ImageLayout l, double iou_thres, uint64_t* mask) {
  const int64_t b = blockIdx.z;
  const int m = l.m[b];
  const int blocks = (m + kMaskBits - 1) / kMaskBits;
  const int row_block = blockIdx.y, col_block = blockIdx.x;
  if (row_block >= blocks || col_block >= blocks || col_block < row_block) return;
  const int row_size = min(m - row_block * kMaskBits, kMaskBits);
  const int col_size = min(m - col_block * kMaskBits, kMaskBits);
  const int64_t base = l.box_base[b];

  __shared__ float col_box[kMaskBits][4];
  __shared__ float col_area[kMaskBits];
  const int t = threadIdx.x;
  if (t < col_size) {
    const float4 v = boxes.offset_box[base + col_block * kMaskBits + t];
    col_box[t][0] = v.x, col_box[t][1] = v.y, col_box[t][2] = v.z, col_box[t][3] = v.w;
    col_area[t] = boxes.area[base + col_block * kMaskBits + t];
  }
  __syncthreads();
  if (t >= row_size) return;
  const int64_t i = int64_t(row_block) * kMaskBits + t;
  const float4 v = boxes.offset_box[base + i];
  const float me[4] = {v.x, v.y, v.z, v.w};
  const float my_area = boxes.area[base + i];
  uint64_t bits = 0;
  for (int k = row_block == col_block ? t + 1 : 0; k < col_size; ++k) {
    const float iou = nms_iou(me, my_area, col_box[k], col_area[k]);
    if (static_cast<double>(iou) > iou_thres) bits |= uint64_t(1) << k;
  }
  mask[l.mask_base[b] + i * blocks + col_block] = bits;
}

// One block per image. Bit i of `removed` is final once every row before i has been swept, so all
// threads take the same branch for i; the barrier after each kept row publishes its bits.
template <class T>
__global__ void sweep_kernel(const T* pred, NmsShape s, Packed boxes, ImageLayout l,
                             const uint64_t* mask, int64_t max_det, float* out,
                             int32_t* out_counts) {
  extern __shared__ uint64_t removed[];
  const int64_t b = blockIdx.x;
  const int m = l.m[b];
  const int blocks = (m + kMaskBits - 1) / kMaskBits;
  for (int w = threadIdx.x; w < blocks; w += blockDim.x) removed[w] = 0;
  __syncthreads();
  const uint64_t* image_mask = mask + l.mask_base[b];
  float* image_out = out + b * max_det * s.out_cols();
  int64_t kept = 0;
  for (int i = 0; i < m && kept < max_det; ++i) {
    if ((removed[i / kMaskBits] >> (i % kMaskBits)) & 1) continue;
    const int64_t at = l.box_base[b] + i;
    float* row = image_out + kept * s.out_cols();
    if (threadIdx.x == 0) {
      const float4 v = boxes.box[at];
      row[0] = v.x, row[1] = v.y, row[2] = v.z, row[3] = v.w;
      row[4] = boxes.conf[at];
      row[5] = static_cast<float>(boxes.cls[at]);
    }
    if (s.nm > 0) {
      const T* in = pred + (b * s.boxes + boxes.index[at]) * s.no;
      for (int64_t k = threadIdx.x; k < s.nm; k += blockDim.x) row[6 + k] = nms_coefficient(in, s, k);
    }
    ++kept;
    const uint64_t* bits = image_mask + int64_t(i) * blocks;
    for (int w = i / kMaskBits + threadIdx.x; w < blocks; w += blockDim.x) removed[w] |= bits[w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out_counts[b] = static_cast<int32_t>(kept);
}

int batch_bits(int64_t batch) {
  int bits = 0;
  while ((int64_t(1) << bits) < batch) ++bits;
  return bits;
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

// Carves the stage-2 workspace; with base == nullptr only sums the sizes.
struct Workspace {
  int32_t* box_offsets;
  void* scan_temp;
  uint64_t* keys;
  uint64_t* keys_sorted;
  int32_t* vals;
  int32_t* vals_sorted;
  void* sort_temp;
  ImageLayout layout;
  Packed packed;
  uint64_t* mask;
  size_t bytes = 0;

  Workspace(char* base, const NmsShape& s, const NmsCudaPlan& plan) {
    auto take = [&](size_t n) {
      void* at = base == nullptr ? nullptr : base + bytes;
      bytes += align_up(n);
      return at;
    };
    const int64_t n = s.batch * s.boxes, c = plan.candidates, m = plan.nms_boxes;
    box_offsets = static_cast<int32_t*>(take(n * sizeof(int32_t)));
    scan_temp = take(plan.scan_temp_bytes);
    keys = static_cast<uint64_t*>(take(c * sizeof(uint64_t)));
    keys_sorted = static_cast<uint64_t*>(take(c * sizeof(uint64_t)));
    vals = static_cast<int32_t*>(take(c * sizeof(int32_t)));
    vals_sorted = static_cast<int32_t*>(take(c * sizeof(int32_t)));
    sort_temp = take(plan.sort_temp_bytes);
    layout.seg_start = static_cast<int64_t*>(take(s.batch * sizeof(int64_t)));
    layout.m = static_cast<int32_t*>(take(s.batch * sizeof(int32_t)));
    layout.box_base = static_cast<int64_t*>(take(s.batch * sizeof(int64_t)));
    layout.mask_base = static_cast<int64_t*>(take(s.batch * sizeof(int64_t)));
    packed.offset_box = static_cast<float4*>(take(m * sizeof(float4)));
    packed.area = static_cast<float*>(take(m * sizeof(float)));
    packed.box = static_cast<float4*>(take(m * sizeof(float4)));
    packed.conf = static_cast<float*>(take(m * sizeof(float)));
    packed.cls = static_cast<int32_t*>(take(m * sizeof(int32_t)));
    packed.index = static_cast<int32_t*>(take(m * sizeof(int32_t)));
    mask = static_cast<uint64_t*>(take(plan.mask_words * sizeof(uint64_t)));
  }
};

}  // namespace

void nms_count_cuda(DType t, const void* pred, const NmsShape& s, const NmsParams& p,
                    int32_t* box_counts, int32_t* image_counts, cudaStream_t stream) {
  KESTREL_CUDA_CHECK(cudaMemsetAsync(image_counts, 0, s.batch * sizeof(int32_t), stream));
  const int64_t n = s.batch * s.boxes;
  if (n == 0) return;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "nms", {
    count_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(pred), s, p, box_counts, image_counts);
  });
  KESTREL_CUDA_CHECK_LAUNCH();
}

NmsCudaPlan nms_cuda_plan(const NmsShape& s, const NmsParams& p, const int32_t* counts) {
  KESTREL_CHECK(s.batch * s.boxes < (int64_t(1) << 31) &&
                    s.boxes * s.slots(p.multi_label) < (int64_t(1) << 31),
                "nms (CUDA): ", s.batch, " x ", s.boxes, " boxes x ", s.slots(p.multi_label),
                " candidate slots exceed 32-bit candidate indices; run NMS on fewer images at a "
                "time");
  KESTREL_CHECK(p.max_nms >= 1 && p.max_nms <= kNmsMaxCandidates, "nms (CUDA): max_nms ",
                p.max_nms, " is outside [1, ", kNmsMaxCandidates, "]");
  NmsCudaPlan plan;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t m = std::min<int64_t>(counts[b], p.max_nms);
    const int64_t blocks = (m + kMaskBits - 1) / kMaskBits;
    plan.candidates += counts[b];
    plan.nms_boxes += m;
    plan.mask_words += m * blocks;
    plan.max_blocks = std::max(plan.max_blocks, blocks);
  }
  KESTREL_CHECK(plan.candidates < (int64_t(1) << 31), "nms (CUDA): ", plan.candidates,
                " candidates exceed 32-bit positions; run NMS on fewer images at a time");
  const int64_t n = s.batch * s.boxes;
  KESTREL_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, plan.scan_temp_bytes,
                                                   static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), n));
  KESTREL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, plan.sort_temp_bytes, static_cast<const uint64_t*>(nullptr),
      static_cast<uint64_t*>(nullptr), static_cast<const int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), plan.candidates, 0, 32 + batch_bits(s.batch)));
  plan.workspace_bytes = Workspace(nullptr, s, plan).bytes;
  return plan;
}

void nms_suppress_cuda(DType t, const void* pred, const NmsShape& s, const NmsParams& p,
                       const NmsCudaPlan& plan, const int32_t* box_counts,
                       const int32_t* image_counts, void* workspace, float* out,
                       int32_t* out_counts, cudaStream_t stream) {
  if (plan.candidates == 0) {
    KESTREL_CUDA_CHECK(cudaMemsetAsync(out_counts, 0, s.batch * sizeof(int32_t), stream));
    return;
  }
  Workspace w(static_cast<char*>(workspace), s, plan);
  const int64_t n = s.batch * s.boxes;
  size_t scan_bytes = plan.scan_temp_bytes, sort_bytes = plan.sort_temp_bytes;
  KESTREL_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(w.scan_temp, scan_bytes, box_counts,
                                                   w.box_offsets, n, stream));
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "nms", {
    const T* x = static_cast<const T*>(pred);
    scatter_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
        x, s, p, box_counts, w.box_offsets, w.keys, w.vals);
    KESTREL_CUDA_CHECK_LAUNCH();
    KESTREL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        w.sort_temp, sort_bytes, w.keys, w.keys_sorted, w.vals, w.vals_sorted, plan.candidates, 0,
        32 + batch_bits(s.batch), stream));
    layout_kernel<<<1, 1, 0, stream>>>(image_counts, s.batch, p.max_nms, w.layout);
    KESTREL_CUDA_CHECK_LAUNCH();
    pack_kernel<T><<<cuda::blocks_for(plan.candidates), cuda::kThreads, 0, stream>>>(
        x, s, p, plan.candidates, w.keys_sorted, w.vals_sorted, w.layout, w.packed);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
  if (plan.max_blocks > 0) {
    const dim3 grid(plan.max_blocks, plan.max_blocks, s.batch);
    mask_kernel<<<grid, kMaskBits, 0, stream>>>(w.packed, w.layout, p.iou_thres, w.mask);
    KESTREL_CUDA_CHECK_LAUNCH();
  }
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "nms", {
    sweep_kernel<T><<<s.batch, kSweepThreads, plan.max_blocks * sizeof(uint64_t), stream>>>(
        static_cast<const T*>(pred), s, w.packed, w.layout, w.mask, p.max_det, out, out_counts);
  });
  KESTREL_CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::kernels
