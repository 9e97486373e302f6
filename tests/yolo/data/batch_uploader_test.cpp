// BatchUploader on the CPU: the host tensors come back unchanged (no copy, no stream), and a
// ring of fewer than two buffers is refused. The device side is batch_uploader_cuda_test.cpp.
#include "yolo/data/batch_uploader.h"

#include <gtest/gtest.h>

using namespace kestrel;
using namespace kestrel::yolo::data;

TEST(BatchUploader, CpuHandsTheHostTensorsBack) {
  Batch b;
  b.images = Tensor::zeros({2, 8, 8, 3}, DType::U8);
  b.targets = Tensor::zeros({3, 6});
  BatchUploader uploader(Device::cpu());
  const DeviceBatch d = uploader.to_device(b);
  EXPECT_TRUE(d.images.is_same(b.images));
  EXPECT_TRUE(d.targets.is_same(b.targets));
  EXPECT_TRUE(uploader.last_upload_done());
  EXPECT_THROW(BatchUploader(Device::cpu(), 1), Error);
}
