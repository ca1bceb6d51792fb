#!/usr/bin/env python3
"""Checkpoints and LoRA adapters move freely between twinkle and the real libraries.

The oracle is transformers (AutoModelForCausalLM.from_pretrained, eager attention; Qwen3-MoE with
experts_implementation="eager") and PEFT (PeftModel.from_pretrained, get_peft_model,
merge_and_unload) running in float64; nothing of twinkle's is used as a reference. A loss is the
per-token mean cross entropy of a batch (labels shifted as transformers shifts them, -100
ignored), computed here in float64 from the float64 logits of the library's model (transformers'
own ForCausalLMLoss upcasts only to float32; it is required to agree with it within 1e-6 as a
check of this computation). Every case requires 1e-5 relative agreement (TOL) and shows that
it can fail: each control below must move the compared number by more than 20 * TOL (or make
the loading check fire) on the very data of the case.

Cases (--case NAME):
  twinkle_ckpt_in_transformers
      twinkle trains a tiny dense Qwen3 (a: tied embeddings, GQA, head_dim != hidden/heads;
      b: untied + q/k/v/o biases; both with RMSNorm weights 1 + 0.1 N(0,1), biases 0.02 N(0,1))
      and a tiny Qwen3-MoE (3 layers, layer 1 dense, 6 experts top-2) for 2 AdamW steps and saves
      the full model; from_pretrained(out, output_loading_info=True) must report no missing /
      unexpected / mismatched keys and no error, and transformers' float64 loss of the saved
      weights on a held-out batch must equal `twinkle eval --model out` on it and the step-1 loss
      of `twinkle train --model out --lr 0 --max-steps 1` on it (two micro-batches).
      Catches: a saved name transformers does not know (or a tensor left out: a missing key is
      silently random-initialised by from_pretrained), a transposed / mis-shaped tensor, a saved
      config transformers reads differently (tie rule, head_dim, biases, mlp_only_layers), a
      tensor saved with other values than twinkle computes with. Controls: the initial
      checkpoint's loss differs (training changed the weights); a copy with model.norm.weight
      scaled by 1.05 fails the loss check; a copy with one tensor renamed fails the loading check.
  transformers_sharded_bf16_in_twinkle
      transformers builds tiny Qwen3 a and b from their configs (from_config, random weights
      N(0, 0.08), norms 1 + 0.1 N, biases 0.05 N), casts to bfloat16 and save_pretrained's them
      with a small max_shard_size (>= 2 shards + index, config.json with transformers 5's
      "dtype": "bfloat16" and "rope_parameters"); `twinkle train --lr 0 --max-steps 1` on that
      directory (fp32 training: the bf16 weights upcast exactly) logs a step-1 loss that must
      equal transformers' float64 loss of the bf16 weights on the same batch (two micro-batches in
      twinkle, the global per-token mean). Catches: a shard or the index not read, bf16 decoded
      wrongly (e.g. as f16, or rounded again), transformers 5's config keys (dtype instead of
      torch_dtype, rope_parameters instead of rope_theta, layer_types) misread. Controls: the tensors of any single shard replaced by another random draw of their
      kind move the reference loss by > 20 * TOL (a loader skipping or misreading any shard fails).
  transformers_f64_in_twinkle
      a float64 model and a float64 PEFT adapter, as PyTorch writes them (safetensors dtype F64,
      config.json "dtype": "float64"): transformers builds tiny Qwen3 b (from_config, float64,
      random weights as above) and save_pretrained's it, PEFT's get_peft_model(...,
      init_lora_weights=False) on that float64 model save_pretrained's an all-linear adapter;
      `twinkle train --lr 0` of the model and `twinkle eval --adapter` of model + adapter must
      equal transformers' / PEFT's float64 losses (twinkle rounds F64 to fp32 as Tensor.float()
      does). Catches: F64 refused (it was: "unknown dtype 'F64'") or decoded as another width.
      Controls: the base model without the adapter; one adapter tensor zeroed.
  twinkle_adapter_in_peft
      twinkle trains LoRA adapters for 2 steps: (1) r 4, alpha 16, all-linear, lora-init gaussian
      (A ~ N(0, 1/r), B = 0), lr 5e-2, on model b; (2) r 4, alpha 16, rslora, targets
      q_proj,v_proj,down_proj, default init (B = 0), lr 2e-2, on model a (learning rates at which
      the adapter moves the held-out loss well past the controls' bound).
      PeftModel.from_pretrained(base, adapter) must warn of no missing adapter keys, load every
      tensor of the file bit for bit (PEFT's state dict == the file: no key ignored), wrap exactly
      the modules the file holds, read r / lora_alpha / use_rslora / target_modules as twinkle
      wrote them (and as asked on the command line; PEFT replaces "all-linear" by the module
      names it resolves), scale by alpha/r resp. alpha/sqrt(r); the PEFT model's float64
      held-out loss must equal `twinkle eval --model base --adapter A`. Catches: PEFT key names
      or config fields written wrongly, a target set PEFT resolves differently from twinkle, a
      wrong scaling convention. Controls: the base model's loss differs; the adapter with
      use_rslora flipped in adapter_config.json fails the loss check; one lora_A key renamed
      makes PEFT warn of a missing key (the loading check fires).
  peft_adapter_in_twinkle
      PEFT get_peft_model(base b, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
      init_lora_weights=False)) (A and B random) save_pretrained's an adapter; `twinkle train
      --adapter DIR --lr 0 --max-steps 1` (step-1 loss) and `twinkle eval --adapter DIR` must equal
      PEFT's float64 loss of base + adapter. Catches: PEFT's adapter_config.json (its resolved
      target list, its many extra fields) or its key names misread, a module of PEFT's
      all-linear not adapted by twinkle, a wrong scaling. Controls: base loss differs; a copy with
      one module's lora_B (layer 1 down_proj) zeroed, as if twinkle left that module out, fails
      the loss check.
  export_merge_vs_merge_and_unload
      a twinkle-trained adapter (r 4, alpha 16, rslora, all-linear, lora-init false, model b, on a
      float32 and on a bfloat16 base checkpoint) merged by `twinkle export --merge
      --max-shard-bytes 60000` (a sharded directory) vs PEFT's PeftModel.from_pretrained(base
      in float64, adapter).merge_and_unload() (saved with save_pretrained, so the names are
      transformers' checkpoint names): the same tensor names, every tensor's dtype = the base
      checkpoint's, config.json's dtype = the base's, every adapted weight within 1e-6 of the
      tensor's max (f32 base) / equal to the float64 merge rounded to bf16 (>= 99.9 % of the
      elements, none more than one bf16 ulp off; bf16 base), every other tensor bit-identical to
      the base's; the merged directory loads in from_pretrained with clean loading info, its
      float64 held-out loss equals PEFT's unmerged loss (f32 base) and `twinkle eval` of it.
      Catches: a merge with the wrong scaling, B A transposed or applied to the wrong module, a
      merged weight left out, a tensor re-rounded or re-typed, an index / shard transformers
      cannot read. Control: PEFT's merge of the same adapter with use_rslora flipped fails the
      tensor comparison on every adapted weight.

Run with the project environment's python (.venv, scripts/setup):
  .venv/bin/python tests/reference/check_hf_interop.py --build build --case NAME
"""
import argparse
import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import random_rows, read_metrics, rel, write_rows  # noqa: E402
import hf_oracle  # noqa: E402
import make_tiny_model  # noqa: E402
import safetensors_py as stpy  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

