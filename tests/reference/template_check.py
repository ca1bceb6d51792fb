#!/usr/bin/env python3
"""Acceptance test: Qwen3 chat template of `twinkle encode` against jinja2 + the Rust tokenizer.

Usage: /usr/bin/python3 template_check.py --twinkle BIN --tokenizer-dir DIR --work DIR

1. template_ref.py renders deterministic conversations with the REAL chat_template (jinja2);
2. tok_labels.js tokenizes the renders with the Rust HF tokenizers library (ids, labels from
   separately tokenized pieces, generation-prompt ids);
3. checks `twinkle encode` per row: --render text (without / with generation prompt, with
   enable_thinking false) identical to jinja2; input_ids, labels identical to the reference;
   attention_mask all 1, position_ids 0..L-1, length L; --prompt ids identical; rows whose
   label boundary falls inside a token are rejected with an error naming the row;
4. --ignore-empty-think: same ids, labels equal the reference with ms-swift's ignore_empty_think
   regex (^<think>\\s*</think>\\s* at each assistant turn, Python re) applied to the jinja2 render:
   the tokens wholly inside a match untrained (found from the Rust tokenizer's offsets), also where
   the match ends inside a token (content starting with a space); such rows are never rejected.
Fails when node, node_modules, jinja2 or the tokenizer files are missing (setup installs them).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, stdin_path, what, expect_ok=True):
    with open(stdin_path, "rb") as fin:
        p = subprocess.run(cmd, stdin=fin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if expect_ok and p.returncode != 0:
        sys.exit(f"FAIL: {what} exited {p.returncode}: {' '.join(cmd)}\n{p.stderr.decode('utf-8', 'replace')}")
    return p


def lines(b):
    return [json.loads(l) for l in b.decode("utf-8").splitlines() if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--twinkle", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    cfg = os.path.join(a.tokenizer_dir, "tokenizer_config.json")
    tok = os.path.join(a.tokenizer_dir, "tokenizer.json")
    for f in (cfg, tok):
        if not os.path.isfile(f):
            sys.exit(f"FAIL: {f} missing: run scripts/fetch-assets (scripts/setup does)")
    if shutil.which("node") is None:
        sys.exit("FAIL: node not found: run scripts/setup")
    os.makedirs(a.work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(HERE, "template_ref.py"), cfg, a.work], check=True)
    convs_path = os.path.join(a.work, "convs.jsonl")
    render_path = os.path.join(a.work, "render.jsonl")
    labels_path = os.path.join(a.work, "labels.jsonl")
    with open(render_path, "rb") as fin, open(labels_path, "wb") as fout:
        p = subprocess.run(["node", os.path.join(HERE, "tok_labels.js"), tok], stdin=fin, stdout=fout,
                           stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("FAIL: tok_labels.js: " + p.stderr.decode("utf-8", "replace"))
    with open(convs_path, encoding="utf-8") as f:
        convs = [l for l in f.read().splitlines() if l.strip()]
    with open(render_path, encoding="utf-8") as f:
        ren = [json.loads(l) for l in f if l.strip()]
    with open(labels_path, encoding="utf-8") as f:
        ref = [json.loads(l) for l in f if l.strip()]
    assert len(convs) == len(ren) == len(ref)
    base = [a.twinkle, "encode", "--template", "qwen3", "--tokenizer", a.tokenizer_dir]
    failures = 0

    def fail(msg):
        nonlocal failures
        failures += 1
        if failures <= 15:
            print("MISMATCH " + msg)

    # 1. rendering
    for flags, key in (([], "text"), (["--add-generation-prompt"], "text_gen"),
                       (["--add-generation-prompt", "--no-thinking"], "text_gen_nothink")):
        got = lines(run(base + ["--render"] + flags, convs_path, "twinkle encode --render").stdout)
        for i, (g, r) in enumerate(zip(got, ren)):
            if g != r[key]:
                fail(f"render {key} row {i + 1}: ours {json.dumps(g)[:300]} jinja2 {json.dumps(r[key])[:300]}")
        if len(got) != len(ren):
            fail(f"render {key}: {len(got)} rows for {len(ren)}")
    # 2. prompts
    for flags, key in (([], "prompt_ids"), (["--no-thinking"], "prompt_ids_nothink")):
        got = lines(run(base + ["--prompt"] + flags, convs_path, "twinkle encode --prompt").stdout)
        for i, (g, r) in enumerate(zip(got, ref)):
            if g != r[key]:
                fail(f"{key} row {i + 1}")
    # 3. encode (consistent rows together, in order)
    good = [i for i, r in enumerate(ref) if r["consistent"]]
    bad = [i for i, r in enumerate(ref) if not r["consistent"]]
    good_path = os.path.join(a.work, "good.jsonl")
    with open(good_path, "w", encoding="utf-8") as f:
        for i in good:
            f.write(convs[i] + "\n")
    got = lines(run(base + ["--max-length", "1000000"], good_path, "twinkle encode").stdout)
    if len(got) != len(good):
        fail(f"encode: {len(got)} rows for {len(good)}")
    trained = 0
    for g, i in zip(got, good):
        r = ref[i]
        L = len(r["input_ids"])
        if g["input_ids"] != r["input_ids"]:
            fail(f"input_ids row {i + 1}")
        if g["labels"] != r["labels"]:
            fail(f"labels row {i + 1}: ours {g['labels'][:40]} ref {r['labels'][:40]}")
        if g["attention_mask"] != [1] * L or g["position_ids"] != list(range(L)) or g["length"] != L:
            fail(f"attention_mask/position_ids/length row {i + 1}")
        trained += sum(1 for x in g["labels"] if x != -100)
    # 3b. ignore_empty_think (ms-swift's regex applied to the jinja2 render by template_ref.py):
    #     every consistent row gives the reference ids and labels, the empty think blocks at -100
    got = lines(run(base + ["--max-length", "1000000", "--ignore-empty-think"], good_path,
                    "twinkle encode --ignore-empty-think").stdout)
    if len(got) != len(good):
        fail(f"encode --ignore-empty-think: {len(got)} rows for {len(good)}")
    masked_blocks = straddles = 0
    for g, i in zip(got, good):
        r = ref[i]
        if g["input_ids"] != r["input_ids"]:
            fail(f"ignore_empty_think input_ids row {i + 1}")
        if g["labels"] != r["labels_iet"]:
            fail(f"ignore_empty_think labels row {i + 1}: ours {g['labels'][:40]} ref {r['labels_iet'][:40]}")
        masked_blocks += sum(1 for x, y in zip(r["labels"], r["labels_iet"]) if x != y)
        straddles += r["iet_straddles"]
    if masked_blocks == 0 or straddles == 0:
        fail(f"ignore_empty_think: {masked_blocks} masked tokens, {straddles} matches ending inside a token "
             "(the check would prove nothing)")
    print(f"ignore_empty_think: {len(good)} rows, {masked_blocks} tokens of empty think blocks masked, "
          f"{straddles} matches ending inside a token")
    # 4. rows without a label boundary are rejected, naming the row
    for i in bad:
        one = os.path.join(a.work, "bad.jsonl")
        with open(one, "w", encoding="utf-8") as f:
            f.write(convs[i] + "\n")
        p = run(base + ["--input", one], one, "twinkle encode (bad row)", expect_ok=False)
        err = p.stderr.decode("utf-8", "replace")
        if p.returncode == 0 or "label boundary" not in err or "bad.jsonl:1" not in err:
            fail(f"row {i + 1} should be rejected (boundary inside a token): rc {p.returncode} {err[:200]}")
    print(f"{len(convs)} conversations ({len(good)} encoded, {trained} trained tokens, {len(bad)} rejected as "
          f"expected): {failures} mismatches")
    if failures or not bad or not good:
        print("FAIL")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
