// numpy's default argsort (kind="quicksort") for float64 keys, order among equal keys included.
// The reference sorts rectangular batches with `ar.argsort()`; that sort is unstable, so which of
// COCO's many 640x480 images share a batch (and a letterbox shape) depends on its exact steps.
// This follows numpy 1.24's aquicksort_: an introsort with a median-of-three pivot, insertion sort
// once a partition spans at most 16 elements (numpy's `pr - pl > 15` test), and heapsort for the
// rest of a partition once the depth budget 2 * floor(log2 n) is spent. NaN sorts after every
// number, as in numpy. (numpy >= 1.25 may hand argsort to x86-simd-sort on AVX-512 machines,
// which orders ties differently; the reference as released runs on the 1.24 algorithm.)
#pragma once
#include <cstdint>
#include <vector>

namespace kestrel::yolo::data {

// Indices that sort `keys` ascending, in the order numpy 1.24's `np.argsort(keys)` returns them.
std::vector<int64_t> numpy_argsort(const std::vector<double>& keys);

}  // namespace kestrel::yolo::data