run = functools.partial(harness.run, env=harness.one_thread_env())  # every child on one thread
PY = sys.executable
TOL = 1e-5            # relative, every loss comparison
CONTROL = 20 * TOL    # a control must move the compared loss by more than this
MERGE_TOL = 1e-6      # merged tensors: max abs error / max |reference|


class Case:
    """A case's temporary directory, the twinkle binary and the failures found."""

    def __init__(self, build, tmp):
        self.twinkle = os.path.join(build, "bin", "twinkle")
        self.tmp = tmp
        self.failures = []

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def fail(self, msg):
        print("  MISMATCH: " + msg, flush=True)
        self.failures.append(msg)

    # ---- twinkle -----------------------------------------------------------------------------
    def tw_eval(self, model, rows, adapter=None):
        """`twinkle eval`: the per-token mean loss of the rows (one forward over all of them)."""
        jl = self.rows_file(rows)
        cmd = [self.twinkle, "eval", "--model", model, "--dataset", jl, "--batch-size", str(len(rows[0]))]
        if adapter:
            cmd += ["--adapter", adapter]
        return json.loads(run(cmd).strip().splitlines()[-1])["loss"]

    def tw_train(self, model, rows, out, steps, lr, extra=()):
        """`twinkle train` on all rows per step, two micro-batches; returns metrics.jsonl's lines."""
        jl = self.rows_file(rows)
        metrics = out.rstrip("/") + ".metrics.jsonl"
        n = len(rows[0])
        run([self.twinkle, "train", "--model", model, "--dataset", jl, "--batch-size", str(n), "--micro-batch-size",
             str((n + 1) // 2), "--max-steps", str(steps), "--lr", str(lr), "--clip-grad", "1.0", "--output-dir", out,
             "--metrics-file", metrics] + list(extra))
        return read_metrics(metrics)

    def tw_loss_lr0(self, model, rows, adapter=None):
        """twinkle's loss of a model (+ adapter) as its trainer reports it: one step at lr 0, the
        step-1 loss of metrics.jsonl (computed before the update)."""
        out = self.path(f"lr0_{len(os.listdir(self.tmp))}")
        m = self.tw_train(model, rows, out, 1, 0.0, ["--no-save"] + (["--adapter", adapter] if adapter else []))
        if len(m) != 1 or m[0].get("step") != 1:
            raise SystemExit(f"twinkle train --max-steps 1 logged {m}")
        return m[0]["loss"]

    def rows_file(self, rows):
        jl = self.path(f"rows_{hashlib.sha1(json.dumps(rows).encode()).hexdigest()[:12]}.jsonl")
        if not os.path.exists(jl):
            write_rows(jl, *rows)
        return jl

    # ---- comparisons -------------------------------------------------------------------------
    def same_loss(self, what, got, want, got_name="twinkle", want_name="library-f64"):
        """got (twinkle) vs want (library, float64): TOL relative; returns True when it holds."""
        r = rel(got, want)
        print(f"  {what}: {got_name} {got:.10f} {want_name} {want:.10f} rel {r:.2e} (tol {TOL:g})", flush=True)
        if r > TOL:
            self.fail(f"{what}: {got_name} {got!r} vs {want_name} {want!r} (rel {r:.2e} > {TOL:g})")
            return False
        return True

    def control(self, what, moved, ref):
        """A control: `moved` (the library's number on a perturbed input) must differ from `ref` by
        more than CONTROL, else the comparison it stands for could not fail."""
        r = rel(moved, ref)
        print(f"  control {what}: {moved:.10f} vs {ref:.10f} rel {r:.2e} (must be > {CONTROL:g})", flush=True)
        if r <= CONTROL:
            self.fail(f"control {what}: rel {r:.2e} <= {CONTROL:g}: the check could not fail")


# ---- the libraries ---------------------------------------------------------------------------
def hf_load(model_dir, dtype=torch.float64):
    """transformers' model from a directory, with its loading info."""
    from transformers import AutoModelForCausalLM
    kw = {"experts_implementation": "eager"} if hf_oracle.moe_dir(model_dir) else {}
    m, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager",
                                                   output_loading_info=True, **kw)
    m.eval()
    return m, info


