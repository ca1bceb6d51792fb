// twinkle/train/mfu.h — model FLOPs utilisation: the FLOPs of a step and the peak they are
// measured against.
//
// FLOPs per token = 6N + 6 * layers * heads * head_dim * S (Megatron / PaLM appendix B:
// forward + backward of every matmul weight, plus the attention scores and values at
// sequence length S; the untied lm head counts, the embedding lookup does not).
// The peak is the achievable fp32 (bf16 for a --bf16 run) GEMM rate of the cores this job uses: TWINKLE_PEAK_GFLOPS
// when set, else the per-core figure `twinkle info` saved in $TWINKLE_HOME/peak.json
// (default ~/.cache/twinkle/peak.json) times the cores used, else a ~0.15 s single-core
// sgemm measurement on rank 0 times the cores used. On an accelerator (device cuda) it is the
// datasheet peak of each rank's device (kernels::accelerator_peak) divided among the ranks sharing
// that device, summed over the job (TWINKLE_PEAK_GFLOPS still wins).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/dist/process_group.h"
#include "twinkle/io/model_config.h"

namespace twinkle {

/// Model FLOPs of one token's forward + backward at sequence length `seq_len` for a Qwen3
/// model of `num_parameters` (HF count, embedding included).
double qwen3_flops_per_token(const ModelConfig& cfg, int64_t num_parameters, double seq_len);

/// Single-thread GEMM rate in FLOP/s (384^3 GEMMs for ~0.15 s): fp32 sgemm, or with bf16 the
/// bf16 x bf16 -> fp32 GEMM of the --bf16 path (twinkle/kernels/cpu/gemm_bf16.h).
double measure_core_flops(bool bf16 = false);

/// Where `twinkle info` keeps the measured peak: $TWINKLE_HOME/peak.json, else
/// $HOME/.cache/twinkle/peak.json (/tmp when HOME is unset).
std::string peak_file_path();

/// The job's achievable peak in FLOP/s (see the file comment). Collective over `world` (every
/// rank calls it): rank 0's environment and peak file decide for all ranks, and when it has
/// to measure the others wait in a barrier. A peak file that cannot be read is reported with a warning
/// naming it and then measured instead. bf16: the bf16 GEMM peak (peak.json's core_bf16_gflops), the
/// one MFU of a --bf16 run is computed against (as Megatron quotes MFU of bf16 training against the
/// device's bf16 peak).
/// device: the mesh's device_type; "cuda": TWINKLE_PEAK_GFLOPS on rank 0 when set, else the sum over
/// ranks of device_share of each rank's accelerator_peak (ranks on one host and PCI bus id share a device) (one all-gather and one all-reduce over
/// `world`); 0 (MFU not reported, a warning on rank 0 naming the device) when any rank's device has
/// no datasheet peak (the host emulation of CUDA among them).
double job_peak_flops(dist::ProcessGroup& world, bool bf16 = false, const std::string& device = "cpu");

/// This rank's share of its device's peak `flops` when the ranks whose device keys are `keys` (one
/// per rank, equal keys = the same physical device) share devices: flops / (ranks with key `mine`).
/// Throws twinkle::Error when `mine` is not among `keys`.
double device_share(int64_t mine, const std::vector<int64_t>& keys, double flops);

}  // namespace twinkle
