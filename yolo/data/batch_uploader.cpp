#include "yolo/data/batch_uploader.h"

namespace kestrel::yolo::data {

BatchUploader::BatchUploader(Device device, int buffers) : device_(device) {
  KESTREL_CHECK(buffers >= 2, "BatchUploader: a ring of at least 2 buffers, got ", buffers);
  if (device_.is_cuda()) {
    copy_stream_ = Stream::create(device_);
    ring_.resize(buffers);
  }
}

bool BatchUploader::reusable(const Tensor& slot, int64_t n) {
  // Our own tensor holds one reference to the storage; a DeviceBatch still alive holds more.
  return slot.defined() && slot.numel() >= n && slot.storage().use_count() == 1;
}

DeviceBatch BatchUploader::to_device(const Batch& batch) {
  if (device_.is_cpu()) return {batch.images, batch.targets};
  while (!in_flight_.empty() && in_flight_.front().second.query()) in_flight_.pop_front();
  const Stream compute = current_stream(device_);
  // The consumer has enqueued everything on the previous batch by now: mark its buffer.
  if (previous_ >= 0) {
    ring_[previous_].released.emplace(device_);
    ring_[previous_].released->record(compute);
  }
  Buffer& buf = ring_[next_];
  previous_ = next_;
  next_ = (next_ + 1) % static_cast<int>(ring_.size());
  const int64_t n_images = batch.images.numel(), n_targets = batch.targets.numel();
  const bool fresh = !reusable(buf.images, n_images) || !reusable(buf.targets, n_targets);
  if (fresh) {
    // New memory from the consumer stream's pool may have been used by work queued there.
    if (!reusable(buf.images, n_images)) buf.images = Tensor::empty({n_images}, DType::U8, device_);
    if (!reusable(buf.targets, n_targets))
      buf.targets = Tensor::empty({n_targets}, DType::F32, device_);
    Event queued(device_);
    queued.record(compute);
    queued.wait(copy_stream_);
  } else if (buf.released) {
    buf.released->wait(copy_stream_);
  }
  DeviceBatch out{make_view(buf.images, batch.images.shape(),
                            contiguous_strides(batch.images.shape()), buf.images.storage_offset()),
                  make_view(buf.targets, batch.targets.shape(),
                            contiguous_strides(batch.targets.shape()), buf.targets.storage_offset())};
  {
    StreamGuard on_copy_stream(copy_stream_);
    out.images.copy_(batch.images, /*non_blocking=*/true);
    out.targets.copy_(batch.targets, /*non_blocking=*/true);
  }
  Event copied(device_);
  copied.record(copy_stream_);
  copied.wait(compute);
  in_flight_.emplace_back(batch, copied);
  return out;
}

bool BatchUploader::last_upload_done() const {
  return in_flight_.empty() || in_flight_.back().second.query();
}

}  // namespace kestrel::yolo::data
