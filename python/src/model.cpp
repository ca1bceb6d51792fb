// python/src/model.cpp — MegatronModel (twinkle/train/megatron_model.h). Option sets arrive
// as keyword dicts from python/twinkle/model.py and are checked by the C++ validate() of
// their set (ValueError); heavy calls release the GIL (HeavyCall).
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "data_rows.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/model/kernelize.h"
#include "twinkle/train/megatron_model.h"

namespace twinkle_py {

namespace {

using twinkle::MegatronModel;

// The rows of one forward_backward / forward_only call. A batch this rank cannot convert (a missing
// key, labels and input_ids of different lengths, a non-integer id) raises its ValueError / TypeError
// here in a single process; in a job of several ranks the other ranks would already be on their way
// into the step's collectives, so the error text goes to MegatronModel's agreed refusal instead and
// every rank raises it (catching it leaves no rank waiting): this rank as the ValueError / TypeError
// it had (`type_error` tells which; rethrow_refusal), the others as the refusal's RuntimeError.
std::vector<twinkle::EncodedRow> rows_or_agreed_error(const py::object& inputs, std::string& error, bool& type_error) {
  try {
    return rows_from_py(inputs);
  } catch (const py::type_error& e) {
    if (twinkle::world_size() <= 1) throw;
    error = e.what();
    type_error = true;
  } catch (const py::error_already_set& e) {
    if (twinkle::world_size() <= 1) throw;
    error = e.what();
    type_error = e.matches(PyExc_TypeError);
  } catch (const std::exception& e) {
    if (twinkle::world_size() <= 1) throw;
    error = e.what();
  }
  return {};
}

// Called in the catch block of a forward_backward / forward_only refusal: re-raises it as the
// conversion error's own type on the rank whose batch did not convert, unchanged elsewhere.
[[noreturn]] void rethrow_refusal(const twinkle::Error& e, const std::string& conversion_error, bool type_error) {
  if (conversion_error.empty()) throw;
  if (type_error) throw py::type_error(e.what());
  throw py::value_error(e.what());
}

[[noreturn]] void unknown_kw(const std::string& call, const std::string& key, const std::string& known) {
  throw py::type_error(call + "() got an unexpected keyword argument '" + key + "' (known: " + known + ")");
}

twinkle::MegatronModelOptions model_options(const py::dict& kw) {
  twinkle::MegatronModelOptions o;
  for (auto item : kw) {
    const std::string k = py::str(item.first);
    const py::handle v = item.second;
    if (k == "micro_batch_size") o.micro_batch_size = v.is_none() ? 0 : v.cast<int64_t>();
    else if (k == "load_weights") o.load_weights = v.cast<bool>();
    else if (k == "seed") o.seed = v.cast<uint64_t>();
    else if (k == "layers_per_stage") o.layers_per_stage = v.is_none() ? std::vector<int64_t>{} : v.cast<std::vector<int64_t>>();
    else if (k == "pipeline_split") o.pipeline_split = v.cast<std::string>();
    else if (k == "recompute_granularity") o.recompute_granularity = v.cast<std::string>();
    else if (k == "packing") o.packing = v.cast<bool>();
    else if (k == "lm_head_chunk_tokens") o.lm_head_chunk_tokens = v.cast<int64_t>();
    else if (k == "on_nonfinite") o.on_nonfinite = v.cast<std::string>();
    else if (k == "kernels") o.kernels = v.cast<std::string>();
    else if (k == "cp_comm_type") o.cp_comm_type = v.cast<std::string>();
    else if (k == "moe_aux_loss_type") o.moe_aux_loss_type = v.cast<std::string>();
    else if (k == "moe_aux_loss_coeff") o.moe_aux_loss_coeff = v.is_none() ? std::nullopt : std::optional<double>(v.cast<double>());
    else if (k == "moe_z_loss_coeff") o.moe_z_loss_coeff = v.cast<double>();
    else if (k == "overlap_grad_reduce") o.overlap_grad_reduce = v.cast<bool>();
    else if (k == "overlap_param_gather") o.overlap_param_gather = v.cast<bool>();
    else if (k == "bucket_size") o.bucket_size = v.is_none() ? 0 : v.cast<int64_t>();
    else if (k == "mixed_precision") o.mixed_precision = v.cast<std::string>();  // from Twinkle's name
    else if (k == "tensorboard_dir") o.tensorboard_dir = v.is_none() ? std::string() : v.cast<std::string>();
    else unknown_kw("MegatronModel", k, "micro_batch_size, load_weights, seed, layers_per_stage, pipeline_split, "
                    "recompute_granularity, packing, lm_head_chunk_tokens, on_nonfinite, kernels, cp_comm_type, "
                    "moe_aux_loss_type, moe_aux_loss_coeff, moe_z_loss_coeff, overlap_grad_reduce, "
                    "overlap_param_gather, bucket_size, tensorboard_dir");
  }
  return o;
}

twinkle::OptimizerConfig optimizer_config(const py::dict& kw) {
  twinkle::OptimizerConfig c;
  for (auto item : kw) {
    const std::string k = py::str(item.first);
    const py::handle v = item.second;
    if (k == "lr") c.lr = v.cast<double>();
    else if (k == "weight_decay") c.weight_decay = v.cast<double>();
    else if (k == "adam_beta1") c.adam_beta1 = v.cast<double>();
    else if (k == "adam_beta2") c.adam_beta2 = v.cast<double>();
    else if (k == "adam_eps") c.adam_eps = v.cast<double>();
    else if (k == "clip_grad") c.clip_grad = v.cast<double>();
    else if (k == "use_distributed_optimizer") c.use_distributed_optimizer = v.cast<bool>();
    else if (k == "bucket_bytes") c.bucket_bytes = v.cast<int64_t>();
    else unknown_kw("set_optimizer", k, "lr, weight_decay, adam_beta1, adam_beta2, adam_eps, clip_grad, "
                    "use_distributed_optimizer, bucket_bytes");
  }
  return c;
}

twinkle::LRSchedulerConfig scheduler_config(const py::dict& kw) {
  twinkle::LRSchedulerConfig c;
  for (auto item : kw) {
    const std::string k = py::str(item.first);
    const py::handle v = item.second;
    if (k == "lr_warmup_steps") c.lr_warmup_steps = v.cast<int64_t>();
    else if (k == "lr_decay_steps") c.lr_decay_steps = v.cast<int64_t>();
    else if (k == "max_lr") c.max_lr = v.cast<double>();
    else if (k == "min_lr") c.min_lr = v.cast<double>();
    else if (k == "init_lr") c.init_lr = v.cast<double>();
    else if (k == "lr_decay_style") c.lr_decay_style = v.cast<std::string>();
    else unknown_kw("set_lr_scheduler", k, "lr_warmup_steps, lr_decay_steps, max_lr, min_lr, init_lr, lr_decay_style");
  }
  return c;
}

// LoRA options from python/twinkle/model (PEFT's LoraConfig already mapped to
// twinkle::LoraConfig's fields there).
twinkle::LoraConfig lora_config(const py::dict& kw) {
  twinkle::LoraConfig c;
  for (auto item : kw) {
    const std::string k = py::str(item.first);
    const py::handle v = item.second;
    if (k == "r") c.r = v.cast<int64_t>();
    else if (k == "lora_alpha") c.lora_alpha = v.cast<double>();
    else if (k == "target_modules") c.target_modules = v.cast<std::string>();
    else if (k == "lora_dropout") c.lora_dropout = v.cast<double>();
    else if (k == "use_rslora") c.use_rslora = v.cast<bool>();
    else if (k == "init_lora_weights") c.init_lora_weights = v.cast<std::string>();
    else unknown_kw("add_adapter_to_model", k, "r, lora_alpha, target_modules, lora_dropout, use_rslora, init_lora_weights");
  }
  return c;
}

py::dict metrics_dict(const MegatronModel::StepMetrics& m) {
  py::dict d;
  d["step"] = m.step;
  d["loss"] = m.loss;
  d["grad_norm"] = m.grad_norm;
  d["lr"] = m.lr;
  d["tokens"] = m.tokens;
  d["label_tokens"] = m.label_tokens;
  d["tokens_per_s"] = m.tokens_per_s;
  d["mfu"] = m.mfu;
  d["step_time_s"] = m.step_time_s;
  d["has_loss"] = m.has_loss;
  d["skipped"] = m.skipped;
  d["skipped_steps"] = m.skipped_steps;
  d["peak_memory_bytes"] = m.peak_memory_bytes;
  if (m.moe) {  // Qwen3-MoE: the router losses and the expert load (engine.h StepResult)
    d["lm_loss"] = m.lm_loss;
    d["aux_loss"] = m.aux_loss;
    d["z_loss"] = m.z_loss;
    d["expert_load_max"] = m.expert_load_max;
    d["expert_load_min"] = m.expert_load_min;
  }
  return d;
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<MegatronModel>(m, "MegatronModel")
      .def(py::init([](const std::string& model_id, py::dict kw) {
             twinkle::MegatronModelOptions o;
             arg_check([&] {
               o = model_options(kw);
               twinkle::validate(o);
             });
             std::unique_ptr<MegatronModel> p;
             {
               HeavyCall h("MegatronModel()");
               p = std::make_unique<MegatronModel>(model_id, o);
             }
             check_signals();
             return p;
           }),
           py::arg("model_id"), py::arg("options"))
      .def("add_adapter_to_model",
           [](MegatronModel& self, const std::string& name, py::dict kw) {
             // every failure here is about the arguments (config, targets, name, a second adapter)
             arg_check([&] {
               const twinkle::LoraConfig c = lora_config(kw);
               twinkle::validate(c);
               self.add_adapter_to_model(name, c);
             });
           })
      .def("load_adapter",
           [](MegatronModel& self, const std::string& dir, const std::string& name) {
             {
               HeavyCall h("load_adapter");
               self.load_adapter(dir, name);
             }
             check_signals();
           })
      .def("linear_modules", [](MegatronModel& self) { return self.model().linear_modules(); })
      .def("other_modules",  // (name, what) of every module twinkle gives no adapter (Qwen3Model::other_modules)
           [](MegatronModel& self) {
             std::vector<std::pair<std::string, std::string>> out;
             for (const auto& m : self.model().other_modules()) out.emplace_back(m.name, m.what);
             return out;
           })
      .def_property_readonly("has_adapter", &MegatronModel::has_adapter)
      .def_property_readonly("adapter_name", &MegatronModel::adapter_name)
      .def("set_optimizer",
           [](MegatronModel& self, const std::string& name, py::dict kw) {
             twinkle::OptimizerConfig c;
             arg_check([&] {
               c = optimizer_config(kw);
               twinkle::validate(c);
             });
             try {
               self.set_optimizer(name, c);
             } catch (const twinkle::Error& e) {
               if (std::string(e.what()).rfind("set_optimizer: optimizer '", 0) == 0) throw py::value_error(e.what());
               throw;
             }
           })
      .def("set_lr_scheduler",
           [](MegatronModel& self, const std::string& name, py::dict kw) {
             twinkle::LRSchedulerConfig c;
             // only argument checks can fail here (name, validate with max_lr = the optimizer's lr)
             arg_check([&] {
               c = scheduler_config(kw);
               self.set_lr_scheduler(name, c);
             });
           })
      .def("forward_backward",
           [](MegatronModel& self, py::object inputs) {
             std::string bad;
             bool type_error = false;
             auto rows = rows_or_agreed_error(inputs, bad, type_error);
             double loss = 0.0;
             try {
               HeavyCall h("forward_backward");
               loss = self.forward_backward(rows, bad);
             } catch (const twinkle::Error& e) {
               rethrow_refusal(e, bad, type_error);
             }
             check_signals();
             return loss;
           })
      .def("forward_only",
           [](MegatronModel& self, py::object inputs) {
             std::string bad;
             bool type_error = false;
             auto rows = rows_or_agreed_error(inputs, bad, type_error);
             double loss = 0.0;
             try {
               HeavyCall h("forward_only");
               loss = self.forward_only(rows, bad);
             } catch (const twinkle::Error& e) {
               rethrow_refusal(e, bad, type_error);
             }
             check_signals();
             return loss;
           })
      .def("clip_grad_and_step",
           [](MegatronModel& self, std::optional<double> max_grad_norm) {
             if (max_grad_norm && !std::isfinite(*max_grad_norm))
               throw py::value_error("clip_grad_and_step: max_grad_norm must be finite (<= 0 disables clipping)");
             twinkle::StepStats s;
             {
               HeavyCall h("clip_grad_and_step");
               s = self.clip_grad_and_step(max_grad_norm);
             }
             check_signals();
             py::dict d;
             d["grad_norm"] = s.grad_norm;
             d["clip_coef"] = s.clip_coef;
             d["lr"] = s.lr;
             d["step"] = s.step;
             d["skipped"] = s.skipped;
             return d;
           })
      .def("calculate_metric", [](MegatronModel& self, bool is_training) { return self.calculate_metric(is_training); })
      .def("last_metrics", [](const MegatronModel& self) { return metrics_dict(self.last_metrics()); })
      .def("get_train_configs", &MegatronModel::get_train_configs)
      .def("save",
           [](MegatronModel& self, const std::string& name, const std::string& output_dir, bool merge_lora,
              bool save_optimizer, int64_t consumed_train_samples, const std::string& save_format, bool async_save) {
             std::string dir;
             {
               HeavyCall h("save");
               twinkle::SaveOptions o;
               o.output_dir = output_dir;
               o.merge_lora = merge_lora;
               o.save_optimizer = save_optimizer;
               o.consumed_train_samples = consumed_train_samples;
               o.save_format = save_format;
               o.async_save = async_save;
               dir = self.save(name, o);
             }
             check_signals();
             return dir;
           },
           py::arg("name"), py::arg("output_dir"), py::arg("merge_lora") = false, py::arg("save_optimizer") = false,
           py::arg("consumed_train_samples") = -1, py::arg("save_format") = "sharded", py::arg("async_save") = false)
      // SaveOptions::async_save's commit: waits for every rank's writer thread (collective)
      .def("wait_for_save",
           [](MegatronModel& self) {
             {
               HeavyCall h("wait_for_save");
               self.wait_for_save();
             }
             check_signals();
           })
      .def_property_readonly("save_pending", &MegatronModel::save_pending)
      .def("resume_from_checkpoint",
           [](MegatronModel& self, const std::string& dir, bool resume_only_model) {
             twinkle::ResumeState r;
             {
               HeavyCall h("resume_from_checkpoint");
               r = self.resume_from_checkpoint(dir, resume_only_model);
             }
             check_signals();
             py::dict d;
             d["cur_step"] = r.cur_step;
             d["consumed_train_samples"] = r.consumed_train_samples;
             d["gradient_accumulation_steps"] = r.gradient_accumulation_steps;
             return d;
           })
      .def("load",
           [](MegatronModel& self, const std::string& dir) {
             {
               HeavyCall h("load");
               self.load(dir);
             }
             check_signals();
           })
      .def("kernelize",
           [](MegatronModel& self, const twinkle::kernels::KernelMapping& mapping) {
             std::vector<std::string> changed;
             arg_check([&] { changed = twinkle::kernelize_model(self.model(), mapping); });
             return changed;
           })
      .def_property_readonly("tensorboard_path", &MegatronModel::tensorboard_path)
      .def_property_readonly("model_dir", &MegatronModel::model_dir)
      .def_property_readonly("pad_token_id", &MegatronModel::pad_token_id)
      .def_property_readonly("last_eval_label_tokens", &MegatronModel::last_eval_label_tokens)
      .def_property_readonly("last_eval_lm_loss_sum", &MegatronModel::last_eval_lm_loss_sum);
}

}  // namespace twinkle_py
