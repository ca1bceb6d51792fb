// MegatronModel: the training state of a checkpoint — saved with save(..., save_optimizer) and
// restored by resume_from_checkpoint (Twinkle's save_optimizer / resume_from_checkpoint,
// src/twinkle/model/megatron/megatron.py). Layout-independent: the fp32 trainable weights and
// AdamW's moments are written as full Hugging Face-named tensors (the tp/pp shards and the
// ZeRO-1 dp-cp shards gathered), so any layout can slice them back (Megatron's dp_reshardable
// optimizer form does the same for the dp shards).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "twinkle/core/device_copy.h"
#include "twinkle/dist/agreed_error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/io/model_config.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/train/checkpoint_dir.h"
#include "twinkle/train/megatron_model.h"

namespace twinkle {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kMaster = "master_weights.safetensors";
constexpr const char* kExpAvg = "exp_avg.safetensors";
constexpr const char* kExpAvgSq = "exp_avg_sq.safetensors";
constexpr const char* kState = "state.json";
constexpr int kStateVersion = 1;

// config.json fields that decide the shapes and meaning of the saved tensors.
const char* const kConfigFields[] = {"model_type", "vocab_size", "hidden_size", "intermediate_size",
                                     "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                                     "tie_word_embeddings", "attention_bias", "num_experts", "num_experts_per_tok",
                                     "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers"};

json read_json(const fs::path& p, const std::string& what) {
  std::ifstream in(p);
  check(in.good(), "resume: " + p.string() + " is missing (" + what + ")");
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw Error("resume: " + p.string() + " is not valid JSON (" + what + "): " + e.what());
  }
}

template <class T>
T field(const json& j, const std::string& key, const fs::path& file) {
  check(j.contains(key) && !j[key].is_null(), "resume: " + file.string() + " has no field '" + key + "'");
  try {
    return j[key].get<T>();
  } catch (const std::exception&) {
    throw Error("resume: " + file.string() + ": field '" + key + "' has the wrong type (" + j[key].dump() + ")");
  }
}

// Every tensor of an optimizer-state file must be f32 (the state is never rounded).
SafetensorsFile open_state_file(const fs::path& p, const std::string& what) {
  check(fs::exists(p), "resume: " + p.string() + " is missing (" + what + ")");
  SafetensorsFile f = SafetensorsFile::open(p.string());
  for (const auto& n : f.names())
    check(f.info(n).dtype == DType::F32, "resume: " + p.string() + ": tensor '" + n + "' is " +
                                             dtype_name(f.info(n).dtype) + ", expected F32 (" + what + ")");
  return f;
}

}  // namespace

MegatronModel::TrainingStateTensors MegatronModel::gather_training_state(
    std::vector<std::pair<std::string, Tensor>> master) {
  TrainingStateTensors t;
  t.master = std::move(master);
  std::vector<float> m, v;
  optimizer().gather_state(m, v);  // collective over dp-cp: the full flat state on every rank
  const bool adapters = model_->has_adapter();
  t.exp_avg = model_->gather_flat(m.data(), adapters);  // collective over the world: full tensors on rank 0
  t.exp_avg_sq = model_->gather_flat(v.data(), adapters);
  return t;
}

