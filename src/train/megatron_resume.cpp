// MegatronModel: the training state of a checkpoint — saved with save(..., save_optimizer) and
// restored by resume_from_checkpoint (Twinkle's save_optimizer / resume_from_checkpoint,
// src/twinkle/model/megatron/megatron.py). Layout-independent in both forms: "gathered" writes the
// fp32 trainable weights and AdamW's moments as full Hugging Face-named tensors (the tp/pp shards
// and the ZeRO-1 dp-cp shards gathered; Megatron's dp_reshardable optimizer form does the same for
// the dp shards); "sharded" (save_sharded) has every rank write the boxes of those tensors it owns
// plus an index (io/sharded_checkpoint.h; Megatron's torch_dist / PyTorch DCP), and any layout reads
// back the boxes its slices intersect.
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <atomic>
#include <map>
#include <thread>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "twinkle/core/device_copy.h"
#include "twinkle/dist/agreed_error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/io/model_config.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/io/sharded_checkpoint.h"
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
  const fs::path it = fs::path(dir) / iter_dir_name(cur_step_);
  fs::create_directories(it);
  save_safetensors((it / kMaster).string(), t.master);
  save_safetensors((it / kExpAvg).string(), t.exp_avg);
  save_safetensors((it / kExpAvgSq).string(), t.exp_avg_sq);
  const json files = {{"master_weights", kMaster}, {"exp_avg", kExpAvg}, {"exp_avg_sq", kExpAvgSq}};
  write_state_json(dir, opts, "", files.dump());
}

void MegatronModel::write_state_json(const std::string& dir, const SaveOptions& opts, const std::string& format,
                                     const std::string& files_json) const {
  const fs::path d(dir);
  const fs::path it = d / iter_dir_name(cur_step_);
  const std::vector<std::string> t = state_json_texts(opts, format, files_json);
  io_detail::write_file_atomic((it / kState).string(), t[0]);
  io_detail::write_file_atomic((d / "latest_checkpointed_iteration.txt").string(), t[1]);
  io_detail::write_file_atomic((d / "trainer_state.json").string(), t[2]);
}

std::vector<std::string> MegatronModel::state_json_texts(const SaveOptions& opts, const std::string& format,
                                                         const std::string& files_json) const {
  const int64_t consumed = opts.consumed_train_samples >= 0
                               ? opts.consumed_train_samples
                               : (opts.dataloader ? opts.dataloader->consumed_samples() : 0);
  // trainer_state.json exactly as Twinkle writes it (megatron.py save: json.dump of these keys).
  json ts = {{"checkpoint_version", 1},
             {"cur_step", cur_step_},
             {"consumed_train_samples", consumed},
             {"gradient_accumulation_steps", 1}};
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
  if (!format.empty()) st["save_format"] = format;  // absent: the gathered form (as before the field existed)
  st["files"] = json::parse(files_json);
  return {st.dump(2) + "\n", std::to_string(cur_step_) + "\n", ts.dump(2) + "\n"};
}