def loading_problems(info, what):
    """The non-empty fields of from_pretrained's loading info (missing keys are random-initialised
    silently, unexpected ones dropped)."""
    bad = []
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = info.get(k)
        if v:
            bad.append(f"{what}: from_pretrained {k}: {sorted(map(str, v))[:6]}")
    return bad


def lib_loss(model, rows):
    """float64 per-token mean cross entropy of the rows under a transformers / PEFT model (one
    right-padded micro-batch, hf_oracle.micro_batch), from its float64 logits; checked against the
    model's own (float32-head) loss within 1e-6."""
    ids, labels = rows
    mb = hf_oracle.micro_batch({"input_ids": ids, "labels": labels}, "rows")
    with torch.no_grad():
        out = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], labels=mb["labels"])
    logits = out.logits
    if logits.dtype != torch.float64:
        raise SystemExit(f"the library model computed {logits.dtype} logits, expected float64")
    lab = mb["labels"][:, 1:].reshape(-1)
    lg = logits[:, :-1].reshape(-1, logits.shape[-1])
    n = int((lab != -100).sum())
    loss = float(F.cross_entropy(lg, lab, ignore_index=-100, reduction="sum")) / n
    own = float(out.loss)
    if rel(own, loss) > 1e-6:
        raise SystemExit(f"float64 cross entropy {loss} vs the model's own loss {own}: the loss here is wrong")
    return loss


def peft_load(base_dir, adapter_dir):
    """PeftModel.from_pretrained on a float64 base; returns (model, [warnings about adapter keys])."""
    import peft
    base, info = hf_load(base_dir)
    if loading_problems(info, base_dir):
        raise SystemExit(f"base {base_dir}: {loading_problems(info, base_dir)}")
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        pm = peft.PeftModel.from_pretrained(base, adapter_dir)
    pm.eval()
    key_warnings = [str(w.message) for w in ws if "keys" in str(w.message).lower()]
    return pm, key_warnings


def lora_layers(pm):
    """{module name under the base model (model.layers.0.self_attn.q_proj): PEFT LoraLayer}."""
    from peft.tuners.lora import LoraLayer
    pre = "base_model.model."
    return {n[len(pre):]: m for n, m in pm.named_modules() if isinstance(m, LoraLayer) and n.startswith(pre)}


def file_modules(adapter_tensors):
    pre, suf = "base_model.model.", ".lora_A.weight"
    return {k[len(pre):-len(suf)] for k in adapter_tensors if k.endswith(suf)}


