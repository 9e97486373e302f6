// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78), the checksum of TFRecord files, and the
// masking TensorFlow applies to stored CRCs (a CRC kept inside checksummed data would otherwise
// make the outer CRC degenerate).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kestrel::tensorboard {

uint32_t crc32c(const void* data, size_t n);

// ((crc >> 15) | (crc << 17)) + 0xa282ead8, of crc32c(data, n).
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace kestrel::tensorboard
