// twinkle/kernels/cpu/cross_entropy.h — token cross entropy with ignore_index = -100, in the
// vocab-parallel pieces of Megatron's VocabParallelCrossEntropy
// (megatron/core/tensor_parallel/cross_entropy.py) plus a single-shard convenience
// (torch.nn.functional.cross_entropy(reduction="sum", ignore_index=-100)).
//
// logits [T, Vl] (row-major f32) is this rank's vocab shard holding global vocab ids
// [vstart, vstart+Vl); only the first `valid` columns are real (the rest is vocab padding: they never
// enter max / sum-exp and get zero gradient). labels [T] are GLOBAL ids or -100.
// Vocab-parallel recipe: ce_local_max -> all-reduce MAX -> ce_local_sumexp_target -> all-reduce SUM of
// sum_exp and target_logit -> lse = global_max + log(sum_exp); loss_t = lse - target_logit ->
// ce_backward with lse.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Ignored label value (PyTorch / HF ignore_index).
constexpr int32_t kIgnoreIndex = -100;

/// row_max[t] = max_{j < valid} logits[t, j] (-inf when valid == 0).
void ce_local_max(const float* logits, int64_t T, int64_t Vl, int64_t valid, float* row_max);

/// sum_exp[t] = sum_{j < valid} exp(logits[t, j] - global_max[t]) (fp32 result, accumulated in double per row);
/// target_logit[t] = logits[t, label_t - vstart] if vstart <= label_t < vstart + valid, else 0
/// (also 0 for ignored rows).
void ce_local_sumexp_target(const float* logits, const int32_t* labels, const float* global_max, int64_t T,
                            int64_t Vl, int64_t valid, int64_t vstart, float* sum_exp, float* target_logit);

/// dlogits[t, j] = row_scale[t] * (exp(logits[t, j] - lse[t]) - [label_t == vstart + j]) for j < valid,
/// 0 for padded columns j >= valid, and 0 for the whole row when label_t == -100.
/// row_scale may be null (= 1). dlogits OVERWRITTEN; may alias logits (in place).
void ce_backward(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl, int64_t valid,
                 int64_t vstart, const float* row_scale, float* dlogits);

/// Single shard (vstart = 0, valid = Vl = V): returns the SUM over rows with label != -100 of
/// -log softmax(logits[t])[label_t] (double, summed in row order: independent of the thread count);
/// lse [T] receives logsumexp of every row (ignored rows too).
/// Throws twinkle::Error naming the row if a label is outside [0, V) and != -100.
double cross_entropy_forward(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse);

/// Number of rows with label != -100.
int64_t count_valid_labels(const int32_t* labels, int64_t T);

}  // namespace twinkle::kernels::cpu
