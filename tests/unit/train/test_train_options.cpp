// Training semantics and option validation on the C++ API:
//  - a non-finite grad norm never reaches the weights (DistributedOptimizer skips the update
//    and leaves parameters, AdamW moments and step count as they were); MegatronModel stops with
//    an error naming the step and the value (on_nonfinite "error") or skips and counts the step
//    (on_nonfinite "skip", no scheduler step);
//  - a global batch without a labelled token gives no NaN: has_loss false, zero gradients,
//    "no labelled tokens" in calculate_metric;
//  - set_optimizer / set_lr_scheduler / the constructor validate their option sets
//    (the same functions the command line calls) and leave the model unchanged on error;
//    resolve_max_steps: 0 = one epoch, negative = error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>

#include "error_of.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/parallel_state.h"
#include "twinkle/io/model_config.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/train/engine.h"
#include "twinkle/train/megatron_model.h"

using namespace twinkle;
namespace fs = std::filesystem;

using twinkle::test_support::error_of;

namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 301;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 128;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  return c;
}

std::vector<EncodedRow> rows(int n, uint64_t seed, bool labelled = true) {
  std::mt19937_64 g(seed);
  std::vector<EncodedRow> out;
  for (int i = 0; i < n; ++i) {
    EncodedRow r;
    int L = 6 + static_cast<int>(g() % 8);
    for (int t = 0; t < L; ++t) {
      r.input_ids.push_back(static_cast<int32_t>(g() % 301));
      r.labels.push_back(labelled && t >= 2 ? r.input_ids.back() : kIgnoreIndex);
      r.position_ids.push_back(t);
      r.attention_mask.push_back(1);
    }
    r.length = L;
    out.push_back(r);
  }
  return out;
}

// A model directory with only config.json (seeded random init), no MFU measurement.
std::string model_dir() {
  static const std::string dir = [] {
    setenv("TWINKLE_PEAK_GFLOPS", "1", 1);
    const fs::path d = fs::temp_directory_path() / ("twinkle_train_options_" + std::to_string(::getpid()));
    fs::create_directories(d);
    save_model_config(tiny_config(), (d / "config.json").string());
    return d.string();
  }();
  return dir;
}

// The final norm weight set to NaN: every logit, the loss and the gradients become NaN.
void poison(MegatronModel& m) {
  Param* p = m.model().store().find("model.norm.weight");
  ASSERT_NE(p, nullptr);
  float* d = p->data.f32();
  for (int64_t i = 0; i < p->data.numel(); ++i) d[i] = std::numeric_limits<float>::quiet_NaN();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(NonFinite, OptimizerNeverAppliesANonFiniteGradNorm) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(), ps);
  model.init_random(1);
  Engine eng(model);
  DistributedOptimizer opt(model.store(), ps, OptimizerConfig{.lr = 1e-2});
  const std::vector<float> before = model.store().flat_params().to_vector();
  eng.forward_backward({collate_padded(rows(2, 3), 0)});
  model.store().flat_grads().f32()[5] = std::numeric_limits<float>::quiet_NaN();
  StepStats st = opt.step(1e-2);
  EXPECT_TRUE(st.skipped);
  EXPECT_TRUE(std::isnan(st.grad_norm));
  EXPECT_EQ(st.step, 0);
  EXPECT_EQ(opt.steps(), 0);
  EXPECT_EQ(model.store().flat_params().to_vector(), before);  // nothing applied
  for (float g : model.store().flat_grads().to_vector()) ASSERT_EQ(g, 0.0f);  // gradients discarded
  // The next finite step equals the first step of a fresh optimizer (moments untouched).
  Qwen3Model ref(tiny_config(), ps);
  ref.init_random(1);
  Engine ref_eng(ref);
  DistributedOptimizer ref_opt(ref.store(), ps, OptimizerConfig{.lr = 1e-2});
  eng.forward_backward({collate_padded(rows(2, 4), 0)});
  ref_eng.forward_backward({collate_padded(rows(2, 4), 0)});
  EXPECT_FALSE(opt.step(1e-2).skipped);
  ref_opt.step(1e-2);
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_EQ(model.store().flat_params().to_vector(), ref.store().flat_params().to_vector());
}