void MegatronModel::write_training_state(const std::string& dir, const TrainingStateTensors& t,
                                         const SaveOptions& opts) const {
  const fs::path d(dir);
  const fs::path it = d / iter_dir_name(cur_step_);
  fs::create_directories(it);
  const int64_t consumed = opts.consumed_train_samples >= 0
                               ? opts.consumed_train_samples
                               : (opts.dataloader ? opts.dataloader->consumed_samples() : 0);
  // trainer_state.json exactly as Twinkle writes it (megatron.py save: json.dump of these keys).
  json ts = {{"checkpoint_version", 1},
             {"cur_step", cur_step_},
             {"consumed_train_samples", consumed},
             {"gradient_accumulation_steps", 1}};
  save_safetensors((it / kMaster).string(), t.master);
  save_safetensors((it / kExpAvg).string(), t.exp_avg);
  save_safetensors((it / kExpAvgSq).string(), t.exp_avg_sq);
  json st;
  st["format"] = "twinkle-training-state";
  st["version"] = kStateVersion;
  st["cur_step"] = cur_step_;
  st["skipped_steps"] = skipped_steps_;
  st["optimizer"] = {{"steps", optim_->steps()},
                     {"lr", optim_cfg_.lr},
                     {"weight_decay", optim_cfg_.weight_decay},
                     {"adam_beta1", optim_cfg_.adam_beta1},
                     {"adam_beta2", optim_cfg_.adam_beta2},
                     {"adam_eps", optim_cfg_.adam_eps},
                     {"clip_grad", optim_cfg_.clip_grad},
                     {"use_distributed_optimizer", optim_cfg_.use_distributed_optimizer}};
  if (has_sched_) {
    const auto& c = sched_.config();
    st["scheduler"] = {{"steps", sched_.steps()},           {"lr_warmup_steps", c.lr_warmup_steps},
                       {"lr_decay_steps", c.lr_decay_steps}, {"max_lr", c.max_lr},
                       {"min_lr", c.min_lr},                 {"init_lr", c.init_lr},
                       {"lr_decay_style", c.lr_decay_style}};
  } else {
    st["scheduler"] = nullptr;
  }
  // RNG: training draws no random numbers after the init (no dropout stream: LoRA dropout masks are hashed from the seed and step, lora_dropout.h),
  // so the seeds are the whole RNG state: the init seed and the DataLoader's shuffle seed.
  st["rng"] = {{"global_seed", global_seed()}, {"init_seed", opts_.seed ? opts_.seed : global_seed()}};
  if (opts.dataloader) {
    json dl = opts.dataloader->get_state().to_json();
    dl["seed"] = opts.dataloader->options().seed;
    dl["shuffle"] = opts.dataloader->options().shuffle;
    dl["drop_last"] = opts.dataloader->options().drop_last;
    st["dataloader"] = dl;
  } else {
    st["dataloader"] = nullptr;
  }
  const json cfg = to_json(model_->config());
  json mc = json::object();
  for (const char* k : kConfigFields)
    if (cfg.contains(k)) mc[k] = cfg[k];
  st["model_config"] = mc;
  if (model_->has_adapter()) {
    const auto& l = model_->adapter_config();
    st["adapter"] = {{"name", adapter_name_},          {"r", l.r},
                     {"lora_alpha", l.lora_alpha},      {"target_modules", l.target_modules},
                     {"use_rslora", l.use_rslora},      {"targets", model_->adapter_targets()}};
  } else {
    st["adapter"] = nullptr;
  }
  st["mixed_precision"] = opts_.mixed_precision;  // checked on resume (a warning, like the optimizer settings)
  const auto& mesh = ps_->mesh;
  st["saved_layout"] = {{"tp", mesh.tp_size()}, {"pp", mesh.pp_size()}, {"dp", mesh.dp_size()},
                        {"cp", mesh.cp_size()}, {"ep", mesh.ep_size()}, {"etp", mesh.etp_size()}};
  st["files"] = {{"master_weights", kMaster}, {"exp_avg", kExpAvg}, {"exp_avg_sq", kExpAvgSq}};
  io_detail::write_file_atomic((it / kState).string(), st.dump(2) + "\n");
  io_detail::write_file_atomic((d / "latest_checkpointed_iteration.txt").string(), std::to_string(cur_step_) + "\n");
  io_detail::write_file_atomic((d / "trainer_state.json").string(), ts.dump(2) + "\n");
}

