// Softmax cross-entropy with label smoothing, the reference's
// nn.CrossEntropyLoss(label_smoothing=eps) with mean reduction (the classifier's loss), with
// autograd to the logits. The arithmetic is kernels/cross_entropy.h.
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace kestrel::ops {

// logits [B, nc]; labels int64 [B] of class indices on the logits' device. Per row
// loss_i = (1 - eps) * -log_softmax(x_i)[y_i] + (eps / nc) * sum_c -log_softmax(x_i)[c], with
// eps = label_smoothing in [0, 1]. Returns the mean over rows as a 0-d tensor (NaN for B = 0, as
// the reference), differentiable w.r.t. the logits: dlogits = (softmax - smoothed one-hot) * g / B.
// The loss is float32 (float64 for float64 logits; float16 / bfloat16 logits on CUDA give a
// float32 loss, as under the reference's autocast); the logits' gradient has their dtype.
// Labels outside [0, nc) are refused with a kestrel::Error where the labels are on the CPU; on
// CUDA they are not read back (no host synchronisation): such a row's loss and gradient are NaN.
// Check host labels before uploading them (check_class_labels).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing);

// The per-row losses [B] (cross_entropy is their mean), differentiable w.r.t. the logits.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& labels, double label_smoothing);

// Throws a kestrel::Error naming the first label outside [0, classes). labels: int64 [B]; CUDA
// labels are copied to the host for the check (a synchronisation: for tests and debugging).
void check_class_labels(const Tensor& labels, int64_t classes);

}  // namespace kestrel::ops
