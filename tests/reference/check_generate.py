#!/usr/bin/env python3
"""`twinkle generate` stops at the EOS ids the model declares, as transformers' generate does.

A tiny random Qwen3 with the real vocabulary (tokenizer files from models/qwen3-tiny) is decoded
greedily. The reference continuation comes from tests/reference/qwen3_ref.py (PyTorch, argmax of
the last position's logits, re-running the whole sequence each step). Cases:
  free   no generation_config.json, config.json eos_token_id null: runs to the token limit and
         equals the reference continuation;
  list   generation_config.json eos_token_id [a, b] (b = a token the reference emits): stops
         right before the first occurrence of a or b;
  scalar generation_config.json eos_token_id c;
  config no generation_config.json: config.json's eos_token_id;
  null   generation_config.json without eos_token_id (null): config.json's;
  file   generation_config.json's list wins over config.json's id (transformers loads the file).
Run with .venv/bin/python (scripts/setup).
"""
import argparse
import functools
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_model  # noqa: E402
import harness  # noqa: E402
run = functools.partial(harness.run, env=harness.one_thread_env())  # every child on one thread
import qwen3_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    tmp = tempfile.mkdtemp(prefix="twinkle-gen-")
    failures = []
    try:
        model = os.path.join(tmp, "m")
        os.makedirs(model)
        cfg = dict(make_tiny_model.config("a"), vocab_size=151936, num_hidden_layers=1, eos_token_id=None,
                   bos_token_id=151643, initializer_range=0.5)
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "init", "--config",
             os.path.join(model, "config.json"), "--seed", "3", "--out", model])
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer_dir, fn), model)
        N = 10

        def gen(gen_cfg, cfg_eos):
            gc = os.path.join(model, "generation_config.json")
            if os.path.exists(gc):
                os.remove(gc)
            if gen_cfg is not None:
                with open(gc, "w") as f:
                    json.dump(gen_cfg, f)
            with open(os.path.join(model, "config.json"), "w") as f:
                json.dump(dict(cfg, eos_token_id=cfg_eos), f, indent=2)
            out = run([twinkle, "generate", "--model", model, "--prompt", "hello", "--max-new-tokens", str(N), "--ids"])
            return json.loads(out.strip().splitlines()[-1])

        free = gen(None, None)
        prompt = free["prompt_ids"]
        ref_model = qwen3_ref.load_model(model, torch.float64)
        seq, cont = list(prompt), []
        with torch.no_grad():
            for _ in range(N):
                nxt = int(ref_model(torch.tensor([seq]))[0, -1].argmax())
                cont.append(nxt)
                seq.append(nxt)
        print("reference continuation:", cont)
        print("twinkle (no eos):      ", free["generated_ids"])
        if free["generated_ids"] != cont:
            failures.append(f"free run {free['generated_ids']} != reference {cont}")
        # stop ids taken from the continuation (their first occurrences decide where generation ends)
        distinct = []
        for t in cont:
            if t not in distinct:
                distinct.append(t)
        if len(distinct) < 4:
            raise SystemExit(f"reference continuation {cont} has too few distinct tokens for the test")

        def expect(eos):
            for i, t in enumerate(cont):
                if t in eos:
                    return cont[:i]
            return cont

        cases = [
            ("list", {"eos_token_id": [151645, distinct[2]]}, None, [151645, distinct[2]]),
            ("scalar", {"eos_token_id": distinct[1]}, None, [distinct[1]]),
            ("config", None, distinct[3], [distinct[3]]),
            ("null", {"eos_token_id": None, "do_sample": False}, distinct[2], [distinct[2]]),
            ("file", {"eos_token_id": [151645, 151643]}, distinct[1], [151645, 151643]),
        ]
        for name, gcfg, ceos, eos in cases:
            got = gen(gcfg, ceos)
            want = expect(eos)
            print(f"{name}: eos {eos} -> twinkle {got['generated_ids']} (declared {got['eos_token_ids']}), expected {want}")
            if got["generated_ids"] != want:
                failures.append(f"{name}: generated {got['generated_ids']}, expected {want}")
            if sorted(got["eos_token_ids"]) != sorted(eos):
                failures.append(f"{name}: stop ids {got['eos_token_ids']}, expected {eos}")
        if any(expect(e) == cont for n, _, _, e in cases if n != "file"):
            failures.append("a stop case does not stop early: the test could not fail")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.report(failures)


if __name__ == "__main__":
    sys.exit(main())