ResumeState MegatronModel::resume_from_checkpoint(const std::string& dir, bool resume_only_model, DataLoader* loader) {
  auto& world = *ps_->world;
  DistributedOptimizer& opt = optimizer();
  opt.finish_param_sync();
  ResumeState rs;
  json st;
  fs::path it, state_path;
  // 1. Files and metadata (every rank reads them; any failure is agreed before a collective).
  dist::run_agreed(world, [&] {
    rs.dir = resolve_resume_dir(dir);
    const fs::path d(rs.dir);
    const fs::path tsp = d / "trainer_state.json";
    const json ts = read_json(tsp, "Twinkle's trainer state");
    rs.cur_step = field<int64_t>(ts, "cur_step", tsp);
    rs.consumed_train_samples = ts.contains("consumed_train_samples") && !ts["consumed_train_samples"].is_null()
                                    ? field<int64_t>(ts, "consumed_train_samples", tsp) : 0;
    rs.gradient_accumulation_steps = ts.contains("gradient_accumulation_steps")
                                         ? field<int64_t>(ts, "gradient_accumulation_steps", tsp) : 1;
    it = d / iter_dir_name(rs.cur_step);
    state_path = it / kState;
    check(fs::exists(state_path), "resume: " + state_path.string() + " is missing (the checkpoint at " + rs.dir +
                                      " was saved without save_optimizer / --save-optimizer, or is incomplete)");
    st = read_json(state_path, "training state");
    check(st.value("format", std::string()) == "twinkle-training-state",
          "resume: " + state_path.string() + " is not a twinkle training state (field 'format')");
    const int version = field<int>(st, "version", state_path);
    check(version == kStateVersion, "resume: " + state_path.string() + " has version " + std::to_string(version) +
                                        "; this build reads version " + std::to_string(kStateVersion));
    // The model must be the one that was saved.
    const json cfg = to_json(model_->config());
    const json saved = field<json>(st, "model_config", state_path);
    for (const char* k : kConfigFields) {
      const json a = saved.contains(k) ? saved[k] : json(), b = cfg.contains(k) ? cfg[k] : json();
      check(a == b, "resume: " + state_path.string() + ": model config field '" + k + "' is " + a.dump() +
                        " in the checkpoint but " + b.dump() + " in this model (" + model_dir_ + "/config.json)");
    }
    const json ad = st.contains("adapter") ? st["adapter"] : json();
    check(ad.is_null() == !model_->has_adapter(),
          "resume: " + state_path.string() + (ad.is_null() ? " was saved by full training, but this model has LoRA adapter '" +
                                                                  adapter_name_ + "'"
                                                            : " holds a LoRA adapter's state, but this model has no adapter "
                                                              "(add it with the same LoRA config first; --lora-r ...)"));
    if (!ad.is_null()) {
      const auto& l = model_->adapter_config();
      check(field<int64_t>(ad, "r", state_path) == l.r && field<double>(ad, "lora_alpha", state_path) == l.lora_alpha &&
                field<bool>(ad, "use_rslora", state_path) == l.use_rslora &&
                field<std::vector<std::string>>(ad, "targets", state_path) == model_->adapter_targets(),
            "resume: " + state_path.string() + ": the adapter was saved with r " + ad["r"].dump() + ", lora_alpha " +
                ad["lora_alpha"].dump() + ", use_rslora " + ad["use_rslora"].dump() + ", target_modules " +
                ad["target_modules"].dump() + "; this model's adapter has r " + std::to_string(l.r) + ", lora_alpha " +
                json(l.lora_alpha).dump() + ", use_rslora " + (l.use_rslora ? "true" : "false") + ", target_modules " +
                json(l.target_modules).dump());
    }
    if (!resume_only_model) {
      const json sc = st.contains("scheduler") ? st["scheduler"] : json();
      check(sc.is_null() == !has_sched_,
            "resume: " + state_path.string() + (sc.is_null() ? " was saved without an lr scheduler, but this run has one"
                                                             : " was saved with an lr scheduler, but this run has none"));
      if (has_sched_) {
        // Megatron's OptimizerParamScheduler.load_state_dict (_check_and_set): a changed schedule is refused.
        const auto& c = sched_.config();
        auto same = [&](const char* k, const json& mine, const char* flag) {
          check(sc[k] == mine, "resume: " + state_path.string() + ": scheduler field '" + k + "' is " + sc[k].dump() +
                                   " in the checkpoint but " + mine.dump() + " in this run (" + flag +
                                   "); Megatron's OptimizerParamScheduler refuses a changed schedule");
        };
        same("lr_warmup_steps", c.lr_warmup_steps, "--lr-warmup-steps");
        same("lr_decay_steps", c.lr_decay_steps, "--lr-decay-steps / --max-steps");
        same("max_lr", c.max_lr, "--lr");
        same("min_lr", c.min_lr, "--min-lr");
        same("init_lr", c.init_lr, "init_lr");
        same("lr_decay_style", c.lr_decay_style, "--lr-decay-style");
      }
      const json oc = field<json>(st, "optimizer", state_path);
      if (world.rank() == 0)
        for (const auto& [k, mine] : std::vector<std::pair<std::string, json>>{{"lr", optim_cfg_.lr},
                                                                              {"weight_decay", optim_cfg_.weight_decay},
                                                                              {"adam_beta1", optim_cfg_.adam_beta1},
                                                                              {"adam_beta2", optim_cfg_.adam_beta2},
                                                                              {"adam_eps", optim_cfg_.adam_eps},
                                                                              {"clip_grad", optim_cfg_.clip_grad}})
          if (oc.contains(k) && oc[k] != mine)
            get_logger().warning("resume: optimizer setting " + k + " was " + oc[k].dump() + " in " + state_path.string() +
                                 ", this run uses " + mine.dump() + " (the continued run differs from an uninterrupted one)");
      // bf16 vs fp32 GEMM inputs change every later step as much as a new lr does (checkpoints
      // written before this field was saved say nothing)
      if (world.rank() == 0 && st.contains("mixed_precision") && st["mixed_precision"] != json(opts_.mixed_precision))
        get_logger().warning("resume: mixed_precision was " + st["mixed_precision"].dump() + " in " + state_path.string() +
                             ", this run uses \"" + opts_.mixed_precision + "\" (--bf16 / --fp32; the continued run "
                             "differs from an uninterrupted one)");
    }
    if (loader) {
      const json dl = st.contains("dataloader") ? st["dataloader"] : json();
      check(!dl.is_null(), "resume: " + state_path.string() + " holds no DataLoader position (saved without one)");
      const auto& lo = loader->options();
      check(field<uint64_t>(dl, "seed", state_path) == lo.seed && field<bool>(dl, "shuffle", state_path) == lo.shuffle,
            "resume: " + state_path.string() + ": the data order was saved with shuffle " + dl["shuffle"].dump() +
                " seed " + dl["seed"].dump() + ", this DataLoader has shuffle " + (lo.shuffle ? "true" : "false") +
                " seed " + std::to_string(lo.seed) + " (--shuffle / --seed)");
      rs.dataloader = DataLoaderState::from_json(dl);
      rs.has_dataloader = true;
      loader->set_state(rs.dataloader);
    }
  });
  // 2. Tensors: each rank slices its shards out of the full tensors (any saving layout).
  ParamStore& store = model_->trainable_store();
  const bool adapters = model_->has_adapter();
  std::vector<float> m, v;
  dist::run_agreed(world, [&] {
    const SafetensorsFile master = open_state_file(it / kMaster, "fp32 trainable weights");
    if (store.device() == Device::CPU) {
      model_->load_flat(master, adapters, store.flat_params().f32());
    } else {  // load_flat fills host memory: stage the store's flat layout, then upload it
      std::vector<float> staged(static_cast<size_t>(store.numel()), 0.0f);
      model_->load_flat(master, adapters, staged.data());
      upload_bytes(store.device(), store.flat_params().f32(), staged.data(), staged.size() * 4);
    }
    if (resume_only_model) return;
    m.assign(static_cast<size_t>(store.numel()), 0.0f);
    v.assign(static_cast<size_t>(store.numel()), 0.0f);
    model_->load_flat(open_state_file(it / kExpAvg, "AdamW exp_avg"), adapters, m.data());
    model_->load_flat(open_state_file(it / kExpAvgSq, "AdamW exp_avg_sq"), adapters, v.data());
  });
  if (!resume_only_model) {
    const json& oc = st["optimizer"];
    opt.load_state(m.data(), v.data(), field<int64_t>(oc, "steps", state_path));
    if (has_sched_) sched_.set_steps(field<int64_t>(st["scheduler"], "steps", state_path));
    cur_step_ = rs.cur_step;
    resumed_step_ = rs.cur_step;  // the tensorboard_dir file's SessionLog START (clip_grad_and_step)
    skipped_steps_ = st.value("skipped_steps", int64_t{0});
  }
  if (world.rank() == 0)
    get_logger().info("resumed from " + rs.dir + " at step " + std::to_string(rs.cur_step) +
                      (resume_only_model ? " (weights only)" : "") + "; saved on tp " +
                      st["saved_layout"].value("tp", json(0)).dump() + " pp " + st["saved_layout"].value("pp", json(0)).dump() +
                      " dp " + st["saved_layout"].value("dp", json(0)).dump());
  return rs;
}

}  // namespace twinkle
