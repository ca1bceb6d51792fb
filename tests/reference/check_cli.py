#!/usr/bin/env python3
"""The `twinkle` front end as a new user meets it (faults found by trying the documented commands):
- `twinkle --help` prints the command list on stdout with exit 0 (it went to stderr, so
  `twinkle --help | less` showed nothing); a bare `twinkle` or an unknown command is a usage error
  on stderr (exit 2);
- `twinkle info --help` prints help and measures nothing: before, `info` ignored its arguments, ran
  the GEMM measurement and rewrote $TWINKLE_HOME/peak.json (which MFU reads) on `--help`; an unknown
  option is refused by name;
- `twinkle train --data-slice` text that is not A:B, N or i,j,k is refused naming the option and the
  text, before any model or data is loaded (it died with std::stoll's bare "stoll", and read
  "1:2:3" as 1:2 and "5x" as 5);
- `twinkle tokenize --decode` refuses an id beyond int32 naming the line (4294967297 decoded as id 1);
- a row longer than the model's max_position_embeddings is refused by `twinkle train` / `eval` naming
  the dataset file:line before the model is built (the step that met it failed naming no row);
- the chat template's options (--max-length, --template, --self-cognition, ...) given with pre-tokenized
  rows are refused naming the option and the row (they were ignored: --max-length 4 trained 9-token rows);
- an error that already names its command is not prefixed twice ("twinkle plan: error: twinkle plan: ...");
- a resume in the other mixed precision (--bf16 after an fp32 run) warns as a changed lr does (it
  continued silently);
- `twinkle generate --max-new-tokens` below 1 is refused naming the option (a negative value printed
  "(empty reply)" as if the model had answered nothing);
- a checkpoint holding tensors the model does not use (config.json edited to fewer layers) loads
  with a warning naming them, as transformers' from_pretrained does (it loaded silently, dropping
  the extra layer);
- `twinkle eval` reads a dataset as `twinkle train` does: Alpaca rows (it refused them as malformed
  message rows), --self-cognition, --data-slice (it had neither), a directory of several files;
- a PEFT adapter directory given as --model, or a directory of pytorch_model.bin weights, is refused
  naming what to do (it got the seeded random init with only a warning: garbage generations);
- a model directory left by a save killed while writing its weights (model.safetensors.tmp.<pid>),
  or shards without their index, is refused as incomplete (it got the seeded random init too).
Run with .venv/bin/python (scripts/setup).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402


def run(cmd, env=None):
    print('+', ' '.join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                       env=harness.one_thread_env(env))
    return r.returncode, r.stdout, r.stderr


def copy_model_files(model, dst):
    """A model directory of `model`'s config and tokenizer files alone (no weights) at dst."""
    os.makedirs(dst)
    for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(model, fn), os.path.join(dst, fn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    src = os.path.join(HERE, "..", "..")
    failures = []

    # 1. twinkle --help / twinkle / twinkle bogus
    for flag in ("--help", "-h"):
        rc, out, err = run([twinkle, flag])
        if rc != 0 or "usage: twinkle <command>" not in out or "train" not in out or err:
            failures.append(f"twinkle {flag}: rc {rc}, expected the command list on stdout; stdout {out[:200]!r} "
                            f"stderr {err[:200]!r}")
    for args, what in (([], "no command"), (["frobnicate"], "unknown command 'frobnicate'")):
        rc, out, err = run([twinkle] + args)
        if rc != 2 or "usage: twinkle <command>" not in err or out or \
                (args and "unknown command 'frobnicate'" not in err):
            failures.append(f"twinkle {' '.join(args)} ({what}): rc {rc}, expected a usage error on stderr (exit 2); "
                            f"stdout {out[:200]!r} stderr {err[:200]!r}")

    rc, out, err = run([twinkle, "plan", "--model", os.path.join(HERE, "..", "..", "models", "qwen3-tiny"), "--tp", "8",
                        "--micro-batch-size", "1", "--seq-length", "16"])
    if rc != 1 or "twinkle plan: error: num_attention_heads 4 is not divisible by tp 8" not in err or \
            err.count("twinkle plan:") != 1:
        failures.append(f"twinkle plan --tp 8: rc {rc}, expected one 'twinkle plan: error: num_attention_heads ...' "
                        f"line; stderr {err[-300:]!r}")

    # 2. twinkle info --help measures nothing and writes no peak.json; a stray option is refused
    with tempfile.TemporaryDirectory(prefix="twinkle-cli-") as tmp:
        home = os.path.join(tmp, "home")
        env = dict(os.environ, TWINKLE_HOME=home)
        rc, out, err = run([twinkle, "info", "--help"], env)
        if rc != 0 or "Usage: twinkle info" not in out or "measured" in out or os.path.exists(home):
            failures.append(f"twinkle info --help: rc {rc}, peak.json written: {os.path.exists(home)}; "
                            f"stdout {out[:300]!r}")
        rc, out, err = run([twinkle, "info", "--bogus"], env)
        if rc == 0 or "--bogus" not in out + err or "measured" in out or os.path.exists(home):
            failures.append(f"twinkle info --bogus: rc {rc}, expected a refusal naming --bogus; "
                            f"stdout {out[:300]!r} stderr {err[:300]!r}")

    # 3. --data-slice: malformed text refused naming the option and the text; a good one trains
    model = os.path.join(src, "models", "qwen3-tiny")
    data = os.path.join(src, "data", "self_cognition.jsonl")
    base = [twinkle, "train", "--model", model, "--dataset", data, "--self-cognition", "a,b", "--no-save",
            "--batch-size", "2", "--max-steps", "1", "--lr", "0"]
    for bad in ("abc", "1,x", "5x", "1:2:3", "-3", "99999999999999999999"):
        rc, out, err = run(base + ["--data-slice", bad])
        if rc == 0 or f"--data-slice '{bad}'" not in err or "stoll" in err or "step 1/" in out + err:
            failures.append(f"--data-slice {bad}: rc {rc}, expected an error naming --data-slice '{bad}' before "
                            f"training; stderr {err[-300:]!r}")
    rc, out, err = run(base + ["--data-slice", "3,1"])
    if rc != 0 or "dataset: 2 rows" not in out + err or "step 1/1" not in out + err:
        failures.append(f"--data-slice 3,1: rc {rc}, expected 2 rows and one step; {(out + err)[-400:]!r}")

    # --sequence-parallel with tp 1: Megatron disables it with a warning; the configs line says what runs
    rc, out, err = run(base + ["--data-slice", "3,1", "--sequence-parallel"])
    if rc != 0 or "Sequence Parallel: False" not in out + err or "sequence parallelism needs tp > 1" not in out + err:
        failures.append(f"--sequence-parallel at tp 1: rc {rc}, expected the warning and 'Sequence Parallel: False'; "
                        f"{(out + err)[-600:]!r}")

    print('+ twinkle tokenize --decode <<< [4294967297]', flush=True)
    r = subprocess.run([twinkle, "tokenize", "--tokenizer", model, "--decode"], input="[1, 2]\n[4294967297]\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    want = "stdin line 2: ids[0] = 4294967297 does not fit a 32-bit token id"
    if r.returncode == 0 or want not in r.stderr:
        failures.append(f"tokenize --decode [4294967297]: rc {r.returncode}, expected {want!r}; stdout {r.stdout!r} "
                        f"stderr {r.stderr[-300:]!r}")

    for v in ("-1", "0"):
        rc, out, err = run([twinkle, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", v])
        want = f"'max_new_tokens' (--max-new-tokens) must be >= 1, got {v}"
        if rc == 0 or want not in err or "empty reply" in out:
            failures.append(f"generate --max-new-tokens {v}: rc {rc}, expected {want!r}; stdout {out[-200:]!r} "
                            f"stderr {err[-300:]!r}")

    # rows longer than max_position_embeddings: named before training / evaluating
    with tempfile.TemporaryDirectory(prefix="twinkle-cli-") as tmp:
        short = os.path.join(tmp, "short_positions")
        os.makedirs(short)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(model, fn), "rb") as src_f, open(os.path.join(short, fn), "wb") as dst_f:
                dst_f.write(src_f.read())
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        cfg["max_position_embeddings"] = 8
        with open(os.path.join(short, "config.json"), "w") as f:
            json.dump(cfg, f)
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "w") as f:
            f.write(json.dumps({"input_ids": [1, 2, 3]}) + "\n" + json.dumps({"input_ids": list(range(1, 10))}) + "\n")
        want = f"{rows}:2: the row has 9 tokens, more than max_position_embeddings 8 of {short}/config.json"
        for cmd in ([twinkle, "train", "--model", short, "--dataset", rows, "--batch-size", "2", "--max-steps", "1",
                     "--no-save"], [twinkle, "eval", "--model", short, "--dataset", rows]):
            rc, out, err = run(cmd)
            if rc == 0 or want not in err or "step 1/" in out + err:
                failures.append(f"{cmd[1]} with a row past max_position_embeddings: rc {rc}, expected {want!r}; "
                                f"stderr {err[-400:]!r}")

        # template options with pre-tokenized rows: refused, not ignored
        for cmd, opt in (([twinkle, "train", "--model", model, "--dataset", rows, "--batch-size", "2",
                           "--max-steps", "1", "--no-save", "--max-length", "4"], "--max-length"),
                         ([twinkle, "train", "--model", model, "--dataset", rows, "--batch-size", "2",
                           "--max-steps", "1", "--no-save", "--self-cognition", "a,b"], "--self-cognition"),
                         ([twinkle, "eval", "--model", model, "--dataset", rows, "--template", "qwen3"], "--template")):
            rc, out, err = run(cmd)
            want = f"{opt} applies to message rows encoded with the chat template, but {rows}:1 is a pre-tokenized row"
            if rc == 0 or want not in err or "step 1/" in out + err:
                failures.append(f"{cmd[1]} {opt} with pre-tokenized rows: rc {rc}, expected {want!r}; "
                                f"stderr {err[-400:]!r}")

    # 4. unused checkpoint tensors are named (train one step at lr 0 to get a checkpoint of qwen3-tiny)
    with tempfile.TemporaryDirectory(prefix="twinkle-cli-") as tmp:
        ck = os.path.join(tmp, "ck")
        rc, out, err = run([twinkle, "train", "--model", model, "--dataset", data, "--self-cognition", "a,b",
                            "--batch-size", "2", "--max-steps", "1", "--lr", "0", "--data-slice", "2",
                            "--output-dir", ck])
        if rc != 0:
            failures.append(f"making a checkpoint: rc {rc}: {err[-300:]}")
        else:
            rc, out, err = run([twinkle, "train", "--model", ck, "--dataset", data, "--self-cognition", "a,b",
                                "--batch-size", "2", "--max-steps", "1", "--lr", "0", "--data-slice", "2",
                                "--no-save"])
            if rc != 0 or "not used" in out + err:
                failures.append(f"the full checkpoint: rc {rc}, expected no unused-tensor warning; {err[-300:]!r}")
            cfg_path = os.path.join(ck, "config.json")
            with open(cfg_path) as f:
                cfg = json.load(f)
            cfg["num_hidden_layers"] -= 1
            last = cfg["num_hidden_layers"]
            with open(cfg_path, "w") as f:
                json.dump(cfg, f)
            rc, out, err = run([twinkle, "train", "--model", ck, "--dataset", data, "--self-cognition", "a,b",
                                "--batch-size", "2", "--max-steps", "1", "--lr", "0", "--data-slice", "2",
                                "--no-save"])
            want = f"11 tensor(s) are not used by the model config.json describes (model.layers.{last}."
            if rc != 0 or want not in out + err:
                failures.append(f"num_hidden_layers one fewer than the checkpoint: rc {rc}, expected a warning "
                                f"containing {want!r}; got {(out + err)[-500:]!r}")

    # 5. resuming an fp32 checkpoint with --bf16 warns (the loss curve changes, as with a new --lr)
    with tempfile.TemporaryDirectory(prefix="twinkle-cli-") as tmp:
        run_args = [twinkle, "train", "--model", model, "--dataset", data, "--self-cognition", "a,b", "--batch-size",
                    "2", "--max-steps", "2", "--data-slice", "4", "--no-save", "--output-dir", tmp]
        rc, out, err = run(run_args + ["--save-interval", "1", "--save-optimizer"])
        if rc != 0:
            failures.append(f"making a resumable checkpoint: rc {rc}: {err[-300:]}")
        else:
            ck1 = os.path.join(tmp, "checkpoint-step-1")
            for extra, warned in (([], False), (["--bf16"], True)):
                rc, out, err = run(run_args + ["--resume", ck1] + extra)
                has = 'resume: mixed_precision was "fp32"' in out + err and 'this run uses "bf16"' in out + err
                if rc != 0 or has != warned:
                    failures.append(f"resume {' '.join(extra) or '(same precision)'}: rc {rc}, warning "
                                    f"{'missing' if warned else 'unexpected'}; stderr {err[-400:]!r}")
            # resumed at or past --max-steps: nothing is trained, and the run says so
            ck2 = os.path.join(tmp, "checkpoint-step-2")
            rc, out, err = run(run_args + ["--resume", ck2])
            want = "nothing to train: the checkpoint is at step 2 and --max-steps gives 2 steps"
            if rc != 0 or want not in out + err or "step 3/" in out + err:
                failures.append(f"resume at --max-steps: rc {rc}, expected {want!r}; {(out + err)[-400:]!r}")

    # 6. `twinkle eval` reads a dataset as `twinkle train` does: Alpaca rows (AlpacaPreprocessor; eval
    # refused them as message rows), --self-cognition, --data-slice, a directory of several files. The
    # expected loss is eval's on the same conversations written by this script as message rows
    # (ms-swift's rules: Alpaca user = instruction + "\n" + input when input is non-empty, the row's
    # system if any; self-cognition: the system "You are a helpful assistant.", {{NAME}} / {{AUTHOR}}
    # replaced): the same tokens give the same forward, so the losses are equal to the last digit.
    with tempfile.TemporaryDirectory(prefix="twinkle-cli-") as tmp:
        def write_rows(path, rows):
            with open(path, "w") as f:
                f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))

        def msgs(system, user, assistant):
            m = [{"role": "system", "content": system}] if system else []
            return {"messages": m + [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}

        alpaca = [{"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
                  {"instruction": "Name a colour.", "output": "Blue.", "system": "Answer briefly."},
                  {"instruction": "Say hi.", "input": "", "output": "Hi!"}]
        as_msgs = [msgs("", "Add the numbers.\n2 and 3", "5"), msgs("Answer briefly.", "Name a colour.", "Blue."),
                   msgs("", "Say hi.", "Hi!")]
        with open(data, encoding="utf-8") as f:
            sc = [json.loads(line) for line in f if line.strip()][:3]
        sub = lambda t: t.replace("{{NAME}}", "Nova").replace("{{AUTHOR}}", "Acme")  # noqa: E731
        sc_msgs = [msgs("You are a helpful assistant.", sub(r["query"]), sub(r["response"])) for r in sc]
        files = {}
        for name, rows in (("alpaca.jsonl", alpaca), ("alpaca_msgs.jsonl", as_msgs), ("sc_msgs.jsonl", sc_msgs),
                           ("all_msgs.jsonl", as_msgs + sc_msgs), ("dir/a.jsonl", as_msgs), ("dir/b.jsonl", sc_msgs)):
            files[name] = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(files[name]), exist_ok=True)
            write_rows(files[name], rows)

        def eval_loss(*args):
            rc, out, err = run([twinkle, "eval", "--model", model, "--batch-size", "2"] + list(args))
            if rc != 0:
                failures.append(f"eval {' '.join(args)}: rc {rc}: {err[-400:]!r}")
                return None
            return json.loads(out.strip().splitlines()[-1])

        for got_args, want_args in (
                (["--dataset", files["alpaca.jsonl"]], ["--dataset", files["alpaca_msgs.jsonl"]]),
                (["--dataset", files["alpaca.jsonl"], "--data-slice", "2,0"],
                 ["--dataset", files["alpaca_msgs.jsonl"], "--data-slice", "2,0"]),
                (["--dataset", data, "--self-cognition", "Nova,Acme", "--data-slice", "3"],
                 ["--dataset", files["sc_msgs.jsonl"]]),
                (["--dataset", os.path.join(tmp, "dir")], ["--dataset", files["all_msgs.jsonl"]])):
            got, want = eval_loss(*got_args), eval_loss(*want_args)
            if got is not None and want is not None and (got != want or not want["label_tokens"]):
                failures.append(f"eval {' '.join(got_args)}: {got}, expected {want} (eval {' '.join(want_args)})")
        rc, out, err = run([twinkle, "eval", "--model", model, "--dataset", files["alpaca.jsonl"], "--data-slice", "1x"])
        if rc == 0 or "--data-slice '1x'" not in err:
            failures.append(f"eval --data-slice 1x: rc {rc}, expected an error naming it; {err[-300:]!r}")

    # 7. a directory whose weights twinkle would not load is refused, not replaced by the seeded
    # random init with a warning: a PEFT adapter directory given as --model (what `train --lora-r`
    # writes, with config.json and tokenizer files next to the adapter), and PyTorch-pickle weights.
    # The embedded models (config + tokenizer, no weights) still get the random init.
    with tempfile.TemporaryDirectory(prefix="twinkle-cli-") as tmp:
        lora_dir = os.path.join(tmp, "lora")
        rc, out, err = run([twinkle, "train", "--model", model, "--dataset", data, "--self-cognition", "a,b",
                            "--batch-size", "2", "--max-steps", "1", "--data-slice", "2", "--lora-r", "2",
                            "--output-dir", lora_dir])
        if rc != 0 or not os.path.exists(os.path.join(lora_dir, "adapter_config.json")):
            failures.append(f"making a LoRA adapter: rc {rc}: {err[-300:]}")
        else:
            want = (f"model {lora_dir} is a PEFT adapter directory (adapter_config.json, no model.safetensors), not a "
                    f"model: load its base model with the adapter, `--model {model} --adapter {lora_dir}`")
            for cmd in ([twinkle, "generate", "--model", lora_dir, "--prompt", "hi", "--max-new-tokens", "2"],
                        [twinkle, "eval", "--model", lora_dir, "--dataset", data, "--self-cognition", "a,b",
                         "--data-slice", "2"]):
                rc, out, err = run(cmd)
                if rc == 0 or want not in err or "random init" in err:
                    failures.append(f"{cmd[1]} --model <adapter dir>: rc {rc}, expected {want!r}; {err[-400:]!r}")
            rc, out, err = run([twinkle, "generate", "--model", model, "--adapter", lora_dir, "--prompt", "hi",
                                "--max-new-tokens", "2"])
            if rc != 0:
                failures.append(f"generate --adapter (the way the message names): rc {rc}: {err[-300:]!r}")
        pt = os.path.join(tmp, "pt")
        copy_model_files(model, pt)
        with open(os.path.join(pt, "pytorch_model.bin"), "wb") as f:
            f.write(b"PK\x03\x04 not read")
        rc, out, err = run([twinkle, "generate", "--model", pt, "--prompt", "hi", "--max-new-tokens", "2"])
        want = f"model {pt}: holds weight files twinkle does not read (pytorch_model.bin)"
        if rc == 0 or want not in err:
            failures.append(f"generate --model <pytorch_model.bin dir>: rc {rc}, expected {want!r}; {err[-400:]!r}")
        rc, out, err = run([twinkle, "generate", "--model", model, "--prompt", "hi", "--max-new-tokens", "2"])
        if rc != 0 or "seeded random init" not in err:
            failures.append(f"generate --model models/qwen3-tiny (no weights): rc {rc}, expected the random-init "
                            f"warning; {err[-300:]!r}")

    # 8. what a save interrupted while writing the weights leaves is refused as incomplete, not run
    # as the seeded random init: the final save of `twinkle train` SIGKILLed inside model.safetensors
    # (TWINKLE_FAULT_WRITE=kill:N, N bytes past the tokenizer files and config.json) leaves
    # config.json and model.safetensors.tmp.<pid>; shards without their model.safetensors.index.json
    # (written last by a sharded save) likewise.
    with tempfile.TemporaryDirectory(prefix="twinkle-cli-") as tmp:
        cut = os.path.join(tmp, "cut")
        before_weights = sum(os.path.getsize(os.path.join(model, f)) for f in ("tokenizer.json", "tokenizer_config.json"))
        rc, out, err = run([twinkle, "train", "--model", model, "--dataset", data, "--self-cognition", "a,b",
                            "--batch-size", "2", "--max-steps", "1", "--data-slice", "2", "--output-dir", cut],
                           env=dict(os.environ, TWINKLE_FAULT_WRITE=f"kill:{before_weights + 200000}"))
        left = sorted(os.listdir(cut)) if os.path.isdir(cut) else []
        temps = [n for n in left if n.startswith("model.safetensors.tmp.")]
        if rc == 0 or "config.json" not in left or "model.safetensors" in left or len(temps) != 1:
            failures.append(f"interrupting the final save: rc {rc}, left {left}; expected a kill inside "
                            "model.safetensors leaving config.json and one model.safetensors.tmp.<pid>")
        else:
            want = f"model {cut}: holds no complete weights but {temps[0]}, what a save interrupted"
            for cmd in ([twinkle, "generate", "--model", cut, "--prompt", "hi", "--max-new-tokens", "2"],
                        [twinkle, "train", "--model", cut, "--dataset", data, "--self-cognition", "a,b",
                         "--batch-size", "2", "--max-steps", "1", "--data-slice", "2", "--no-save"]):
                rc, out, err = run(cmd)
                if rc == 0 or want not in err or "parameters get the seeded random init" in err:
                    failures.append(f"{cmd[1]} --model <interrupted save>: rc {rc}, expected {want!r}; {err[-400:]!r}")
        shards = os.path.join(tmp, "shards")
        copy_model_files(model, shards)
        for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
            with open(os.path.join(shards, name), "wb") as f:
                f.write(b"\x08" + b"\x00" * 7 + b"{}      ")  # a valid empty safetensors file: never read
        rc, out, err = run([twinkle, "generate", "--model", shards, "--prompt", "hi", "--max-new-tokens", "2"])
        want = (f"model {shards}: holds no complete weights but model-00001-of-00002.safetensors, "
                "model-00002-of-00002.safetensors, what a save interrupted")
        if rc == 0 or want not in err:
            failures.append(f"generate --model <shards without index>: rc {rc}, expected {want!r}; {err[-400:]!r}")
    return harness.report(failures, "cli OK")


if __name__ == "__main__":
    sys.exit(main())
