#include "yolo/data/numpy_argsort.h"

#include <utility>

namespace kestrel::yolo::data {
namespace {

constexpr int64_t kSmallPartition = 15;  // partitions with right - left <= 15: insertion sort

// numpy's float order: NaN after every number (and NaN == NaN for sorting).
bool less(double a, double b) { return a < b || (b != b && a == a); }

int floor_log2(int64_t n) {
  int bits = 0;
  while (n >>= 1) ++bits;
  return bits;
}

// Heapsort of idx[0, n) by key, with numpy's sift steps (a 1-based heap: a[k] is idx[k - 1]).
void heapsort_indices(const double* v, int64_t* idx, int64_t n) {
  int64_t* a = idx - 1;
  auto sift_down = [&](int64_t top, int64_t i, int64_t size) {
    for (int64_t j = i << 1; j <= size;) {
      if (j < size && less(v[a[j]], v[a[j + 1]])) ++j;
      if (!less(v[top], v[a[j]])) break;
      a[i] = a[j];
      i = j;
      j += j;
    }
    a[i] = top;
  };
  for (int64_t l = n >> 1; l > 0; --l) sift_down(a[l], l, n);
  for (int64_t size = n; size > 1;) {
    const int64_t top = a[size];
    a[size] = a[1];
    --size;
    sift_down(top, 1, size);
  }
}

void insertion_sort(const double* v, int64_t* left, int64_t* right) {
  for (int64_t* pi = left + 1; pi <= right; ++pi) {
    const int64_t vi = *pi;
    const double key = v[vi];
    int64_t* pj = pi;
    while (pj > left && less(key, v[*(pj - 1)])) {
      *pj = *(pj - 1);
      --pj;
    }
    *pj = vi;
  }
}

// Median of three moved to the middle, then the middle swapped next to the right end; returns the
// pivot's final place after the partition of [left, right].
int64_t* partition(const double* v, int64_t* left, int64_t* right) {
  int64_t* mid = left + ((right - left) >> 1);
  if (less(v[*mid], v[*left])) std::swap(*mid, *left);
  if (less(v[*right], v[*mid])) std::swap(*right, *mid);
  if (less(v[*mid], v[*left])) std::swap(*mid, *left);
  const double pivot = v[*mid];
  int64_t* pi = left;
  int64_t* pj = right - 1;
  std::swap(*mid, *pj);
  for (;;) {
    do ++pi;
    while (less(v[*pi], pivot));
    do --pj;
    while (less(pivot, v[*pj]));
    if (pi >= pj) break;
    std::swap(*pi, *pj);
  }
  std::swap(*pi, *(right - 1));
  return pi;
}

struct Pending {
  int64_t* left;
  int64_t* right;
  int depth;
};

}  // namespace

std::vector<int64_t> numpy_argsort(const std::vector<double>& keys) {
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int64_t> order(keys.size());
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  if (n < 2) return order;
  const double* v = keys.data();
  // The larger side of each partition waits on the stack (so it holds at most log2(n) entries);
  // the smaller one is sorted next. Both continue with the depth budget decremented.
  std::vector<Pending> stack;
  int64_t* left = order.data();
  int64_t* right = left + n - 1;
  int depth = 2 * floor_log2(n);
  for (;;) {
    if (depth < 0) {
      heapsort_indices(v, left, right - left + 1);
    } else {
      while (right - left > kSmallPartition) {
        int64_t* p = partition(v, left, right);
        --depth;
        if (p - left < right - p) {
          stack.push_back({p + 1, right, depth});
          right = p - 1;
        } else {
          stack.push_back({left, p - 1, depth});
          left = p + 1;
        }
      }
      insertion_sort(v, left, right);
    }
    if (stack.empty()) break;
    left = stack.back().left;
    right = stack.back().right;
    depth = stack.back().depth;
    stack.pop_back();
  }
  return order;
}

}  // namespace kestrel::yolo::data