# ---- models ----------------------------------------------------------------------------------
def make_dense(tmp, variant, seed=0, dtype="float32"):
    """make_tiny_model's config + qwen3_ref.py init with non-trivial norms and biases, stored in
    `dtype` (config.json's torch_dtype set to match)."""
    run([PY, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", variant])
    d = os.path.join(tmp, "tiny_" + variant)
    run([PY, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", os.path.join(d, "config.json"), "--seed",
         str(seed), "--out", d, "--norm-std", "0.1", "--bias-std", "0.02", "--dtype",
         {"float32": "F32", "bfloat16": "BF16"}[dtype]])
    if dtype != "float32":
        p = os.path.join(d, "config.json")
        with open(p) as f:
            cfg = json.load(f)
        cfg["torch_dtype"] = dtype
        with open(p, "w") as f:
            json.dump(cfg, f, indent=2)
    return d


def make_moe(tmp, seed=0):
    import check_train_moe
    d = os.path.join(tmp, "tiny_moe")
    os.makedirs(d, exist_ok=True)
    cfg = check_train_moe.moe_config(True, [1], 3)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    run([PY, os.path.join(HERE, "qwen3_moe_ref.py"), "init", "--config", os.path.join(d, "config.json"), "--seed",
         str(seed), "--out", d])
    return d


def vocab(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)["vocab_size"]


def shard_of(model_dir):
    """{tensor name: file} of a checkpoint directory (sharded or single)."""
    idx = os.path.join(model_dir, stpy.INDEX_NAME)
    if os.path.exists(idx):
        with open(idx) as f:
            return json.load(f)["weight_map"]
    return {k: stpy.SINGLE_NAME for k in stpy.load(os.path.join(model_dir, stpy.SINGLE_NAME))}


def edit_checkpoint(src, dst, edit):
    """A copy of checkpoint src in dst with edit(name, tensor) -> (name', tensor') applied to every
    tensor (dtypes kept), the index rewritten when sharded."""
    shutil.copytree(src, dst)
    where = shard_of(dst)
    new_map = {}
    for fn in sorted(set(where.values())):
        p = os.path.join(dst, fn)
        out = {}
        for k, t in stpy.load(p).items():
            k2, t2 = edit(k, t)
            out[k2] = t2.to(t.dtype)
            new_map[k2] = fn
        stpy.save(p, out)
    idx = os.path.join(dst, stpy.INDEX_NAME)
    if os.path.exists(idx):
        with open(idx) as f:
            j = json.load(f)
        j["weight_map"] = new_map
        with open(idx, "w") as f:
            json.dump(j, f, indent=2)
    return dst


def edit_adapter(src, dst, edit=None, config=None):
    """A copy of a PEFT adapter directory with edit(name, tensor) applied to its tensors and
    config(dict) to its adapter_config.json."""
    shutil.copytree(src, dst)
    if edit:
        p = os.path.join(dst, "adapter_model.safetensors")
        t = stpy.load(p)
        stpy.save(p, dict(edit(k, v) for k, v in t.items()))
    if config:
        p = os.path.join(dst, "adapter_config.json")
        with open(p) as f:
            c = json.load(f)
        config(c)
        with open(p, "w") as f:
            json.dump(c, f, indent=2)
    return dst


# ---- case 1 ----------------------------------------------------------------------------------
def case_twinkle_ckpt_in_transformers(c):
    for kind in ("a", "b", "moe"):
        print(f"== model {kind}", flush=True)
        base = make_moe(c.path(kind)) if kind == "moe" else make_dense(c.path(kind), kind)
        V = vocab(base)
        train, held = random_rows(6, V, 11, (8, 20), 1), random_rows(4, V, 12, (8, 20), 1)
        out = c.path(kind, "trained")
        c.tw_train(base, train, out, 2, 1e-2)
        names = set(shard_of(out))
        print(f"  twinkle saved {len(names)} tensors in {sorted(set(shard_of(out).values()))}")
        m, info = hf_load(out)
        print(f"  from_pretrained: {type(m).__name__}, loading info {info}")
        for p in loading_problems(info, f"model {kind}"):
            c.fail(p)
        with open(os.path.join(base, "config.json")) as f:
            tie = json.load(f)["tie_word_embeddings"]
        shared = m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
        if shared != tie:
            c.fail(f"model {kind}: transformers ties lm_head to the embedding: {shared}, base config: {tie}")
        want = lib_loss(m, held)
        c.same_loss(f"model {kind} held-out loss of the saved checkpoint (twinkle eval)", c.tw_eval(out, held), want)
        c.same_loss(f"model {kind} held-out loss of the saved checkpoint (twinkle train, lr 0, step 1)",
                    c.tw_loss_lr0(out, held), want)
        # controls
        c.control(f"model {kind}: initial checkpoint's loss (training moved the weights)", lib_loss(hf_load(base)[0], held),
                  want)
        scaled = edit_checkpoint(out, c.path(kind, "scaled"),
                                 lambda k, t: (k, t.double() * 1.05 if k == "model.norm.weight" else t))
        c.control(f"model {kind}: model.norm.weight x 1.05", lib_loss(hf_load(scaled)[0], held), want)
        victim = next(k for k in sorted(names) if (".experts." in k if kind == "moe" else "q_norm" in k))
        renamed = edit_checkpoint(out, c.path(kind, "renamed"),
                                  lambda k, t: (k.replace(".weight", ".wieght") if k == victim else k, t))
        try:
            probs = loading_problems(hf_load(renamed)[1], "renamed")
        except RuntimeError as e:  # transformers raises on a mis-shaped (fused expert) tensor
            probs = [f"from_pretrained raised: {str(e)[:160]}"]
        print(f"  control model {kind}: {victim} renamed -> loading check says {probs}")
        if not probs:
            c.fail(f"control model {kind}: renaming {victim} left from_pretrained's loading info clean")


# ---- case 2 ----------------------------------------------------------------------------------
def case_transformers_sharded_bf16_in_twinkle(c):
    from transformers import AutoConfig, AutoModelForCausalLM
    for variant in ("a", "b"):
        print(f"== model {variant}", flush=True)
        cdir = c.path(variant, "config")
        os.makedirs(cdir)
        with open(os.path.join(cdir, "config.json"), "w") as f:
            json.dump(make_tiny_model.config(variant), f)
        torch.manual_seed(7)
        m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(cdir), dtype=torch.float32)
        fill(m, torch.Generator().manual_seed(8))
        m.to(torch.bfloat16)
        d = c.path(variant, "hf_bf16")
        m.save_pretrained(d, max_shard_size="40KB")
        with open(os.path.join(d, "config.json")) as f:
            saved_cfg = json.load(f)
        shards = sorted(set(shard_of(d).values()))
        dts = {str(t.dtype) for t in stpy.load_dir(d).values()}
        print(f"  transformers wrote {len(shards)} shards, tensor dtypes {dts}, config dtype "
              f"{saved_cfg.get('dtype', saved_cfg.get('torch_dtype'))!r}, rope {saved_cfg.get('rope_parameters')}")
        if len(shards) < 2 or dts != {"torch.bfloat16"}:
            raise SystemExit(f"the transformers checkpoint is not what the case needs: {shards}, {dts}")
        V = saved_cfg["vocab_size"]
        rows = random_rows(6, V, 21, (8, 20), 1)
        ref, info = hf_load(d)  # bf16 -> float64 exactly
        for p in loading_problems(info, f"transformers' own checkpoint {variant}"):
            raise SystemExit(p)
        want = lib_loss(ref, rows)
        c.same_loss(f"model {variant} step-1 loss (lr 0) of the bf16 sharded checkpoint", c.tw_loss_lr0(d, rows), want)
        # controls: the tensors of any one shard replaced by other values of their kind (another draw)
        # move the loss past the tolerance: a loader that skipped or misread any shard would fail
        where = shard_of(d)
        other = AutoModelForCausalLM.from_config(ref.config, dtype=torch.float64)
        fill(other, torch.Generator().manual_seed(9))
        params, others = dict(ref.named_parameters()), dict(other.named_parameters())
        for fn in shards:
            names = [k for k, v in where.items() if v == fn and k in params]
            keep = {k: params[k].detach().clone() for k in names}
            with torch.no_grad():
                for k in names:
                    params[k].copy_(others[k])
                moved = lib_loss(ref, rows)
                for k in names:
                    params[k].copy_(keep[k])
            c.control(f"model {variant}: the {len(names)} tensors of {fn} redrawn", moved, want)


def case_transformers_f64_in_twinkle(c):
    import peft
    from transformers import AutoConfig, AutoModelForCausalLM
    cdir = c.path("config")
    os.makedirs(cdir)
    with open(os.path.join(cdir, "config.json"), "w") as f:
        json.dump(make_tiny_model.config("b"), f)
    torch.manual_seed(51)
    m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(cdir), dtype=torch.float64)
    fill(m, torch.Generator().manual_seed(52))
    d = c.path("hf_f64")
    m.save_pretrained(d)
    with open(os.path.join(d, "config.json")) as f:
        saved_cfg = json.load(f)
    dts = {str(t.dtype) for t in stpy.load_dir(d).values()}
    print(f"  transformers wrote tensor dtypes {dts}, config dtype {saved_cfg.get('dtype', saved_cfg.get('torch_dtype'))!r}")
    if dts != {"torch.float64"}:
        raise SystemExit(f"the transformers checkpoint is not float64: {dts}")
    V = saved_cfg["vocab_size"]
    rows, held = random_rows(6, V, 53, (8, 20), 1), random_rows(4, V, 54, (8, 20), 1)
    ref, info = hf_load(d)
    for p in loading_problems(info, "transformers' own float64 checkpoint"):
        raise SystemExit(p)
    c.same_loss("step-1 loss (lr 0) of the float64 checkpoint", c.tw_loss_lr0(d, rows), lib_loss(ref, rows))
    torch.manual_seed(55)
    pm = peft.get_peft_model(ref, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                  init_lora_weights=False))
    adapter = c.path("peft_adapter_f64")
    pm.save_pretrained(adapter)
    adts = {str(t.dtype) for t in stpy.load(os.path.join(adapter, "adapter_model.safetensors")).values()}
    print(f"  PEFT wrote adapter tensor dtypes {adts}")
    if adts != {"torch.float64"}:
        raise SystemExit(f"the PEFT adapter is not float64: {adts}")
    pref, ws = peft_load(d, adapter)
    if ws:
        raise SystemExit(f"PEFT's own adapter: {ws}")
    want_held = lib_loss(pref, held)
    c.same_loss("held-out loss (eval --adapter) of the float64 adapter", c.tw_eval(d, held, adapter), want_held)
    with pref.disable_adapter():
        c.control("base model without the adapter", lib_loss(pref, held), want_held)
    victim = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"
    dropped = edit_adapter(adapter, c.path("dropped"), edit=lambda k, t: (k, t * 0 if k == victim else t))
    c.control(f"{victim} zeroed (one module not adapted)", lib_loss(peft_load(d, dropped)[0], held), want_held)


