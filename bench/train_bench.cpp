// bench/train_bench.cpp — training-step throughput of twinkle's engine (one process, CPU, fp32 or --bf16).
//
// Same model, batch and step as bench/torch_peer.py (the PyTorch-eager peer): random token ids,
// labels = input ids, forward + loss + backward + clip_grad_norm(1.0) + AdamW (lr 1e-4, betas
// 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices). Prints one JSON line with tokens_per_s,
// gflops (the same FLOP formula as torch_peer.py), peak_rss_bytes and minor page faults.
//   build/bench/train_bench --config a|b|s|m|m30|w --threads 2 [--steps 3 --warmup 1] [--kernels fused|reference]
//                           [--recompute none|selective|full]
// scripts/bench-train runs both engines side by side and prints the ratios.
// --device cuda (a CUDA build): the model, its gradients and AdamW state on the GPU (or the host
// emulation, tests/cuda.cmake train_bench_cuda_emu); each timed step ends with a device synchronize, and
// the JSON adds peak_device_bytes (the caching allocator's peak in use), the device's name and the MFU
// against its datasheet peak (kernels::accelerator_peak). Config q06 is Qwen3-0.6B's
// (bench/qwen3-0.6b/config.json) at batch 8 x 2048; --batch / --seq override a config's.
// TWINKLE_CUDA_PROFILE=1 with --device cuda: the timed steps' device time kernel by kernel on stderr
// (CUPTI, twinkle/kernels/cuda/kernel_profile.h).
// --lora R trains a LoRA adapter (r = R, alpha = 2R, all-linear; Qwen3Model::add_adapter) instead
// of the full model: the base keeps no gradient buffer and the optimizer sees only the adapter;
// scripts/bench-lora runs full and LoRA side by side (bench/README.md "LoRA vs full").
#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "twinkle/core/device_allocator.h"
#include "twinkle/dist/parallel_state.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/train/engine.h"
#include "peak_rss.h"
#ifdef TWINKLE_CUDA_BUILT
#include "twinkle/kernels/cuda/kernel_profile.h"
#include "twinkle/kernels/cuda/runtime.h"
#endif

using namespace twinkle;

using twinkle::benchutil::reset_peak_rss;
using twinkle::benchutil::step_peak_rss_bytes;

