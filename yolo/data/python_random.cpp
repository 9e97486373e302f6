#include "yolo/data/python_random.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace kestrel::yolo::data {
namespace {

constexpr int kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;

}  // namespace

PythonRandom::PythonRandom(uint64_t seed) {
  // init_genrand(19650218), then init_by_array(key) with key the 32-bit words of the seed.
  std::vector<uint32_t> key = {static_cast<uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<uint32_t>(seed >> 32));
  mt_[0] = 19650218u;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  int i = 1;
  size_t j = 0;
  for (int k = std::max<int>(kN, static_cast<int>(key.size())); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;  // a non-zero initial state
  index_ = kN;
}

void PythonRandom::twist() {
  for (int k = 0; k < kN; ++k) {
    const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
    mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  index_ = 0;
}

uint32_t PythonRandom::next_u32() {
  if (index_ >= kN) twist();
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

double PythonRandom::random() {
  const uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

void PythonRandom::discard_randoms(uint64_t count) {
  uint64_t words = 2 * count;
  while (words > 0) {
    if (index_ >= kN) twist();
    const uint64_t take = std::min<uint64_t>(words, static_cast<uint64_t>(kN - index_));
    index_ += static_cast<int>(take);  // tempering is per output: skipped words need none
    words -= take;
  }
}

std::vector<int64_t> python_choices(PythonRandom& rng, const std::vector<double>& weights, int64_t k,
                                    const char* what) {
  KESTREL_CHECK(!weights.empty(), what, ": no weights to draw from");
  std::vector<double> cumulative(weights.size());
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) cumulative[i] = sum = sum + weights[i];
  const double total = cumulative.back() + 0.0;
  KESTREL_CHECK(total > 0.0 && std::isfinite(total), what, ": the weights add up to ", total,
                "; a weighted draw needs a positive, finite total");
  std::vector<int64_t> out(static_cast<size_t>(k));
  const auto last = cumulative.end() - 1;  // bisect's hi = n - 1
  for (int64_t& pick : out) pick = std::upper_bound(cumulative.begin(), last, rng.random() * total) - cumulative.begin();
  return out;
}

}  // namespace kestrel::yolo::data
