// CRC-32C against the published check values (the "123456789" check of the CRC catalogue and the
// iSCSI vectors of RFC 3720, B.4), and TensorFlow's masking formula.
#include "tensorboard/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

using kestrel::tensorboard::crc32c;
using kestrel::tensorboard::masked_crc32c;

TEST(Crc32c, MatchesThePublishedCheckValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  std::vector<uint8_t> v(32, 0);
  EXPECT_EQ(crc32c(v.data(), v.size()), 0x8A9136AAu);
  v.assign(32, 0xFF);
  EXPECT_EQ(crc32c(v.data(), v.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(v.data(), v.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(crc32c(v.data(), v.size()), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, MaskRotatesRightBy15AndAddsTheConstant) {
  const std::string digits = "123456789";
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c(digits.data(), digits.size()), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(masked_crc32c(nullptr, 0), 0xa282ead8u);
}