int main(int argc, char** argv) {
  std::string config = "a";
  int threads = 1, steps = 3, warmup = 1;
  bool untied = false;
  std::string kernels = "fused", recompute = "none", precision = "fp32", device = "cpu";
  int64_t lora_r = 0, batch = 0, seq = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--config") config = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--untied") untied = true;
    else if (a == "--kernels") kernels = next();
    else if (a == "--lora") lora_r = std::stoll(next());
    else if (a == "--recompute") recompute = next();
    else if (a == "--bf16") precision = "bf16";
    else if (a == "--fp32") precision = "fp32";
    else if (a == "--device") device = next();
    else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--seq") seq = std::stoll(next());
    else {
      std::fprintf(stderr, "usage: train_bench [--config a|b|s|m|m30|w|q06] [--threads N] [--steps K] [--warmup W] [--untied] [--kernels fused|reference] [--recompute none|selective|full] [--lora R] [--bf16|--fp32] [--device cpu|cuda] [--batch B] [--seq S]\n");
      return 2;
    }
  }
  omp_set_num_threads(threads);
  ModelConfig c;
  c.model_type = "qwen3";
  int64_t B, S;
  if (config == "a") {
    c.hidden_size = 256; c.num_hidden_layers = 4; c.num_attention_heads = 8; c.num_key_value_heads = 4;
    c.head_dim = 32; c.intermediate_size = 768; c.vocab_size = 151936; B = 4; S = 512;
  } else if (config == "b") {
    c.hidden_size = 1024; c.num_hidden_layers = 8; c.num_attention_heads = 16; c.num_key_value_heads = 8;
    c.head_dim = 64; c.intermediate_size = 2816; c.vocab_size = 32000; B = 2; S = 512;
  } else if (config == "s") {  // small: for the reference kernel set, whose plain loops are 20-50x slower
    c.hidden_size = 256; c.num_hidden_layers = 2; c.num_attention_heads = 8; c.num_key_value_heads = 4;
    c.head_dim = 32; c.intermediate_size = 768; c.vocab_size = 8000; B = 2; S = 256;
  } else if (config == "m") {  // Qwen3-MoE: config a's attention, 32 experts top-4 (Qwen3-30B-A3B's 1/4 routing ratio... at toy size)
    c.model_type = "qwen3_moe";
    c.hidden_size = 256; c.num_hidden_layers = 4; c.num_attention_heads = 8; c.num_key_value_heads = 4;
    c.head_dim = 32; c.intermediate_size = 768; c.vocab_size = 32000; B = 4; S = 512;
    c.num_experts = 32; c.num_experts_per_tok = 4; c.moe_intermediate_size = 96; c.norm_topk_prob = true;
  } else if (config == "m30") {
    // Qwen3-30B-A3B's routing and FLOP mix at hidden 256: 128 experts top-8, moe_intermediate =
    // 0.375 hidden, 16 / 2 heads of 32 (q width 2 hidden, as 32 x 128 over 2048), 8 layers and a
    // vocabulary sized so the lm head is ~13% of the matmul FLOPs (30B-A3B: experts 60%, attention
    // 30%, lm head 10%; config m's 32,000-word head is 80% of its step).
    c.model_type = "qwen3_moe";
    c.hidden_size = 256; c.num_hidden_layers = 8; c.num_attention_heads = 16; c.num_key_value_heads = 2;
    c.head_dim = 32; c.intermediate_size = 768; c.vocab_size = 4096; B = 4; S = 512;
    c.num_experts = 128; c.num_experts_per_tok = 8; c.moe_intermediate_size = 96; c.norm_topk_prob = true;
  } else if (config == "w") {  // wide attention on long rows: 16 heads of 128 over hidden 128, 2048 tokens,
    // so the attention buffers (bf16: the backward's packed operands) are a large share of the peak
    c.hidden_size = 128; c.num_hidden_layers = 2; c.num_attention_heads = 16; c.num_key_value_heads = 16;
    c.head_dim = 128; c.intermediate_size = 256; c.vocab_size = 2048; B = 1; S = 2048;
  } else if (config == "q06") {  // Qwen3-0.6B (bench/qwen3-0.6b/config.json), 8 rows of 2048 tokens
    c.hidden_size = 1024; c.num_hidden_layers = 28; c.num_attention_heads = 16; c.num_key_value_heads = 8;
    c.head_dim = 128; c.intermediate_size = 3072; c.vocab_size = 151936; B = 8; S = 2048;
  } else {
    std::fprintf(stderr, "unknown config %s\n", config.c_str());
    return 2;
  }
  if (batch > 0) B = batch;
  if (seq > 0) S = seq;
  c.tie_word_embeddings = !untied;
  c.max_position_embeddings = std::max<int64_t>(4096, S);
  c.rope_theta = 1e6;
  std::shared_ptr<dist::ParallelState> ps;
  if (device == "cpu") {
    ps = dist::make_single_process_state();
  } else {
    MeshSizes ms;
    ms.device_type = device;
    initialize({.global_device_mesh = DeviceMesh::from_sizes(ms)});  // one process on this device
    ps = std::shared_ptr<dist::ParallelState>(&parallel_state(), [](dist::ParallelState*) {});
  }
  const bool on_device = device != "cpu";
  Qwen3ModelOptions mopt;
  mopt.kernels = kernels;
  mopt.recompute_granularity = recompute;
  mopt.mixed_precision = precision;
  Qwen3Model model(c, ps, mopt);
  model.init_random(0);
  if (lora_r > 0) model.add_adapter({.r = lora_r, .lora_alpha = 2.0 * static_cast<double>(lora_r)}, 0);
  Engine eng(model);
  OptimizerConfig oc;
  oc.lr = 1e-4;
  oc.adam_beta2 = 0.95;
  oc.weight_decay = 0.1;
  oc.clip_grad = 1.0;
  DistributedOptimizer opt(model.trainable_store(), ps, oc);
  opt.set_kernels(model.kernels());
  std::mt19937_64 g(1);
  std::vector<EncodedRow> rows(static_cast<size_t>(B));
  for (auto& r : rows) {
    for (int64_t t = 0; t < S; ++t) {
      r.input_ids.push_back(static_cast<int32_t>(g() % static_cast<uint64_t>(c.vocab_size)));
      r.position_ids.push_back(static_cast<int32_t>(t));
    }
    r.labels = r.input_ids;
    r.length = S;
  }
  std::vector<MicroBatch> mbs{collate_padded(rows, 0)};
  auto step = [&]() {
    double l = eng.forward_backward(mbs).loss;
    opt.step(oc.lr);
    if (on_device) device_allocator(model.device()).synchronize();  // the step's queued work is done
    return l;
  };
  reset_peak_rss();  // the steps' peak, init excluded (the warm-up steps are included)
  for (int i = 0; i < warmup; ++i) step();