def fill(model, g):
    """Random weights of every kind: N(0, 0.08) matrices, RMSNorm weights 1 + 0.1 N, biases 0.05 N."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            z = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            p.copy_(1 + 0.1 * z if "norm" in n else 0.05 * z if n.endswith(".bias") else 0.08 * z)


# ---- case 3 ----------------------------------------------------------------------------------
def check_peft_reads(c, base, adapter, asked):
    """PEFT's reading of a twinkle adapter: keys, config fields, wrapped modules, scaling.
    Returns the PEFT model."""
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        acfg = json.load(f)
    print(f"  adapter_config.json: { {k: acfg.get(k) for k in ('peft_type', 'r', 'lora_alpha', 'use_rslora', 'target_modules', 'init_lora_weights')} }")
    for k, v in asked.items():
        got = acfg.get(k)
        if k == "target_modules" and isinstance(v, list):
            got = sorted(got) if isinstance(got, list) else got
            v = sorted(v)
        if got != v:
            c.fail(f"adapter_config.json {k} = {acfg.get(k)!r}, asked {v!r}")
    pm, key_warnings = peft_load(base, adapter)
    for w in key_warnings:
        c.fail(f"PeftModel.from_pretrained: {w}")
    pc = pm.peft_config["default"]
    tm = acfg["target_modules"]
    for field, want in (("r", acfg["r"]), ("lora_alpha", acfg["lora_alpha"]), ("use_rslora", acfg["use_rslora"])):
        if getattr(pc, field) != want:
            c.fail(f"PEFT's config {field} = {getattr(pc, field)!r}, twinkle wrote {want!r}")
    # PEFT keeps a target list as a set; "all-linear" it replaces by the names of the modules it
    # resolved (every nn.Linear but the output layer), checked below against the file's modules
    want_tm = set(tm) if isinstance(tm, list) else tm
    if tm == "all-linear" and isinstance(pc.target_modules, set):
        want_tm = pc.target_modules
    if pc.target_modules != want_tm:
        c.fail(f"PEFT's config target_modules = {pc.target_modules!r}, twinkle wrote {tm!r}")
    import peft
    file_t = stpy.load(os.path.join(adapter, "adapter_model.safetensors"))
    sd = peft.get_peft_model_state_dict(pm)
    if set(sd) != set(file_t):
        c.fail(f"PEFT's adapter state dict vs the file: only PEFT {sorted(set(sd) - set(file_t))[:4]}, "
               f"only file {sorted(set(file_t) - set(sd))[:4]}")
    diff = [k for k in sorted(set(sd) & set(file_t)) if not torch.equal(sd[k].double(), file_t[k].double())]
    if diff:
        c.fail(f"PEFT loaded other values than the file holds: {diff[:4]}")
    layers = lora_layers(pm)
    wrapped = {n for n, m in layers.items() if "default" in m.lora_A}
    fm = file_modules(file_t)
    if wrapped != fm:
        c.fail(f"modules PEFT adapts vs the file's: only PEFT {sorted(wrapped - fm)[:4]}, only file {sorted(fm - wrapped)[:4]}")
    scale = acfg["lora_alpha"] / (acfg["r"] ** 0.5 if acfg["use_rslora"] else acfg["r"])
    bad = [n for n in wrapped if abs(layers[n].scaling["default"] - scale) > 1e-12]
    if bad:
        c.fail(f"PEFT scaling of {bad[:3]}: {layers[bad[0]].scaling['default']} != {scale}")
    dts = {str(p.dtype) for n, p in pm.named_parameters() if "lora_" in n}
    print(f"  PEFT: {len(wrapped)} modules adapted, scaling {scale:g}, adapter parameters {dts}, "
          f"{len(key_warnings)} key warnings")
    if dts != {"torch.float64"}:
        c.fail(f"PEFT's adapter parameters are {dts}, not float64: the reference is not float64")
    return pm


def case_twinkle_adapter_in_peft(c):
    specs = [("all_linear", "b", ["--lora-r", "4", "--lora-alpha", "16", "--lora-targets", "all-linear", "--lora-init",
                                  "gaussian"], 5e-2,
              {"r": 4, "lora_alpha": 16, "use_rslora": False, "target_modules": "all-linear"}),
             ("rslora_targets", "a", ["--lora-r", "4", "--lora-alpha", "16", "--lora-rslora", "--lora-targets",
                                      "q_proj,v_proj,down_proj"], 2e-2,
              {"r": 4, "lora_alpha": 16, "use_rslora": True, "target_modules": ["q_proj", "v_proj", "down_proj"]})]
    for tag, variant, flags, lr, asked in specs:
        print(f"== adapter {tag} on model {variant}", flush=True)
        base = make_dense(c.path(tag), variant)
        V = vocab(base)
        train, held = random_rows(6, V, 31, (8, 20), 1), random_rows(4, V, 32, (8, 20), 1)
        adapter = c.path(tag, "adapter")
        c.tw_train(base, train, adapter, 2, lr, flags)
        pm = check_peft_reads(c, base, adapter, asked)
        want = lib_loss(pm, held)
        c.same_loss(f"adapter {tag}: held-out loss base + adapter", c.tw_eval(base, held, adapter), want)
        # controls
        with pm.disable_adapter():
            c.control(f"adapter {tag}: base model without the adapter", lib_loss(pm, held), want)
        flipped = edit_adapter(adapter, c.path(tag, "flipped"),
                               config=lambda j: j.update(use_rslora=not j["use_rslora"]))
        c.control(f"adapter {tag}: use_rslora flipped in adapter_config.json", lib_loss(peft_load(base, flipped)[0], held),
                  want)
        victim = sorted(k for k in stpy.load(os.path.join(adapter, "adapter_model.safetensors")) if ".lora_A." in k)[0]
        renamed = edit_adapter(adapter, c.path(tag, "renamed"),
                               edit=lambda k, t: (k.replace("lora_A", "lora_a") if k == victim else k, t))
        ws = peft_load(base, renamed)[1]
        print(f"  control adapter {tag}: {victim} renamed -> PEFT warns {[w[:120] for w in ws]}")
        if not ws:
            c.fail(f"control adapter {tag}: renaming {victim} drew no missing-key warning from PEFT")


# ---- case 4 ----------------------------------------------------------------------------------
def case_peft_adapter_in_twinkle(c):
    import peft
    base = make_dense(c.path("m"), "b")
    V = vocab(base)
    rows, held = random_rows(6, V, 41, (8, 20), 1), random_rows(4, V, 42, (8, 20), 1)
    m32, info = hf_load(base, torch.float32)
    torch.manual_seed(43)
    pm = peft.get_peft_model(m32, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                  init_lora_weights=False))
    adapter = c.path("peft_adapter")
    pm.save_pretrained(adapter)
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        acfg = json.load(f)
    print(f"  PEFT wrote target_modules {acfg['target_modules']}, {len(acfg)} config fields, "
          f"{len(stpy.load(os.path.join(adapter, 'adapter_model.safetensors')))} tensors")
    ref, ws = peft_load(base, adapter)
    if ws:
        raise SystemExit(f"PEFT's own adapter: {ws}")
    want_rows, want_held = lib_loss(ref, rows), lib_loss(ref, held)
    c.same_loss("step-1 loss (train --adapter, lr 0)", c.tw_loss_lr0(base, rows, adapter), want_rows)
    c.same_loss("held-out loss (eval --adapter)", c.tw_eval(base, held, adapter), want_held)
    # controls
    with ref.disable_adapter():
        c.control("base model without the adapter", lib_loss(ref, held), want_held)
    victim = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"
    dropped = edit_adapter(adapter, c.path("dropped"), edit=lambda k, t: (k, t * 0 if k == victim else t))
    c.control(f"{victim} zeroed (one module not adapted)", lib_loss(peft_load(base, dropped)[0], held), want_held)


# ---- case 5 ----------------------------------------------------------------------------------
def compare_merged(got, ref, base_t, adapted):
    """Twinkle's merged tensors vs PEFT's float64 merge: names, dtypes (the base checkpoint's),
    every adapted weight within MERGE_TOL of the tensor's max (float32 base) or, for a bf16 base,
    the float64 merge rounded to bf16: at most one bf16 ulp off anywhere and >= 99.9 % of the
    elements equal to that rounding (twinkle rounds the float32 result of a double sum, so only a
    value within an f32 ulp of a bf16 tie may round the other way); every other tensor bit-identical
    to the base's. Returns (failures, worst adapted error ratio, fraction of bf16 elements off)."""
    bad = []
    if set(got) != set(ref):
        bad.append(f"merged tensor names: only twinkle {sorted(set(got) - set(ref))[:4]}, "
                   f"only PEFT {sorted(set(ref) - set(got))[:4]}")
    worst, off, total = 0.0, 0, 0
    for k in sorted(set(got) & set(ref)):
        g = got[k]
        if k in base_t and g.dtype != base_t[k].dtype:
            bad.append(f"{k}: saved as {g.dtype}, the base checkpoint has {base_t[k].dtype}")
        if tuple(g.shape) != tuple(ref[k].shape):
            bad.append(f"{k}: shape {tuple(g.shape)} vs PEFT {tuple(ref[k].shape)}")
            continue
        if k in adapted:
            r = ref[k].double()
            e = ((g.double() - r).abs().max() / r.abs().max()).item()
            worst = max(worst, e)
            if g.dtype == torch.bfloat16:
                rb = r.to(torch.bfloat16)
                # one ulp of bf16 at |r|: 2^(floor(log2 |r|) - 7)
                ulp = torch.exp2(torch.floor(torch.log2(r.abs().clamp_min(1e-30))) - 7)
                n_off = int((g != rb).sum())
                off, total = off + n_off, total + g.numel()
                if bool(((g.double() - r).abs() > ulp).any()):
                    bad.append(f"{k}: an element more than one bf16 ulp from PEFT's float64 merge")
                elif n_off > 1e-3 * g.numel():
                    bad.append(f"{k}: {n_off} of {g.numel()} elements differ from PEFT's merge rounded to bf16")
            elif e > MERGE_TOL:
                bad.append(f"{k}: max abs error {e:.2e} of the tensor's max > {MERGE_TOL:g}")
        elif k in base_t and not torch.equal(g, base_t[k]):
            bad.append(f"{k}: not adapted, but differs from the base checkpoint's tensor")
    return bad, worst, (off / total if total else 0.0)


def case_export_merge_vs_merge_and_unload(c):
    for dtype in ("float32", "bfloat16"):
        print(f"== base in {dtype}", flush=True)
        export_one(c, dtype)


def export_one(c, dtype):
    base = make_dense(c.path(dtype), "b", dtype=dtype)
    V = vocab(base)
    train, held = random_rows(6, V, 51, (8, 20), 1), random_rows(4, V, 52, (8, 20), 1)
    adapter = c.path(dtype, "adapter")
    c.tw_train(base, train, adapter, 2, 1e-3, ["--lora-r", "4", "--lora-alpha", "16", "--lora-rslora", "--lora-targets",
                                                "all-linear", "--lora-init", "false"])
    merged = c.path(dtype, "merged")
    run([c.twinkle, "export", "--model", base, "--adapter", adapter, "--merge", "-o", merged, "--max-shard-bytes",
         "60000"])
    got = stpy.load_dir(merged)
    base_t = stpy.load_dir(base)
    shards = sorted(set(shard_of(merged).values()))
    print(f"  twinkle export wrote {len(got)} tensors in {len(shards)} files, dtypes "
          f"{sorted({str(t.dtype) for t in got.values()})}")
    if len(shards) < 2:
        c.fail(f"export --max-shard-bytes 60000 wrote {shards}: the sharded layout is not exercised")
    if os.path.exists(os.path.join(merged, "adapter_config.json")):
        c.fail("export --merge wrote an adapter_config.json")
    with open(os.path.join(merged, "config.json")) as f:
        mcfg = json.load(f)
    if mcfg.get("torch_dtype", mcfg.get("dtype")) != dtype:
        c.fail(f"merged config.json dtype {mcfg.get('torch_dtype', mcfg.get('dtype'))!r}, base {dtype!r}")
    adapted = {m + ".weight" for m in file_modules(stpy.load(os.path.join(adapter, "adapter_model.safetensors")))}

    def peft_merge(adapter_dir):
        pm, ws = peft_load(base, adapter_dir)
        if ws:
            c.fail(f"PeftModel.from_pretrained: {ws}")
        return hf_oracle.saved_tensors(pm.merge_and_unload())

    bad, worst, frac = compare_merged(got, peft_merge(adapter), base_t, adapted)
    print(f"  {len(adapted)} adapted weights: worst max abs error / tensor max {worst:.2e} "
          + (f"(tol {MERGE_TOL:g})" if dtype == "float32" else f"(bf16; elements off PEFT's merge rounded to bf16: "
             f"{frac:.2e}, at most 1 ulp)")
          + f"; {len(got) - len(adapted)} other tensors bit-identical to the base: {not any('not adapted' in b for b in bad)}")
    for b in bad:
        c.fail("merge vs merge_and_unload: " + b)
    m, info = hf_load(merged)
    for p in loading_problems(info, "merged directory"):
        c.fail(p)
    pm, _ = peft_load(base, adapter)
    want = lib_loss(pm, held)
    # the bf16 merged file holds W + s B A rounded to bf16: not the unmerged model's function to 1e-5
    if dtype == "float32":
        c.same_loss("held-out loss: transformers on twinkle's merged dir vs PEFT unmerged", lib_loss(m, held), want,
                    "transformers(merged)", "PEFT(unmerged)")
    c.same_loss("held-out loss: twinkle eval vs transformers, both on the merged dir", c.tw_eval(merged, held),
                lib_loss(m, held))
    # control: PEFT's merge of the same adapter with the other scaling convention fails the tensor
    # comparison on every adapted weight
    flipped = edit_adapter(adapter, c.path(dtype, "flipped"), config=lambda j: j.update(use_rslora=not j["use_rslora"]))
    bad_f, worst_f, _ = compare_merged(got, peft_merge(flipped), base_t, adapted)
    n_f = len({b.split(":")[0] for b in bad_f if b.split(":")[0] in adapted})
    print(f"  control use_rslora flipped: {n_f} of {len(adapted)} adapted weights fail (worst {worst_f:.2e})")
    if n_f != len(adapted):
        c.fail(f"control use_rslora flipped: only {n_f} of {len(adapted)} adapted weights fail the comparison")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES) + ["all"])
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    torch.set_num_threads(1)
    import transformers
    transformers.utils.logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    failures = []
    for name in (sorted(CASES) if a.case == "all" else [a.case]):
        tmp = tempfile.mkdtemp(prefix=f"twinkle-hf-interop-{name}-")
        print(f"=== {name} ({tmp})", flush=True)
        c = Case(a.build, tmp)
        try:
            with contextlib.redirect_stderr(sys.stdout):
                CASES[name](c)
        except SystemExit as e:  # a command that failed, or an input the case cannot use
            c.failures.append(f"stopped: {e}")
        finally:
            if a.keep:
                print(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        failures += [f"{name}: {f}" for f in c.failures]
    return harness.report(failures)


if __name__ == "__main__":
    sys.exit(main())
