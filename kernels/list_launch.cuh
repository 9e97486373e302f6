// How a TensorList travels to a multi-tensor CUDA kernel (kernels/optim.cu, kernels/amp_scale.cu):
// each launch of plan_list_launches(list) gets its tensors' pointers, step counts and element
// counts and its block -> (tensor, chunk) map in the kernel arguments (ListMeta, under the 4 KiB
// argument limit); block b handles chunk block_chunk[b] (kListChunk elements) of tensor
// block_tensor[b].
#pragma once
#include <cstdint>

#include "kernels/optim.h"

namespace kestrel::kernels {

struct ListMeta {
  void* ptrs[kMaxListDepth][kMaxListTensors];
  int64_t* counts[kMaxListTensors];
  int64_t numel[kMaxListTensors];
  uint8_t block_tensor[kMaxListBlocks];
  int32_t block_chunk[kMaxListBlocks];
};
static_assert(sizeof(ListMeta) + 128 <= 4096, "kernel arguments must stay under 4 KiB");
static_assert(kMaxListTensors <= 256, "block_tensor holds tensor indices in a byte");

// launch(meta, blocks, first_block) for every launch of plan_list_launches(list).
template <class Launch>
void for_each_launch(const TensorList& list, Launch launch) {
  for (const ListLaunch& l : plan_list_launches(list)) {
    ListMeta meta{};
    for (size_t j = 0; j < l.tensors.size(); ++j) {
      for (int d = 0; d < list.depth; ++d) meta.ptrs[d][j] = list.ptrs[l.tensors[j]][d];
      meta.counts[j] = list.counts[l.tensors[j]];
      meta.numel[j] = list.numel[l.tensors[j]];
    }
    for (size_t b = 0; b < l.block_tensor.size(); ++b) {
      meta.block_tensor[b] = static_cast<uint8_t>(l.block_tensor[b]);
      meta.block_chunk[b] = l.block_chunk[b];
    }
    launch(meta, static_cast<int>(l.block_tensor.size()), l.first_block);
  }
}

}  // namespace kestrel::kernels
