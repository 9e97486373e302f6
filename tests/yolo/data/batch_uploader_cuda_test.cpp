// BatchUploader on a GPU: the copy stream's upload, seen from the consumer's stream, equals the
// host batch, also when the host batch is dropped at once, several uploads are in flight and the
// consumer holds more batches than the ring has buffers; a steady state of reused buffers makes
// no cudaMalloc, and an upload does not wait for unrelated work queued on the consumer's stream.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "engine/ops/layout.h"
#include "engine/stream.h"
#include "tests/support/block_stream.h"
#include "tests/support/testing.h"
#include "engine/allocator.h"
#include "yolo/data/batch_uploader.h"

using namespace kestrel;
using namespace kestrel::yolo::data;
using kestrel::testing::block_stream;

namespace {

Batch host_batch(int64_t n, int64_t h, int64_t w, int64_t rows, uint8_t base) {
  Batch b;
  b.images = Tensor::empty({n, h, w, 3}, DType::U8, Device::cpu(), /*pinned=*/true);
  auto* px = b.images.data<uint8_t>();
  for (int64_t i = 0; i < b.images.numel(); ++i) px[i] = static_cast<uint8_t>(base + i * 7);
  b.targets = Tensor::empty({rows, 6}, DType::F32, Device::cpu(), /*pinned=*/true);
  auto* t = b.targets.data<float>();
  for (int64_t i = 0; i < rows * 6; ++i) t[i] = 0.25f * static_cast<float>(i) + base;
  b.paths.assign(n, "x.jpg");
  b.shapes.assign(n, std::nullopt);
  return b;
}

TEST(BatchUploaderCuda, UploadsMatchTheHostBatchOnTheConsumerStream) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  // The consumer works on its own stream, as the trainer does.
  const Stream compute = Stream::create(gpu);
  StreamGuard on_compute(compute);
  BatchUploader uploader(gpu);
  std::vector<DeviceBatch> uploaded;
  std::vector<Batch> expected;
  for (int k = 0; k < 4; ++k) {
    Batch b = host_batch(2 + k, 64, 48, 3 * k, static_cast<uint8_t>(11 * k));
    expected.push_back(host_batch(2 + k, 64, 48, 3 * k, static_cast<uint8_t>(11 * k)));
    uploaded.push_back(uploader.to_device(b));
  }  // the host batches are gone here: the uploader must keep them alive for the copies
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(uploaded[k].images.device(), gpu);
    EXPECT_EQ(uploaded[k].images.to_vector<uint8_t>(), expected[k].images.to_vector<uint8_t>());
    // u8 images exactly; through images_to_input as the trainer converts them (x / 255 in float,
    // bit-exact with the host's division).
    Tensor input = ops::images_to_input(uploaded[k].images, DType::F32);
    Tensor host_input = ops::images_to_input(expected[k].images, DType::F32);
    EXPECT_TRUE(kestrel::testing::all_close(input, host_input, 0, 0)) << k;
    EXPECT_EQ(uploaded[k].targets.to_vector<float>(), expected[k].targets.to_vector<float>());
  }
}

// Once the ring's buffers exist and their consumers are done, an upload waits only for the
// buffer's previous consumer: with 2 s of unrelated work queued on the consumer's stream, the
// copy still finishes at once (the old uploader's copy waited for all of it). And reused buffers
// need no new device memory.
TEST(BatchUploaderCuda, UploadOverlapsQueuedComputeAndReusesItsBuffers) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream compute = Stream::create(gpu);
  StreamGuard on_compute(compute);
  BatchUploader uploader(gpu, 3);
  for (int k = 0; k < 6; ++k) {  // warm-up: every buffer allocated, consumed and released
    DeviceBatch d = uploader.to_device(host_batch(4, 64, 64, 5, static_cast<uint8_t>(k)));
    (void)ops::images_to_input(d.images, DType::F32);
  }
  compute.synchronize();
  const size_t mallocs = allocator_stats(gpu).raw_allocs;
  block_stream(compute, 2000);
  const auto start = std::chrono::steady_clock::now();
  const Batch b = host_batch(4, 64, 64, 5, 77);
  DeviceBatch d = uploader.to_device(b);
  while (!uploader.last_upload_done() &&
         std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(uploader.last_upload_done()) << "the upload waited for the blocked consumer stream";
  EXPECT_EQ(allocator_stats(gpu).raw_allocs, mallocs);
  EXPECT_EQ(d.images.to_vector<uint8_t>(), b.images.to_vector<uint8_t>());  // after the block
}

}  // namespace
