// A sharded training checkpoint written out as a Hugging Face / PEFT directory, one tensor at a
// time (twinkle/train/checkpoint_export.h).
#include "twinkle/train/checkpoint_export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "twinkle/core/error.h"
#include "twinkle/io/model_config.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/io/sharded_checkpoint.h"
#include "twinkle/model/lora_files.h"
#include "twinkle/train/checkpoint_dir.h"

namespace twinkle {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  check(in.good(), "export: " + p.string() + " is missing");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

json read_json_file(const fs::path& p) {
  try {
    return json::parse(read_all(p));
  } catch (const json::exception& e) {
    throw Error("export: " + p.string() + " is not valid JSON: " + e.what());
  }
}

}  // namespace

ExportResult export_sharded_checkpoint(const std::string& checkpoint_dir, const std::string& out_dir,
                                       const ExportOptions& opts) {
  check(opts.max_shard_bytes > 0, "export: --max-shard-bytes must be > 0, got " + std::to_string(opts.max_shard_bytes));
  if (!opts.dtype.empty())
    check(opts.dtype == "float32" || opts.dtype == "bfloat16" || opts.dtype == "float16",
          "export: option dtype (--save-dtype) must be \"float32\", \"bfloat16\" or \"float16\" (or empty: the "
          "checkpoint's torch_dtype), got \"" + opts.dtype + "\"");
  const fs::path ck(resolve_resume_dir(checkpoint_dir));
  const json ts = read_json_file(ck / "trainer_state.json");
  check(ts.contains("cur_step") && ts["cur_step"].is_number_integer(),
        "export: " + (ck / "trainer_state.json").string() + " has no integer field 'cur_step'");
  const fs::path it = ck / iter_dir_name(ts["cur_step"].get<int64_t>());
  const json st = read_json_file(it / "state.json");
  check(st.value("save_format", std::string()) == "sharded",
        "export: " + ck.string() + " is a gathered checkpoint (" + (it / "state.json").string() +
            " names no sharded save format): its Hugging Face weights are already in " + ck.string());
  const bool adapter = st.contains("adapter") && !st["adapter"].is_null();
  const ShardedCheckpointReader master = ShardedCheckpointReader::open(it.string(), "master/");

  const fs::path out(out_dir);
  fs::create_directories(out);
  // The files save() writes beside the weights, in its order: tokenizer files, config.json.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                        "special_tokens_map.json", "generation_config.json"}) {
    if (!fs::exists(ck / f)) continue;
    io_detail::write_file_atomic((out / f).string(), read_all(ck / f));
  }
  DType dtype = DType::F32;
  if (!adapter && !opts.dtype.empty()) {
    ModelConfig cfg = load_model_config((ck / "config.json").string());
    cfg.torch_dtype = dtype_from_torch_name(opts.dtype);
    save_model_config(cfg, (out / "config.json").string());
    dtype = cfg.torch_dtype;
  } else {
    io_detail::write_file_atomic((out / "config.json").string(), read_all(ck / "config.json"));
    if (!adapter) dtype = load_model_config((ck / "config.json").string()).torch_dtype;
  }
  if (adapter) io_detail::write_file_atomic((out / "adapter_config.json").string(), read_all(ck / "adapter_config.json"));

  // Streamed: each fill of the writer's buffer reads only the rows of the tensor that hold its bytes
  // from the slices and converts them, so the export holds one buffer (16 MiB) plus a row or two.
  ExportResult res;
  res.out_dir = out.string();
  res.adapter = adapter;
  std::vector<TensorSource> sources;
  const size_t es = dtype_size(dtype);
  for (const auto& n : master.names()) {
    const TensorInfo& info = master.info(n);
    res.largest_bytes = std::max<int64_t>(res.largest_bytes, info.numel() * 4);
    sources.push_back({adapter ? peft_key(n) : n, dtype, info.shape, nullptr,
                       [n, dtype, es, &master, shape = info.shape](void* dst, size_t off, size_t len) {
                         // rows [r0, r1) of the tensor viewed as [rows, cols] cover elements [e0, e1)
                         const int64_t cols = shape.size() >= 2 ? [&] {
                           int64_t c = 1;
                           for (size_t d = 1; d < shape.size(); ++d) c *= shape[d];
                           return c;
                         }() : 1;
                         const int64_t e0 = static_cast<int64_t>(off / es), e1 = static_cast<int64_t>((off + len) / es);
                         Tensor part;
                         int64_t first = 0;  // element index of part's first element
                         if (shape.empty()) {
                           part = master.load_f32(n);
                         } else {
                           const int64_t r0 = e0 / cols, r1 = (e1 + cols - 1) / cols;
                           std::vector<int64_t> o(shape.size(), 0), l(shape.begin(), shape.end());
                           o[0] = r0;
                           l[0] = r1 - r0;
                           part = Tensor::empty(Shape(l.begin(), l.end()), DType::F32);
                           master.read_f32(n, o, l, part.f32());
                           first = r0 * cols;
                         }
                         Tensor want = Tensor::empty({e1 - e0}, DType::F32);
                         std::memcpy(want.f32(), part.f32() + (e0 - first), static_cast<size_t>(e1 - e0) * 4);
                         part = Tensor();
                         if (dtype != DType::F32) want = want.to_dtype(dtype);
                         std::memcpy(dst, want.raw(), len);
                       }});
  }
  res.tensors = static_cast<int64_t>(sources.size());
  if (adapter)
    save_safetensors_streamed((out / "adapter_model.safetensors").string(), sources);
  else
    save_checkpoint_dir_streamed(out.string(), sources, opts.max_shard_bytes);
  return res;
}

}  // namespace twinkle