namespace {

// A box of a global tensor and where its elements lie in this rank's flat store: a run of
// `numel` contiguous elements from flat element `flat`.
struct OwnedBox {
  std::vector<int64_t> offsets, lengths;
  int64_t flat = 0, numel = 0;
};

// The boxes of the global tensor that local elements [a, b) of a parameter hold (local shape
// `local`, row-major; 1-D as [n, 1]), each contiguous in local memory: the partial first row,
// the whole rows, the partial last row; vocab padding rows / columns beyond `valid` dropped.
void boxes_of_range(const ShardSpec& sp, const Shape& local, int64_t flat0, int64_t a, int64_t b,
                    std::vector<OwnedBox>& out) {
  const bool one_d = local.size() == 1;
  const int64_t lc = one_d ? 1 : local[1];
  auto emit = [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    // clip to the rows / columns that exist in the HF tensor
    int64_t gr = r0, gc = c0;
    if (sp.split_dim == 0) {
      if (r0 >= sp.valid) return;
      nr = std::min(nr, sp.valid - r0);
      gr = r0 + sp.offset;
    } else if (sp.split_dim == 1) {
      if (c0 >= sp.valid) return;
      nc = std::min(nc, sp.valid - c0);
      gc = c0 + sp.offset;
    }
    if (nr <= 0 || nc <= 0) return;
    OwnedBox bx;
    bx.flat = flat0 + r0 * lc + c0;
    bx.numel = nr * nc;
    if (one_d) {
      bx.offsets = {gr};
      bx.lengths = {nr};
    } else {
      bx.offsets = {gr, gc};
      bx.lengths = {nr, nc};
    }
    out.push_back(std::move(bx));
  };
  // Columns clipped inside whole rows would not be contiguous: emit row by row then.
  const bool per_row = sp.split_dim == 1 && sp.valid < lc;
  int64_t pos = a;
  while (pos < b) {
    const int64_t r = pos / lc, c = pos % lc;
    if (c != 0 || b - pos < lc || per_row) {
      const int64_t nc = std::min(lc - c, b - pos);
      emit(r, 1, c, nc);
      pos += nc;
    } else {
      const int64_t nr = (b - pos) / lc;
      emit(r, nr, 0, lc);
      pos += nr * lc;
    }
  }
}

const char* const kKinds[] = {"master", "exp_avg", "exp_avg_sq"};

// Fills, in `flat` (the trainable store's flat layout, zeroed by the caller), only the elements of
// this rank's ZeRO-1 ranges — all DistributedOptimizer::load_state keeps — box by box from the
// sharded checkpoint `ck` (a moment's prefix), so a dp-sharded rank reads its share of the moments
// and not its whole tp / pp shard. Throws twinkle::Error naming the index and tensor that is
// missing or has another shape.
void load_owned_state(const ShardedCheckpointReader& ck, const parallel::TensorTable& table, bool adapters,
                      const std::vector<DistributedOptimizer::OwnedRange>& owned, float* flat) {
  for (size_t id = 0; id < table.size(); ++id) {
    const parallel::TensorEntry& e = table[id];
    if (e.adapter != adapters || e.param == parallel::kNoParam) continue;
    const std::string* name = nullptr;
    for (const auto& n : e.load_names)
      if (ck.contains(n)) {
        name = &n;
        break;
      }
    if (!name && ck.contains(e.name)) name = &e.name;
    check(name != nullptr, "resume: " + ck.dir() + "/" + kShardedIndexName + " has no tensor '" + e.name + "'");
    check(ck.info(*name).shape == e.full, "resume: " + ck.dir() + "/" + kShardedIndexName + ": tensor '" + *name +
                                              "' has shape " + shape_str(ck.info(*name).shape) + ", expected " +
                                              shape_str(e.full) + " from config.json");
    const Param& p = table.param(id);
    const int64_t p0 = p.flat_offset, p1 = p.flat_offset + p.data.numel();
    std::vector<OwnedBox> boxes;
    for (const auto& r : owned) {
      const int64_t a = std::max(p0, r.start), b = std::min(p1, r.start + r.len);
      if (a < b) boxes_of_range(e.shard, p.shape, p0, a - p0, b - p0, boxes);
    }
    for (const OwnedBox& bx : boxes) ck.read_f32(*name, bx.offsets, bx.lengths, flat + bx.flat);
  }
}

}  // namespace

