// twinkle/kernels/cpu/embedding.h — (vocab-parallel) embedding lookup, as torch.nn.Embedding /
// Megatron's VocabParallelEmbedding (megatron/core/tensor_parallel/layers.py: out-of-shard ids give zero
// rows so that an all-reduce over the tensor-parallel group yields the full lookup).
// table [Vl, H] holds global ids [vstart, vstart+Vl).
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Throws twinkle::Error naming the position and id of the first id < 0 or >= vocab_size.
void check_token_ids(const int32_t* ids, int64_t T, int64_t vocab_size);

/// out [T, H] (OVERWRITTEN): row t = table[ids[t] - vstart] if vstart <= ids[t] < vstart + Vl, else zeros.
/// Validate ids with check_token_ids first; this function does not throw.
void embedding_forward(const float* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t vstart,
                       int64_t Vl);

/// dtable [Vl, H] += scatter of dout [T, H] rows at in-shard ids (accumulates; race-free when ids repeat:
/// parallel over column blocks of H, every thread walks all tokens in order, so results are deterministic).
void embedding_backward(const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H, int64_t vstart,
                        int64_t Vl);

}  // namespace twinkle::kernels::cpu
