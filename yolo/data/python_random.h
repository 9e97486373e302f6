// CPython's `random` module generator, for the draws Kestrel takes where the reference draws from
// Python's random (train.py's --image-weights choice of images): the Mersenne Twister MT19937
// seeded as random.seed(n) seeds it for an integer n (init_by_array over the 32-bit words of |n|,
// least significant first; [0] for 0), random() as CPython's genrand_res53 (two outputs, 53 bits),
// and random.choices(range(n), weights, k) as CPython 3.9+ computes it (cumulative sums in float64,
// then bisect_right of random() * total over them, up to n - 1).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace kestrel::yolo::data {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed);  // random.seed(seed)

  uint32_t next_u32();  // genrand_uint32
  double random();      // random.random(): [0, 1) on a 2^-53 grid
  // Skips the outputs of `count` random() calls (2 * count words).
  void discard_randoms(uint64_t count);

 private:
  void twist();
  std::array<uint32_t, 624> mt_{};
  int index_ = 624;
};

// random.choices(range(len(weights)), weights=weights, k=k). Refuses (naming `what`) weights whose
// total is not positive and finite, as CPython raises on them.
std::vector<int64_t> python_choices(PythonRandom& rng, const std::vector<double>& weights, int64_t k,
                                    const char* what);

}  // namespace kestrel::yolo::data
