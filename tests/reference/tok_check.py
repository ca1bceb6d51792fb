#!/usr/bin/env python3
"""Acceptance test: `twinkle tokenize` against the Rust HF tokenizers library.

Usage: tok_check.py --twinkle BIN --tokenizer-dir DIR --work DIR [--corpus FILE] [--min-texts N]

1. corpus: tok_corpus.py (deterministic) unless --corpus is given (JSONL {"text"} or strings);
2. reference: node tok_ref.js (Rust ids + decode, @huggingface/tokenizers second opinion);
3. ours: `twinkle tokenize` and `twinkle tokenize --decode` (with and without --skip-special-tokens);
4. checks, per text: identical ids; our decode == the Rust decode (both skip modes);
   decode(encode(s)) == s for every NFC-stable s; and our decode == the Rust decode for random
   id sequences (partial UTF-8 -> U+FFFD, special tokens skipped or kept).
Fails (exit 1) on any mismatch, and also when node / node_modules / the tokenizer files are
missing: the setup (scripts/fetch-assets) installs them, so their absence is an error.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, stdin_path, stdout_path, what):
    with open(stdin_path, "rb") as fin, open(stdout_path, "wb") as fout:
        p = subprocess.run(cmd, stdin=fin, stdout=fout, stderr=subprocess.PIPE)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        sys.exit(f"FAIL: {what} exited {p.returncode}: {' '.join(cmd)}\n{err}")
    return err


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--twinkle", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--corpus")
    ap.add_argument("--min-texts", type=int, default=2000)
    ap.add_argument("--no-roundtrip", action="store_true", help="skip decode(encode(s)) == s")
    ap.add_argument("--decode-fuzz", type=int, default=500, help="random id sequences to decode")
    ap.add_argument("--n-random", type=int, default=1600, help="random strings in the generated corpus")
    ap.add_argument("--specials", action="store_true", help="mix the tokenizer's added tokens into the corpus")
    ap.add_argument("--sweep", action="store_true", help="corpus = one probe string per code point")
    a = ap.parse_args()

    tok_json = os.path.join(a.tokenizer_dir, "tokenizer.json")
    if not os.path.isfile(tok_json):
        sys.exit(f"FAIL: {tok_json} missing: run scripts/fetch-assets (scripts/setup does)")
    if shutil.which("node") is None:
        sys.exit("FAIL: node not found: run scripts/setup")
    os.makedirs(a.work, exist_ok=True)

    corpus = os.path.join(a.work, "corpus.jsonl")
    if a.corpus:
        shutil.copyfile(a.corpus, corpus)
    else:
        with open(corpus, "wb") as f:
            cmd = [sys.executable, os.path.join(HERE, "tok_corpus.py"), str(a.n_random)]
            if a.specials:
                cmd += ["--specials-from", tok_json]
            if a.sweep:
                cmd = [sys.executable, os.path.join(HERE, "tok_corpus.py"), "--sweep"]
            subprocess.run(cmd, stdout=f, check=True)
    rows = read_jsonl(corpus)
    texts = [r if isinstance(r, str) else r["text"] for r in rows]
    nfc_stable = [True if isinstance(r, str) else r.get("nfc_stable", True) for r in rows]
    if len(texts) < a.min_texts:
        sys.exit(f"FAIL: corpus has {len(texts)} texts, fewer than {a.min_texts}")
    strings = os.path.join(a.work, "strings.jsonl")
    with open(strings, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")

    ref_path = os.path.join(a.work, "ref.jsonl")
    summary = run(["node", os.path.join(HERE, "tok_ref.js"), tok_json] + (["--no-js"] if a.sweep else []), strings,
                  ref_path, "reference (node)")
    sys.stdout.write(summary)
    ref = read_jsonl(ref_path)

    ours_path = os.path.join(a.work, "ours.jsonl")
    run([a.twinkle, "tokenize", "--tokenizer", a.tokenizer_dir], strings, ours_path, "twinkle tokenize")
    ours = read_jsonl(ours_path)
    dec_path = os.path.join(a.work, "decoded.jsonl")
    run([a.twinkle, "tokenize", "--tokenizer", a.tokenizer_dir, "--decode"], ours_path, dec_path,
        "twinkle tokenize --decode")
    dec = read_jsonl(dec_path)
    dec_skip_path = os.path.join(a.work, "decoded_skip.jsonl")
    run([a.twinkle, "tokenize", "--tokenizer", a.tokenizer_dir, "--decode", "--skip-special-tokens"], ours_path,
        dec_skip_path, "twinkle tokenize --decode --skip-special-tokens")
    dec_skip = read_jsonl(dec_skip_path)

    for name, got in (("ref", ref), ("ours", ours), ("decoded", dec), ("decoded_skip", dec_skip)):
        if len(got) != len(texts):
            sys.exit(f"FAIL: {name} has {len(got)} lines for {len(texts)} texts")

    bad_ids = bad_dec = bad_rt = n_rt = js_dis = 0
    for i, t in enumerate(texts):
        r = ref[i]
        if r.get("js_agree") is False:
            js_dis += 1
        if ours[i] != r["ids"]:
            bad_ids += 1
            if bad_ids <= 10:
                k = next((k for k in range(min(len(ours[i]), len(r["ids"]))) if ours[i][k] != r["ids"][k]),
                         min(len(ours[i]), len(r["ids"])))
                print(f"MISMATCH text {i} {json.dumps(t[:200])}: first difference at token {k}: "
                      f"ours {ours[i][max(0, k - 3):k + 5]} ref {r['ids'][max(0, k - 3):k + 5]}")
        if dec[i] != r["decoded"] or dec_skip[i] != r["decoded_skip"]:
            bad_dec += 1
            if bad_dec <= 10:
                print(f"DECODE MISMATCH text {i}: ours {json.dumps(dec[i][:200])} ref {json.dumps(r['decoded'][:200])}")
        if nfc_stable[i] and not a.no_roundtrip:
            n_rt += 1
            if dec[i] != t:
                bad_rt += 1
                if bad_rt <= 10:
                    print(f"ROUNDTRIP FAIL text {i}: {json.dumps(t[:200])} -> {json.dumps(dec[i][:200])}")
    # Decoding arbitrary id sequences: partial UTF-8 (lossy U+FFFD replacement), specials.
    with open(tok_json, encoding="utf-8") as f:
        tj = json.load(f)
    # added tokens get ids right after the vocab, in file order, one per distinct new content
    # (what the Rust library assigns, whatever ids the file states)
    n_added = len({t["content"] for t in tj.get("added_tokens") or []} - set(tj["model"]["vocab"]))
    added_ids = list(range(len(tj["model"]["vocab"]), len(tj["model"]["vocab"]) + n_added))
    rng = random.Random(7)
    seqs = []
    for _ in range(a.decode_fuzz):
        seq = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            if r < 0.5:
                seq.append(rng.randrange(0, 256))  # byte-level single-byte symbols live at low ids
            elif r < 0.6 and added_ids:
                seq.append(rng.choice(added_ids))
            else:
                seq.append(rng.randrange(0, len(tj["model"]["vocab"])))
        seqs.append(seq)
    fuzz_path = os.path.join(a.work, "fuzz_ids.jsonl")
    with open(fuzz_path, "w") as f:
        for q in seqs:
            f.write(json.dumps(q) + "\n")
    fuzz_ref_path = os.path.join(a.work, "fuzz_ref.jsonl")
    run(["node", os.path.join(HERE, "tok_ref.js"), tok_json, "--decode-only"], fuzz_path, fuzz_ref_path,
        "reference decode (node)")
    fuzz_ref = read_jsonl(fuzz_ref_path)
    for skip, key in ((False, "decoded"), (True, "decoded_skip")):
        out_path = os.path.join(a.work, "fuzz_ours_%s.jsonl" % key)
        cmd = [a.twinkle, "tokenize", "--tokenizer", a.tokenizer_dir, "--decode"] + (["--skip-special-tokens"] if skip else [])
        run(cmd, fuzz_path, out_path, "twinkle tokenize --decode (random ids)")
        got = read_jsonl(out_path)
        for i, (g, r) in enumerate(zip(got, fuzz_ref)):
            if g != r[key]:
                bad_dec += 1
                if bad_dec <= 20:
                    print(f"DECODE MISMATCH ids {seqs[i]} ({key}): ours {json.dumps(g)} ref {json.dumps(r[key])}")
    ntok = sum(len(x) for x in ours)
    print(f"{len(texts)} texts, {ntok} tokens, {len(seqs)} random id sequences: id mismatches {bad_ids}, "
          f"decode mismatches {bad_dec}, "
          f"round-trip failures {bad_rt} of {n_rt} NFC-stable texts; "
          f"@huggingface/tokenizers disagrees with Rust on {js_dis}")
    if bad_ids or bad_dec or bad_rt:
        print("FAIL")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