TEST(NonFinite, MegatronModelStopsNamingTheStep) {
  MegatronModel m(model_dir());
  m.set_optimizer("default", {.lr = 1e-3});
  m.forward_backward(rows(2, 5));
  EXPECT_FALSE(m.clip_grad_and_step().skipped);
  poison(m);
  const std::vector<float> before = m.model().store().flat_params().to_vector();
  m.forward_backward(rows(2, 6));
  const std::string e = error_of([&] { m.clip_grad_and_step(); });
  EXPECT_NE(e.find("step 2"), std::string::npos) << e;
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
  EXPECT_TRUE(same_bits(m.model().store().flat_params().to_vector(), before));  // nothing applied
}

TEST(NonFinite, ANonFiniteGradNormWithAFiniteLossStopsToo) {
  MegatronModel m(model_dir());
  m.set_optimizer("default", {.lr = 1e-3});
  m.forward_backward(rows(2, 5));
  const std::vector<float> before = m.model().store().flat_params().to_vector();
  m.model().store().flat_grads().f32()[3] = std::numeric_limits<float>::infinity();
  const std::string e = error_of([&] { m.clip_grad_and_step(); });
  EXPECT_NE(e.find("step 1: the gradient norm is non-finite (inf"), std::string::npos) << e;
  EXPECT_TRUE(same_bits(m.model().store().flat_params().to_vector(), before));
}

