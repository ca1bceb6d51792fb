#!/usr/bin/env python3
"""Small synthetic tokenizer.json files exercising what Qwen3's file does not.

Usage: tok_synthetic.py QWEN_TOKENIZER_JSON OUT_DIR [N_MERGES=4000]

Each variant keeps the 256 byte-level symbols plus the results of Qwen3's first N_MERGES merges
(every merge's parts are bytes or results of earlier merges, so the subset is a closed BPE),
renumbered. Variants (OUT_DIR/<name>/tokenizer.json):
  strmerges     Qwen3 pipeline, merges as "a b" strings, added tokens with every flag:
                special non-normalized, lstrip+rstrip, single_word, normalized multi-word,
                a normalized token that NFC changes (e + U+0301 + x)
  gpt2          NFKC + Lowercase normalizers (Sequence), ByteLevel(add_prefix_space, use_regex)
  behaviors     Split "-" MergedWithPrevious, Split digits Contiguous (invert false),
                Split " " Removed, Split "," MergedWithNext, then ByteLevel
  wrongids      strmerges with added-token ids in the file that the Rust library reassigns,
                and a repeated content with other flags
  invert        Split on letters+ with invert true and Removed (keeps only letter runs),
                ByteLevel; ignore_merges true
The reference ids come from the Rust library at test time (tok_check.py), so these files only
need to be loadable by it.
"""
import copy
import json
import os
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def main():
    src, out = sys.argv[1], sys.argv[2]
    n_merges = int(sys.argv[3]) if len(sys.argv) > 3 else 4000
    with open(src, encoding="utf-8") as f:
        q = json.load(f)
    merges = q["model"]["merges"][:n_merges]
    pairs = [m if isinstance(m, list) else m.split(" ") for m in merges]
    vocab = {}
    for ch in bytes_to_unicode():
        vocab.setdefault(ch, len(vocab))
    for a, b in pairs:
        assert a in vocab and b in vocab, (a, b)
        vocab.setdefault(a + b, len(vocab))
    base = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": copy.deepcopy(q["normalizer"]),
        "pre_tokenizer": copy.deepcopy(q["pre_tokenizer"]),
        "post_processor": copy.deepcopy(q["post_processor"]),
        "decoder": copy.deepcopy(q["decoder"]),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(p) for p in pairs]},
    }
    nxt = len(vocab)

    def added(content, special, **flags):
        nonlocal nxt
        t = {"id": nxt, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": not special, "special": special}
        t.update(flags)
        nxt += 1
        return t

    variants = {}

    def fresh():
        nonlocal nxt
        nxt = len(vocab)  # ids as the Rust library assigns them: right after the vocab
        return copy.deepcopy(base)

    v = fresh()
    v["model"]["merges"] = [a + " " + b for a, b in pairs]
    v["added_tokens"] = [
        added("<|special|>", True),
        added("[MASK]", True, lstrip=True, rstrip=True),
        added("<word>", False, single_word=True, normalized=False),
        added("hello world", False, normalized=True),
        added("e\u0301x", False, normalized=True),
        added("<think>", False, normalized=False),
        added("<|im_end|>", True),
    ]
    variants["strmerges"] = v

    v = fresh()
    v["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    v["added_tokens"] = [added("<|endoftext|>", True)]
    variants["gpt2"] = v

    v = fresh()
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\d"}, "behavior": "Contiguous", "invert": False},
        {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"String": ","}, "behavior": "MergedWithNext", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    v["added_tokens"] = [added("<|im_start|>", True)]
    variants["behaviors"] = v

    v = fresh()
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Removed", "invert": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    v["model"]["ignore_merges"] = True
    variants["invert"] = v

    # ids in the file that disagree with the ones the Rust library assigns (it re-adds the
    # tokens in file order and only warns): a gap after the vocab and a duplicate content
    v = copy.deepcopy(variants["strmerges"])
    for k, t in enumerate(v["added_tokens"]):
        t["id"] = len(vocab) + 5 + 2 * k
    v["added_tokens"].append(dict(v["added_tokens"][0], id=len(vocab) + 100, lstrip=True))
    variants["wrongids"] = v

    for name, tok in variants.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
    print(" ".join(sorted(variants)))


if __name__ == "__main__":
    main()
