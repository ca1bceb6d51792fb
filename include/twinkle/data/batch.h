// twinkle/data/batch.h — the rows a DataLoader hands to a model, and micro-batches.
//
// Label convention (Hugging Face): `labels` are aligned with `input_ids`
// (labels[t] is the token at position t, or -100 to ignore it); the model's
// loss shifts by one, comparing logits[t] with labels[t+1] inside each sequence.
// (Twinkle rolls labels inside its template instead; we keep HF's convention so
// datasets and checkpoints move freely between tools.)
#pragma once
#include <cstdint>
#include <vector>

namespace twinkle {

constexpr int32_t kIgnoreIndex = -100;

/// One encoded training example (what Template::encode produces).
struct EncodedRow {
  std::vector<int32_t> input_ids;       ///< token ids
  std::vector<int32_t> labels;          ///< same length; -100 = not trained
  std::vector<int32_t> attention_mask;  ///< ones (0 only for padding)
  std::vector<int32_t> position_ids;    ///< 0..L-1
  int64_t length = 0;                   ///< L
};

/// A right-padded (or packed) micro-batch, flattened to T = batch * seq tokens.
/// Sequences are the segments [cu_seqlens[i], cu_seqlens[i+1]) of the flat token
/// axis; attention is causal and confined to a segment; the loss shift never
/// crosses a segment boundary. For padded batches cu_seqlens = {0, S, 2S, ...}
/// and padded positions carry labels -100; for packed batches batch = 1 and the
/// segments are the packed rows.
struct MicroBatch {
  int64_t batch = 0;                  ///< rows (1 when packed)
  int64_t seq = 0;                    ///< padded length of each row
  std::vector<int32_t> input_ids;     ///< [batch*seq]
  std::vector<int32_t> labels;        ///< [batch*seq], -100 = ignore
  std::vector<int32_t> position_ids;  ///< [batch*seq], restart at 0 per segment
  std::vector<int32_t> cu_seqlens;    ///< [n_segments+1], cumulative segment starts
  /// [batch*seq] 1 for a real token, 0 for right padding (HF attention_mask); empty = all
  /// real. Only statistics over real tokens read it (the MoE load-balancing loss and load).
  std::vector<uint8_t> attention_mask;
  /// [n_segments] the row each segment holds: its index in the collated list (collate_padded /
  /// collate_packed, which skips empty rows), which MegatronModel offsets to the row's index in
  /// the step's global batch (the identity LoRA dropout masks are keyed by,
  /// parallel/lora_dropout.h). Empty = segment s holds row s.
  std::vector<int64_t> segment_row;
  int64_t tokens() const { return batch * seq; }
  /// Number of labelled positions after the one-token shift (the loss denominator).
  int64_t num_label_tokens() const;
};

/// Right-pads `rows` to their longest length (pad id `pad_id`, labels -100,
/// position ids continuing) into one MicroBatch. Throws twinkle::Error on an empty list.
MicroBatch collate_padded(const std::vector<EncodedRow>& rows, int32_t pad_id);

/// Packs `rows` into one sequence (padding-free) with position ids restarting at 0
/// and one segment per row; equal in loss to collate_padded of the same rows.
MicroBatch collate_packed(const std::vector<EncodedRow>& rows);

}  // namespace twinkle