#ifdef TWINKLE_CUDA_BUILT
  // TWINKLE_CUDA_PROFILE=1: the timed steps' kernels, one line each, on stderr (twinkle/kernels/cuda/kernel_profile.h)
  const char* prof_env = std::getenv("TWINKLE_CUDA_PROFILE");
  bool profiling = false;
  if (device == "cuda" && prof_env && std::strcmp(prof_env, "1") == 0) {
    const std::string why = twinkle::cuda::kernel_profile_start();
    if (!why.empty()) std::fprintf(stderr, "[profile] not recorded: %s\n", why.c_str());
    profiling = why.empty();
  }
#endif
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  std::vector<double> times, losses;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    losses.push_back(step());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  getrusage(RUSAGE_SELF, &r1);
  double step_s = 0;
  for (double t : times) step_s += t;
#ifdef TWINKLE_CUDA_BUILT
  if (profiling) {
    const std::string table = twinkle::cuda::format_kernel_profile(twinkle::cuda::kernel_profile_stop(), step_s, steps);
    std::fprintf(stderr, "[profile] kernels of the %d timed steps (CUPTI, device time):\n%s", steps, table.c_str());
  }
#endif
  step_s /= static_cast<double>(times.size());
  const double L = static_cast<double>(c.num_hidden_layers), h = static_cast<double>(c.hidden_size),
               H = static_cast<double>(c.num_attention_heads), Hk = static_cast<double>(c.num_key_value_heads),
               D = static_cast<double>(c.head_dim), I = static_cast<double>(c.intermediate_size),
               V = static_cast<double>(c.vocab_size);
  // matmul weights a token meets: an MoE layer has the router and top-k experts instead of the MLP
  const double mlp = c.is_moe() ? h * static_cast<double>(c.num_experts) +
                                      3 * h * static_cast<double>(c.moe_intermediate_size * c.num_experts_per_tok)
                                : 3 * h * I;
  const double n = L * (h * (H + 2 * Hk) * D + H * D * h + mlp) + V * h;
  const double Bd = static_cast<double>(B), Sd = static_cast<double>(S);
  const double flops = 6 * n * Bd * Sd + 12 * L * Bd * Sd * Sd * H * D;
  const double cpu_s = (static_cast<double>(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                        1e-6 * static_cast<double>(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) +
                        static_cast<double>(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                        1e-6 * static_cast<double>(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) / steps;
  std::printf(
      "{\"engine\": \"twinkle\", \"config\": \"%s\", \"threads\": %d, \"batch\": %lld, \"seq\": %lld, "
      "\"tied\": %s, \"kernels\": \"%s\", \"recompute\": \"%s\", \"precision\": \"%s\", \"saved_activation_bytes\": %zu, \"step_s\": %.4f, \"tokens_per_s\": %.1f, \"gflops\": %.1f, \"flops_per_step\": %.0f, "
      "\"minor_faults_per_step\": %ld, \"cpu_s_per_step\": %.4f, \"peak_rss_bytes\": %ld, \"step_peak_rss_bytes\": %ld, \"lora_r\": %lld, "
      "\"trainable_params\": %lld, \"optimizer_state_bytes\": %lld, \"loss\": [",
      config.c_str(), threads, static_cast<long long>(B), static_cast<long long>(S), untied ? "false" : "true", kernels.c_str(),
      recompute.c_str(), precision.c_str(), model.saved_activation_bytes(), step_s,
      Bd * Sd / step_s, flops / step_s / 1e9, flops, (r1.ru_minflt - r0.ru_minflt) / steps, cpu_s,
      r1.ru_maxrss * 1024L, step_peak_rss_bytes(), static_cast<long long>(lora_r),
      static_cast<long long>(model.trainable_store().numel()),
      static_cast<long long>(2 * 4 * opt.state_elements()));  // AdamW m and v, fp32
  for (size_t i = 0; i < losses.size(); ++i) std::printf("%s%.5f", i ? ", " : "", losses[i]);
  std::printf("]");
  if (on_device) {
    const kernels::AcceleratorPeak pk = kernels::accelerator_peak(device, precision == "bf16");
    long long peak_dev = -1;
#ifdef TWINKLE_CUDA_BUILT
    if (device == "cuda") peak_dev = static_cast<long long>(twinkle::cuda::allocator().stats().peak_in_use);
#endif
    std::printf(", \"device\": \"%s\", \"device_name\": \"%s\", \"peak_device_bytes\": %lld, "
                "\"datasheet_peak_tflops\": %.1f, \"mfu_datasheet\": %.4f",
                device.c_str(), pk.name.c_str(), peak_dev, pk.flops / 1e12, pk.flops > 0 ? flops / step_s / pk.flops : 0.0);
  }
  std::printf("}\n");
  return 0;
}