// A sharded save from its start to its commit: this rank's shard file (written by a background
// thread under async_save, from `staging`) and rank 0's index, state texts and commit.
struct MegatronModel::PendingSave {
  std::thread th;
  std::atomic<bool> done{false};
  std::string error;           // this rank's write failure ("" = none)
  float* staging = nullptr;  // async: a copy of this rank's slices, in MegatronModel::async_staging_
  std::vector<TensorSource> sources;
  std::string file;            // this rank's shard file
  fs::path dir, it, final_dir;
  std::string name, output_dir, not_written;
  int64_t keep_last = 0;
  ShardedIndex index;               // rank 0
  std::vector<std::string> texts;   // rank 0: state.json, latest_checkpointed_iteration.txt, trainer_state.json
  double write_s = 0;               // the shard file's write + fsync, seconds
  void write() {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      save_safetensors_streamed(file, sources, {{"format", "twinkle-sharded"}});
    } catch (const std::exception& e) {
      error = not_written + e.what();
    }
    write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done = true;
  }
  ~PendingSave() {
    if (th.joinable()) th.join();
  }
};

void MegatronModel::PendingSaveDelete::operator()(PendingSave* p) const { delete p; }

void MegatronModel::wait_for_save() {
  if (pending_save_) finish_pending_save(true);
}

void MegatronModel::finish_pending_save(bool blocking) {
  auto& world = *ps_->world;
  if (!blocking) {  // commit only when every rank's writer is done (the same answer on every rank)
    int64_t done = pending_save_->done ? 1 : 0;
    if (world.size() > 1) world.all_reduce(&done, 1, DType::I64, dist::ReduceOp::Min);
    if (!done) return;
  }
  std::unique_ptr<PendingSave, PendingSaveDelete> p = std::move(pending_save_);
  if (p->th.joinable()) p->th.join();
  if (std::getenv("TWINKLE_SAVE_STATS"))  // bench/ckpt_save_bench.py
    std::fprintf(stderr, "save stats: rank %d shard file written in %.3f s%s\n", world.rank(), p->write_s,
                 p->staging ? " (background thread)" : "");
  auto cleanup = [&] {
    if (world.rank() != 0) return;
    std::error_code ec;
    fs::remove_all(p->dir, ec);  // the staging dir; earlier checkpoints were never touched
  };
  {
    int64_t failed = p->error.empty() ? 0 : 1;
    if (world.size() > 1) world.all_reduce(&failed, 1, DType::I64, dist::ReduceOp::Sum);
    if (failed) cleanup();
    dist::throw_agreed_error(world, failed, p->error);
  }
  run_on_rank0_agreed(
      world,
      [&] {
        io_detail::write_file_atomic((p->it / kState).string(), p->texts[0]);
        io_detail::write_file_atomic((p->dir / "latest_checkpointed_iteration.txt").string(), p->texts[1]);
        io_detail::write_file_atomic((p->dir / "trainer_state.json").string(), p->texts[2]);
        io_detail::write_file_atomic((p->it / kShardedIndexName).string(), p->index.to_json());  // last
        fsync_tree(p->dir.string());
        commit_dir(p->dir.string(), p->final_dir.string());  // the checkpoint appears complete, or not at all
        write_latest(p->output_dir, p->name);                // `latest` last
        for (const auto& old : prune_checkpoints(p->output_dir, p->keep_last, p->final_dir.string()))
          get_logger().info("save: removed " + old + " (keep_last " + std::to_string(p->keep_last) + ")");
      },
      [&](const std::string& what) {
        cleanup();
        return p->not_written + what;
      },
      "save: writing " + p->final_dir.string() + " failed on rank 0");
}