TEST(NonFinite, SaveRefusesNonFiniteWeightsBeforeWritingAnything) {
  MegatronModel m(model_dir());
  poison(m);
  const fs::path out = fs::temp_directory_path() / ("twinkle_nan_save_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string e = error_of([&] { m.save("", {.output_dir = out.string()}); });
  EXPECT_NE(e.find("model.norm.weight holds a non-finite value"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out));
}

TEST(NonFinite, SkipPolicyCountsAndHoldsTheScheduler) {
  MegatronModel m(model_dir(), {.on_nonfinite = "skip"});
  m.set_optimizer("default", {.lr = 1e-3});
  m.set_lr_scheduler("default", {.lr_warmup_steps = 2, .lr_decay_steps = 10});
  m.forward_backward(rows(2, 5));
  const StepStats ok = m.clip_grad_and_step();
  EXPECT_FALSE(ok.skipped);
  poison(m);
  m.forward_backward(rows(2, 6));
  const StepStats st = m.clip_grad_and_step();
  EXPECT_TRUE(st.skipped);
  EXPECT_TRUE(m.last_metrics().skipped);
  EXPECT_EQ(m.last_metrics().skipped_steps, 1);
  EXPECT_EQ(m.optimizer().steps(), 1);
  EXPECT_DOUBLE_EQ(m.last_metrics().lr, 0.5e-3);  // warm-up step 1 of 2
  // the scheduler did not advance: the next step runs at the same lr (else 1e-3)
  m.forward_backward(rows(2, 7));
  EXPECT_TRUE(m.clip_grad_and_step().skipped);
  EXPECT_DOUBLE_EQ(m.last_metrics().lr, 0.5e-3);
  EXPECT_EQ(m.last_metrics().skipped_steps, 2);
  EXPECT_EQ(m.calculate_metric(true).at("skipped steps"), "2");
}

TEST(NoLabelledTokens, LossIsUndefinedNotZeroAndNothingIsNaN) {
  MegatronModel m(model_dir());
  m.set_optimizer("default", {.lr = 1e-3});
  const double loss = m.forward_backward(rows(3, 9, /*labelled=*/false));
  EXPECT_EQ(loss, 0.0);
  for (float g : m.model().store().flat_grads().to_vector()) ASSERT_EQ(g, 0.0f);
  const StepStats st = m.clip_grad_and_step();
  EXPECT_FALSE(st.skipped);  // no labelled token is not a non-finite step
  EXPECT_EQ(st.grad_norm, 0.0);
  EXPECT_FALSE(m.last_metrics().has_loss);
  EXPECT_EQ(m.last_metrics().label_tokens, 0);
  EXPECT_EQ(m.calculate_metric(true).at("loss"), "no labelled tokens");
  for (float p : m.model().store().flat_params().to_vector()) ASSERT_TRUE(std::isfinite(p));
  m.forward_only(rows(2, 10, false));
  EXPECT_EQ(m.last_eval_label_tokens(), 0);
}

TEST(TrainOptions, ApiValidatesEveryOptionSet) {
  EXPECT_NE(error_of([] { MegatronModel(model_dir(), {.micro_batch_size = -1}); }).find("'micro_batch_size'"),
            std::string::npos);
  EXPECT_NE(error_of([] { MegatronModel(model_dir(), {.lm_head_chunk_tokens = 0}); }).find("'lm_head_chunk_tokens'"),
            std::string::npos);
  EXPECT_NE(error_of([] { MegatronModel(model_dir(), {.layers_per_stage = {2, 0}}); }).find("'layers_per_stage'"),
            std::string::npos);
  EXPECT_NE(error_of([] { MegatronModel(model_dir(), {.on_nonfinite = "ignore"}); }).find("'on_nonfinite'"),
            std::string::npos);
  EXPECT_EQ(error_of([] { validate(MegatronModelOptions{.micro_batch_size = 0}); }), "");  // 0 = default

  MegatronModel m(model_dir());
  m.set_optimizer("default", {.lr = 1e-3});
  EXPECT_NE(error_of([&] { m.set_optimizer("default", {.lr = -1}); }).find("'lr' (--lr)"), std::string::npos);
  EXPECT_NE(error_of([&] { m.set_optimizer("default", {.adam_beta1 = 1.5}); }).find("'adam_beta1'"),
            std::string::npos);
  EXPECT_EQ(m.optimizer().config().lr, 1e-3);  // unchanged after the refused call
  EXPECT_NE(error_of([&] { m.set_lr_scheduler("default", {.lr_warmup_steps = 4, .lr_decay_steps = 4}); })
                .find("'lr_warmup_steps'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m.set_lr_scheduler("default", {.min_lr = 1.0}); }).find("'min_lr'"), std::string::npos);
  m.set_lr_scheduler("default", {.lr_decay_steps = 10, .min_lr = 1e-4});
  // lowering lr below the scheduler's min_lr through set_optimizer is refused too
  EXPECT_NE(error_of([&] { m.set_optimizer("default", {.lr = 1e-5}); }).find("'min_lr'"), std::string::npos);
}

TEST(TrainOptions, MaxStepsZeroIsOneEpoch) {
  EXPECT_EQ(resolve_max_steps(0, 7), 7);
  EXPECT_EQ(resolve_max_steps(3, 7), 3);
  EXPECT_EQ(resolve_max_steps(12, 7), 12);
  const std::string e = error_of([] { resolve_max_steps(-1, 7); });
  EXPECT_NE(e.find("'max_steps' (--max-steps) must be >= 0 (0 = one epoch), got -1"), std::string::npos) << e;
}

// clip_grad_and_step(max_grad_norm) honours its argument (megatron_model.h; Twinkle ignores it): an
// argument clips exactly as the same value set as OptimizerConfig::clip_grad does (that path is checked
// against torch.nn.utils.clip_grad_norm_ by train_vs_torch_*), and an argument <= 0 (0 or negative, as the
// Python docstring says) turns a configured clipping off. The coefficient is torch's max_norm / (norm + 1e-6). adam_eps 1e-3 makes the update
// depend on the gradient's scale (with eps 1e-8 Adam's first step is nearly lr * sign(g)).
TEST(MaxGradNorm, TheArgumentClipsAsTheConfiguredValueDoes) {
  auto train = [](double configured, std::optional<double> arg, StepStats& st) {
    MegatronModel m(model_dir());
    m.set_optimizer("default", {.lr = 1e-2, .adam_eps = 1e-3, .clip_grad = configured});
    m.forward_backward(rows(2, 5));
    st = m.clip_grad_and_step(arg);
    return m.model().store().flat_params().to_vector();
  };
  StepStats a, b, c, d, e;
  const std::vector<float> off = train(0.0, std::nullopt, d);
  ASSERT_GT(d.grad_norm, 0.0);
  const double clip = d.grad_norm / 4;  // active: a quarter of the step's norm
  const std::vector<float> clipped = train(clip, std::nullopt, a), by_arg = train(0.0, clip, b),
                           off_by_arg = train(clip, 0.0, c), off_by_negative = train(clip, -1.0, e);
  EXPECT_EQ(a.grad_norm, d.grad_norm);
  EXPECT_NEAR(a.clip_coef, clip / (a.grad_norm + 1e-6), 1e-9);
  EXPECT_EQ(b.clip_coef, a.clip_coef);
  EXPECT_TRUE(same_bits(by_arg, clipped)) << "max_grad_norm did not clip as the same clip_grad does";
  EXPECT_EQ(c.clip_coef, 1.0);
  EXPECT_EQ(d.clip_coef, 1.0);
  EXPECT_TRUE(same_bits(off_by_arg, off)) << "max_grad_norm 0 did not turn the configured clipping off";
  EXPECT_EQ(e.clip_coef, 1.0);
  EXPECT_TRUE(same_bits(off_by_negative, off)) << "max_grad_norm -1 did not turn the configured clipping off";
  EXPECT_FALSE(same_bits(clipped, off));  // the clipping moves the weights
}
