// The reference's quad collate (LoadImagesAndLabels.collate_fn4, train.py --quad): a batch of n
// images becomes n / 4 images at twice the size. Each group of four (images 4i .. 4i+3) takes one
// uniform draw u:
//   u < 0.5  image 4i alone, upsampled 2x (bilinear with half-pixel centres, as
//            F.interpolate(scale_factor=2, mode='bilinear', align_corners=False), truncated back
//            to 8 bits as the reference's .type(uint8)), its labels unchanged (they are normalised);
//   else     the four tiled 2x2: 4i top left, 4i+1 below it, 4i+2 top right, 4i+3 bottom right,
//            each label moved by its tile's offset (y + 1 below, x + 1 right) and halved.
// Images past the last full group are dropped, as the reference drops them. A quad's path is its
// group's first image (the reference keeps the batch's first n / 4 paths, which name other
// images). The loss of such a batch is multiplied by 4 (TrainStepOptions::loss_factor): the loss
// scales with the number of images in the batch, which the collate divided by 4.
#pragma once
#include <cstdint>

#include "engine/random.h"
#include "yolo/data/loader.h"

namespace kestrel::yolo::data {

// Groups of four images: a batch of fewer than 4 images is refused (the reference fails too).
Batch quad_collate(const Batch& batch, Generator& gen, bool pinned);

// The draws of batch b's groups: a stream of seed + 1 + rank of its own (bit 62 set, apart from
// the samples' (epoch << 32) + index and --multi-scale's bit-63 streams).
Generator quad_generator(uint64_t seed, int rank, int64_t epoch, int64_t batch);

// u8 h x w x 3 (rows contiguous) to 2h x 2w x 3, bilinear as above. With half-pixel centres every
// weight is 0, 1/4, 3/4 or 1, so the float result is exact and its truncation is computed here in
// integers (sixteenths).
void upsample_bilinear_2x(const uint8_t* src, int h, int w, uint8_t* dst);

}  // namespace kestrel::yolo::data
