// twinkle/parallel/pipeline_layout.h — Megatron-core's explicit pipeline layout string.
//
// megatron/core/transformer/pipeline_parallel_layer_layout.py (PipelineParallelLayerLayout,
// `--pipeline-model-parallel-layout`): one stage per '|'-separated part, in virtual-stage order
// (stage c*pp + r is chunk c of pipeline rank r); in a stage 'E' is the embedding, 't' one decoder
// layer, 'L' the loss (final norm, lm head, cross entropy); "t*3" repeats a layer and "(X)*N" a
// group, e.g. "Et*3|(tt|)*2tL" = [E ttt | tt | tt | t L]. twinkle's split rules apply to the result:
// the embedding only at the start of the first stage, the loss only at the end of the last, and
// every stage at least one decoder layer (a stage of only E or L is refused by name).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace twinkle::parallel {

/// The decoder-layer count of each stage of `layout` (Qwen3ModelOptions::layers_per_stage). Throws
/// twinkle::Error naming the layout and the offending part: an unknown character (MTP 'm' is not
/// supported), a malformed repetition, E or L elsewhere than at the ends, a stage without a decoder
/// layer, or, when `stages` > 0, another number of stages than `stages` (pp x vpp).
std::vector<int64_t> parse_pipeline_layout(const std::string& layout, int stages = 0);

}  // namespace twinkle::parallel
