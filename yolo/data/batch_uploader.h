// Moves batches to a CUDA device on a copy stream of its own, so that the next batch's upload
// overlaps the current batch's compute. The device memory is a small ring of buffers that the
// uploader keeps: before a buffer is written again, the copy stream waits only for an event that
// marks the end of its previous batch's consumers (recorded on the consumer's stream when the
// consumer asks for the following batch, by which time it has enqueued all its work on that
// one), never for everything queued on the consumer's stream. A buffer that the consumer still
// holds (a DeviceBatch kept beyond the next call) is left alone and the ring gets a fresh one;
// fresh memory comes from the consumer stream's pool, so its first upload waits for the work
// already queued there. The consumer's current stream waits for each upload through an event;
// the host never waits. Host batches stay referenced until their copy has finished, so pinned
// memory is never reused early.
//
// Contract: the consumer enqueues all its work on a batch before asking for the next one (the
// trainer's and validator's loops do).
#pragma once
#include <deque>
#include <utility>
#include <vector>

#include "engine/stream.h"
#include "engine/tensor.h"
#include "yolo/data/loader.h"

namespace kestrel::yolo::data {

struct DeviceBatch {
  Tensor images;   // u8 [B, H, W, 3] on the device
  Tensor targets;  // f32 [M, 6] on the device
};

class BatchUploader {
 public:
  // buffers: the ring's length (batches whose device memory can be in use at once).
  explicit BatchUploader(Device device, int buffers = 3);
  // On the CPU this hands the host tensors back unchanged.
  DeviceBatch to_device(const Batch& batch);
  // Whether the last upload's copy has finished (a query; for tests and logs).
  bool last_upload_done() const;

 private:
  struct Buffer {
    Tensor images, targets;       // flat u8 and f32 memory, grown as needed
    std::optional<Event> released;  // its last batch's consumers are done (consumer stream)
  };
  // A buffer of at least n elements of t in `slot`, fresh if too small or still held outside.
  static bool reusable(const Tensor& slot, int64_t n);

  Device device_;
  Stream copy_stream_;
  std::vector<Buffer> ring_;
  int next_ = 0;
  int previous_ = -1;  // the buffer of the last batch handed out
  std::deque<std::pair<Batch, Event>> in_flight_;
};

}  // namespace kestrel::yolo::data