void MegatronModel::save_sharded(const std::string& name, const std::string& final_dir_s, const SaveOptions& opts,
                                 const ModelConfig& cfg) {
  auto& world = *ps_->world;
  DistributedOptimizer& opt = optimizer();
  const int rank = world.rank(), nranks = world.size();
  std::unique_ptr<PendingSave, PendingSaveDelete> pending(new PendingSave);
  PendingSave& ps = *pending;
  ps.final_dir = fs::path(final_dir_s);
  ps.name = name;
  ps.output_dir = opts.output_dir;
  ps.keep_last = opts.keep_last;
  // Every rank writes into the staging directory named by global rank 0's pid.
  int64_t pid = static_cast<int64_t>(::getpid());
  if (nranks > 1) world.broadcast(&pid, 1, DType::I64, 0);
  ps.dir = fs::path(staging_dir_for(ps.final_dir.string(), pid));
  ps.it = ps.dir / iter_dir_name(cur_step_);
  ps.not_written = "save: checkpoint " + ps.final_dir.string() + " was not written (earlier checkpoints are untouched): ";
  const fs::path& dir = ps.dir;
  auto cleanup = [&] {
    if (rank != 0) return;
    std::error_code ec;
    fs::remove_all(dir, ec);  // the staging dir; earlier checkpoints were never touched
  };
  // 1. Rank 0 makes the staging directory and writes the small files.
  run_on_rank0_agreed(
      world,
      [&] {
        remove_stale_staging(ps.final_dir.string());  // of a process that died mid-write
        fs::create_directories(ps.it);
        write_model_files(dir.string(), cfg);
        if (model_->has_adapter()) write_peft_adapter_config(dir.string());
      },
      [&](const std::string& what) {
        cleanup();
        return ps.not_written + what;
      },
      "save: writing " + ps.final_dir.string() + " failed on rank 0");

  // 2. This rank's slices: for each trainable tensor of its stage, the boxes of the flat ranges
  //    whose optimizer state it owns (ZeRO-1), once over the replicas; streamed from the live
  //    buffers, or (async) copied into the staging buffer now.
  const bool adapters = model_->has_adapter();
  ParamStore& store = model_->trainable_store();
  const float* flat_params = store.flat_params().f32();
  const Device dev = store.device();
  const auto owned = opt.owned_ranges();
  const auto& table = model_->table();
  const auto& coord = ps_->coord;
  ps.file = (ps.it / sharded_file_name(rank, nranks)).string();
  json my_chunks = json::array();  // {name, key, offsets, lengths}, sent to rank 0
  std::string local_error;
  try {
    std::vector<TensorSource>& sources = ps.sources;
    for (size_t id = 0; id < table.size(); ++id) {
      const parallel::TensorEntry& e = table[id];
      if (!e.saved || e.adapter != adapters || e.param == parallel::kNoParam) continue;
      // A tensor replicated over tp (or an expert's over etp) is written by tp (etp) rank 0 only.
      if (e.shard.split_dim == -1 && (e.expert ? coord.etp : coord.tp) != 0) continue;
      const Param& p = table.param(id);
      const int64_t p0 = p.flat_offset, p1 = p.flat_offset + p.data.numel();
      std::vector<OwnedBox> boxes;
      std::vector<const DistributedOptimizer::OwnedRange*> box_range;
      for (const auto& r : owned) {
        if (!r.unique_owner) continue;
        const int64_t a = std::max(p0, r.start), b = std::min(p1, r.start + r.len);
        if (a >= b) continue;
        const size_t before = boxes.size();
        boxes_of_range(e.shard, p.shape, p0, a - p0, b - p0, boxes);
        for (size_t k = before; k < boxes.size(); ++k) box_range.push_back(&r);
      }
      for (size_t k = 0; k < boxes.size(); ++k) {
        const OwnedBox& bx = boxes[k];
        const DistributedOptimizer::OwnedRange& r = *box_range[k];
        const int64_t state_off = r.state_off + (bx.flat - r.start);
        const std::string suffix = e.name + "#" + std::to_string(k);
        const Shape shape(bx.lengths.begin(), bx.lengths.end());
        const float* src = flat_params + bx.flat;
        const std::string tensor_name = e.name;
        // fp32 master weights: refused when non-finite, as the HF save refuses them
        sources.push_back({std::string("master/") + suffix, DType::F32, shape, nullptr,
                           [src, dev, tensor_name, &dir](void* dst, size_t off, size_t n) {
                             if (dev == Device::CPU)
                               std::memcpy(dst, reinterpret_cast<const char*>(src) + off, n);
                             else
                               download_bytes(dev, dst, reinterpret_cast<const char*>(src) + off, n);
                             const float* f = static_cast<const float*>(dst);
                             for (size_t i = 0; i < n / 4; ++i)
                               if (!std::isfinite(f[i]))
                                 throw Error("save: parameter " + tensor_name + " holds a non-finite value; refusing "
                                             "to write a checkpoint to " + dir.string());
                           }});
        for (int moment = 0; moment < 2; ++moment)
          sources.push_back({std::string(kKinds[1 + moment]) + "/" + suffix, DType::F32, shape, nullptr,
                             [&opt, moment, state_off](void* dst, size_t off, size_t n) {
                               opt.read_state(moment == 1, state_off + static_cast<int64_t>(off / 4),
                                              static_cast<int64_t>(n / 4), static_cast<float*>(dst));
                             }});
        for (const char* kind : kKinds)
          my_chunks.push_back({{"name", std::string(kind) + "/" + e.name},
                               {"key", std::string(kind) + "/" + suffix},
                               {"offsets", bx.offsets},
                               {"lengths", bx.lengths}});
      }
    }
    if (opts.async_save) {  // the staging copy: one copy of this rank's slices, then no live buffer is read
      size_t total = 0;
      for (const auto& t : sources) total += t.nbytes() / 4;
      if (async_staging_floats_ < total) {  // grow-only, kept for the next save (megatron_model.h)
        async_staging_.reset();
        async_staging_.reset(new float[total]);
        async_staging_floats_ = total;
      }
      ps.staging = async_staging_.get();
      size_t at = 0;
      for (auto& t : sources) {
        t.fill(ps.staging + at, 0, t.nbytes());
        t.data = ps.staging + at;
        t.fill = {};
        at += t.nbytes() / 4;
      }
    }
  } catch (const std::exception& e) {
    local_error = ps.not_written + e.what();
  }
  {
    int64_t failed = local_error.empty() ? 0 : 1;
    if (nranks > 1) world.all_reduce(&failed, 1, DType::I64, dist::ReduceOp::Sum);
    if (failed) cleanup();
    dist::throw_agreed_error(world, failed, local_error);
  }

  // 3. The chunk lists go to rank 0 (small: a few hundred bytes per tensor and rank).
  std::vector<json> all_chunks;
  {
    const std::string mine = my_chunks.dump();
    if (rank == 0) {
      all_chunks.push_back(my_chunks);
      for (int src = 1; src < nranks; ++src) {
        int64_t len = 0;
        world.recv(&len, 1, DType::I64, src, 7101);
        std::vector<int64_t> buf(static_cast<size_t>((len + 7) / 8));
        world.recv(buf.data(), static_cast<int64_t>(buf.size()), DType::I64, src, 7102);
        all_chunks.push_back(json::parse(std::string(reinterpret_cast<const char*>(buf.data()), static_cast<size_t>(len))));
      }
    } else {
      int64_t len = static_cast<int64_t>(mine.size());
      std::vector<int64_t> buf(static_cast<size_t>((len + 7) / 8), 0);
      std::memcpy(buf.data(), mine.data(), mine.size());
      world.send(&len, 1, DType::I64, 0, 7101);
      world.send(buf.data(), static_cast<int64_t>(buf.size()), DType::I64, 0, 7102);
    }
  }

  // 4. Rank 0: the index (every global tensor in table order, each kind), checked to cover every
  //    element exactly once, and the state texts of this step (written at the commit).
  run_on_rank0_agreed(
      world,
      [&] {
        ShardedIndex& ix = ps.index;
        ix.world_size = nranks;
        std::map<std::string, size_t> at;
        for (const char* kind : kKinds)
          for (size_t id = 0; id < table.size(); ++id) {
            const parallel::TensorEntry& e = table[id];
            if (!e.saved || e.adapter != adapters) continue;
            const std::string n = std::string(kind) + "/" + e.name;
            if (at.count(n)) continue;  // an entry listed on several stages (none today) is one tensor
            at[n] = ix.tensors.size();
            ix.tensors.push_back({n, DType::F32, e.full, {}});
          }
        for (int src = 0; src < nranks; ++src)
          for (const auto& c : all_chunks[static_cast<size_t>(src)]) {
            const std::string n = c["name"].get<std::string>();
            check(at.count(n) > 0, "save: rank " + std::to_string(src) + " wrote a slice of unknown tensor " + n);
            ix.tensors[at[n]].chunks.push_back({sharded_file_name(src, nranks), c["key"].get<std::string>(),
                                                c["offsets"].get<std::vector<int64_t>>(),
                                                c["lengths"].get<std::vector<int64_t>>()});
          }
        ix.validate("save: the index of " + ps.final_dir.string());
        const json files = {{"sharded_index", std::string(kShardedIndexName)}};
        ps.texts = state_json_texts(opts, "sharded", files.dump());
      },
      [&](const std::string& what) {
        cleanup();
        return ps.not_written + what;
      },
      "save: writing " + ps.final_dir.string() + " failed on rank 0");

  // 5. The shard file: now, or in the background (committed by finish_pending_save).
  pending_save_ = std::move(pending);
  if (opts.async_save) {
    PendingSave* p = pending_save_.get();
    const std::string prio = std::getenv("TWINKLE_ASYNC_WRITER_PRIORITY") ? std::getenv("TWINKLE_ASYNC_WRITER_PRIORITY") : "";
    p->th = std::thread([p, prio] {
      if (prio == "idle") {
        sched_param sp{};
        (void)sched_setscheduler(0, SCHED_IDLE, &sp);  // this thread only (sched(7))
      } else if (prio == "nice") {
        (void)setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);  // this thread only (setpriority(2), BUGS)
      }
      p->write();
    });
    return;
  }
  pending_save_->write();
  finish_pending_save(true);
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
  // The sharded form (save_format "sharded"): every rank reads only the chunks its slices
  // intersect (io/sharded_checkpoint.h), whatever layout wrote them; the gathered form: full tensors.
  const bool sharded = st.value("save_format", std::string()) == "sharded";
  dist::run_agreed(world, [&] {
    auto load_into = [&](const char* kind, const fs::path& file, const char* what, float* flat) {
      if (sharded)
        model_->load_flat(ShardedCheckpointReader::open(it.string(), std::string(kind) + "/"), adapters, flat);
      else
        model_->load_flat(open_state_file(file, what), adapters, flat);
    };
    if (store.device() == Device::CPU) {
      load_into("master", it / kMaster, "fp32 trainable weights", store.flat_params().f32());
    } else {  // load_flat fills host memory: stage the store's flat layout, then upload it
      std::vector<float> staged(static_cast<size_t>(store.numel()), 0.0f);
      load_into("master", it / kMaster, "fp32 trainable weights", staged.data());
      upload_bytes(store.device(), store.flat_params().f32(), staged.data(), staged.size() * 4);
    }
    if (resume_only_model) return;
    m.assign(static_cast<size_t>(store.numel()), 0.0f);
    v.assign(static_cast<size_t>(store.numel()), 0.0f);
    if (sharded) {  // only the moments this rank's ZeRO-1 ranges keep
      const auto owned = opt.owned_ranges();
      load_owned_state(ShardedCheckpointReader::open(it.string(), "exp_avg/"), model_->table(), adapters, owned, m.data());
      load_owned_state(ShardedCheckpointReader::open(it.string(), "exp_avg_sq/"), model_->table(), adapters, owned,
                       v.data());
      return;
    }
    load_into("exp_avg", it / kExpAvg, "AdamW exp_avg", m.data());
    load_into("exp_avg_sq", it / kExpAvgSq, "AdamW exp_avg_sq", v.data());
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
