// Shared by the trainer tests on CPU and GPU: whether two runs ended in the same training state,
// and whether a finished run's checkpoint is stripped.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/safetensors_tensors.h"

namespace kestrel::testing {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every model, EMA and optimizer tensor of full checkpoint `a` equal, bit for bit, in `b`; each
// of the three parts must be there (a finished run's stripped last holds the EMA alone: compare
// an epoch<N> copy, which keeps the full state).
inline void expect_same_training_state(const std::filesystem::path& a, const std::filesystem::path& b) {
  SafetensorsFile fa = load_safetensors(a.string());
  SafetensorsFile fb = load_safetensors(b.string());
  int model = 0, ema = 0, optimizer = 0;
  for (const std::string& name : fa.names()) {
    const bool is_model = name.rfind("model.", 0) == 0, is_ema = name.rfind("ema.", 0) == 0;
    const bool is_optimizer = name.rfind("optimizer.", 0) == 0;
    if (!is_model && !is_ema && !is_optimizer) continue;
    ASSERT_TRUE(fb.contains(name)) << name;
    EXPECT_EQ(safetensors_tensor(fa, name).to_double_vector(), safetensors_tensor(fb, name).to_double_vector()) << name;
    model += is_model;
    ema += is_ema;
    optimizer += is_optimizer;
  }
  EXPECT_GT(model, 300) << "too few model tensors compared: is " << a << " a training checkpoint?";
  EXPECT_EQ(ema, model) << a;
  EXPECT_GT(optimizer, 100) << "too few optimizer tensors compared: is " << a << " stripped?";
}

// A finished run's last/best as the reference's strip_optimizer leaves them: only "model.*"
// tensors, float16 apart from integer buffers, no optimizer metadata, marked stripped.
inline void expect_stripped(const std::filesystem::path& p) {
  SafetensorsFile f = load_safetensors(p.string());
  const auto stripped = f.metadata().find("stripped");
  EXPECT_TRUE(stripped != f.metadata().end() && stripped->second == "true") << p;
  for (const char* key : {"optimizer", "schedule", "scaler", "ema_updates", "progress"})
    EXPECT_EQ(f.metadata().count(key), 0u) << p << " keeps " << key;
  int halves = 0;
  for (const std::string& name : f.names()) {
    EXPECT_EQ(name.rfind("model.", 0), 0u) << p << " holds " << name;
    const std::string& dtype = f.entry(name).dtype;
    if (dtype == "I64") continue;  // num_batches_tracked
    EXPECT_EQ(dtype, "F16") << p << ": " << name;
    ++halves;
  }
  EXPECT_GT(halves, 200) << p;
}

// Every tensor of `a` equal, bit for bit and in dtype, in `b`, and the same names.
inline void expect_same_tensors(const std::filesystem::path& a, const std::filesystem::path& b) {
  SafetensorsFile fa = load_safetensors(a.string());
  SafetensorsFile fb = load_safetensors(b.string());
  EXPECT_EQ(fa.names(), fb.names());
  for (const std::string& name : fa.names()) {
    if (!fb.contains(name)) continue;
    EXPECT_EQ(fa.entry(name).dtype, fb.entry(name).dtype) << name;
    EXPECT_EQ(safetensors_tensor(fa, name).to_double_vector(), safetensors_tensor(fb, name).to_double_vector()) << name;
  }
}

}  // namespace kestrel::testing
