// Shared by the trainer tests on CPU and GPU: whether two runs ended in the same training state.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/safetensors.h"

namespace kestrel::testing {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every model, EMA and optimizer tensor of checkpoint `a` equal, bit for bit, in `b`.
inline void expect_same_training_state(const std::filesystem::path& a, const std::filesystem::path& b) {
  SafetensorsFile fa = load_safetensors(a.string());
  SafetensorsFile fb = load_safetensors(b.string());
  int compared = 0;
  for (const std::string& name : fa.names()) {
    if (name.rfind("model.", 0) != 0 && name.rfind("ema.", 0) != 0 && name.rfind("optimizer.", 0) != 0) continue;
    ASSERT_TRUE(fb.contains(name)) << name;
    EXPECT_EQ(fa.get(name).to_double_vector(), fb.get(name).to_double_vector()) << name;
    ++compared;
  }
  EXPECT_GT(compared, 300) << "too few tensors compared: is " << a << " a training checkpoint?";
}

}  // namespace kestrel::testing
