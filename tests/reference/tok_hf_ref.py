#!/usr/bin/env python3
"""Reference tokenization with the Python Hugging Face packages of the project environment (.venv):
`tokenizers` (the Rust library's own Python binding, Tokenizer.from_file(tokenizer.json)) and
`transformers` (AutoTokenizer.from_pretrained(DIR), the fast tokenizer a user gets; for Qwen2/3 it
rebuilds the pipeline from the vocab / merges with its own regex and takes only the post-processor
and the added tokens from the files, so it is a partly independent second pipeline).

Used as a module by tok_check.py and template_check.py; also a command line twin of tok_ref.js:
  tok_hf_ref.py TOKENIZER_JSON < corpus.jsonl > ref.jsonl
  tok_hf_ref.py TOKENIZER_JSON --decode-only < id_arrays.jsonl > decoded.jsonl
  output lines: {"ids", "decoded", "decoded_skip"} as tok_ref.js (no js_agree)
    ids           tokenizers encode(text, add_special_tokens=False)
    decoded       tokenizers decode(ids, skip_special_tokens=False)
    decoded_skip  tokenizers decode(ids, skip_special_tokens=True)
  tok_hf_ref.py --auto-tokenizer DIR < strings.jsonl > ids.jsonl
    one id array per line: AutoTokenizer.from_pretrained(DIR)(texts)["input_ids"] with the default
    add_special_tokens=True (what a user's tokenizer(text) gives); the tokenizer class, bos token
    and versions go to stderr; fails when AutoTokenizer's class is not the one tokenizer_config.json
    names (config_tokenizer, used by template_check.py, loads that class directly)
Exits 1 (with the reason) when a package cannot be loaded.
"""
import json
import os
import sys


def _need(name):
    try:
        return __import__(name)
    except ImportError as e:
        sys.exit(f"FAIL: cannot import the Python package {name!r} ({e}): the project environment .venv "
                 "(scripts/setup) provides it; run with .venv/bin/python")


def versions(with_transformers=True):
    t = _need("tokenizers")
    out = f"tokenizers {t.__version__}"
    if not with_transformers:
        return out
    try:
        import transformers
        out += f", transformers {transformers.__version__}"
    except ImportError:
        pass
    return out


def load(tok_json):
    """tokenizers.Tokenizer for a tokenizer.json file."""
    tokenizers = _need("tokenizers")
    return tokenizers.Tokenizer.from_file(tok_json)


def encode(tok, texts):
    """ids of each text, add_special_tokens=False (what tok_ref.js asks the node binding for)."""
    return [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]


def encode_with_offsets(tok, texts):
    """(ids, offsets) per text; offsets are code point (Python str) indices."""
    return [(e.ids, e.offsets) for e in tok.encode_batch(list(texts), add_special_tokens=False)]


def decode(tok, idss, skip_special_tokens):
    return tok.decode_batch([list(x) for x in idss], skip_special_tokens=skip_special_tokens)


def reference(tok, texts):
    """[{"ids", "decoded", "decoded_skip"}] as tok_ref.js, from the Python package."""
    ids = encode(tok, texts)
    dec = decode(tok, ids, False)
    dec_skip = decode(tok, ids, True)
    return [{"ids": i, "decoded": d, "decoded_skip": s} for i, d, s in zip(ids, dec, dec_skip)]


def decode_reference(tok, idss):
    dec = decode(tok, idss, False)
    dec_skip = decode(tok, idss, True)
    return [{"decoded": d, "decoded_skip": s} for d, s in zip(dec, dec_skip)]


def config_tokenizer(tokenizer_dir):
    """The tokenizer class tokenizer_config.json names (transformers.<tokenizer_class>, "Fast" suffix
    dropped as transformers 5 does), from_pretrained(DIR) from local files. This is what
    AutoTokenizer.from_pretrained resolves to for qwen3-tiny (tok_check.py asserts it) without
    AutoTokenizer's import of the model configuration code and torch (3 s less per use)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    transformers = _need("transformers")
    transformers.logging.set_verbosity_error()
    with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        name = (json.load(f).get("tokenizer_class") or "").removesuffix("Fast")
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        return auto_tokenizer(tokenizer_dir)
    tok = cls.from_pretrained(tokenizer_dir, local_files_only=True)
    if not getattr(tok, "is_fast", False):
        sys.exit(f"FAIL: {name}.from_pretrained({tokenizer_dir}) gave a slow tokenizer {type(tok).__name__}")
    return tok


def normalized_added_ids(tok):
    """Ids of the added tokens with normalized=true whose content the normalizer changes: the ones
    tokenizers >= 0.23 (PR #1995, AddedVocabulary::simple_id_to_token returns the normalizer's output
    from normalized_cache) decodes differently from tokenizers <= 0.22 (the raw content)."""
    if tok.normalizer is None:
        return {}
    return {i: t.content for i, t in tok.get_added_tokens_decoder().items()
            if t.normalized and tok.normalizer.normalize_str(t.content) != t.content}


def decode_content_rule(tok, ids, skip_special_tokens):
    """decode as tokenizers <= 0.22 did: every added token's original content (not its normalized
    form) goes to the decoder; everything else as TokenizerImpl::decode."""
    added = tok.get_added_tokens_decoder()
    toks = []
    for i in ids:
        if i in added:
            if skip_special_tokens and added[i].special:
                continue
            toks.append(added[i].content)
        else:
            t = tok.id_to_token(i)
            if t is not None:
                toks.append(t)
    return tok.decoder.decode(toks) if tok.decoder is not None else " ".join(toks)


def auto_tokenizer(tokenizer_dir):
    """transformers.AutoTokenizer.from_pretrained(DIR) from local files only (no hub access)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    transformers = _need("transformers")
    transformers.logging.set_verbosity_error()
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    if not getattr(tok, "is_fast", False):
        sys.exit(f"FAIL: AutoTokenizer.from_pretrained({tokenizer_dir}) gave a slow tokenizer {type(tok).__name__}")
    return tok


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    if sys.argv[1] == "--auto-tokenizer":
        auto = auto_tokenizer(sys.argv[2])
        texts = [json.loads(l) for l in sys.stdin.read().splitlines() if l.strip()]
        texts = [v if isinstance(v, str) else v["text"] for v in texts]
        ids = auto(texts)["input_ids"] if texts else []
        sys.stdout.write("".join(json.dumps(i) + "\n" for i in ids))
        with open(os.path.join(sys.argv[2], "tokenizer_config.json"), encoding="utf-8") as f:
            named = (json.load(f).get("tokenizer_class") or "").removesuffix("Fast")
        if named and type(auto).__name__ != named:  # config_tokenizer (template_check.py) relies on it
            sys.exit(f"FAIL: AutoTokenizer gave {type(auto).__name__}, tokenizer_config.json names {named}")
        sys.stderr.write(f"{type(auto).__name__} (the tokenizer_config.json class; bos_token {auto.bos_token!r}, "
                         f"{versions()})\n")
        return
    tok = load(sys.argv[1])
    lines = [json.loads(l) for l in sys.stdin.read().splitlines() if l.strip()]
    if "--decode-only" in sys.argv[2:]:
        out = decode_reference(tok, lines)
    else:
        out = reference(tok, [v if isinstance(v, str) else v["text"] for v in lines])
    sys.stdout.write("".join(json.dumps(o) + "\n" for o in out))
    sys.stderr.write(f"tok_hf_ref.py: {len(lines)} lines ({versions()})\n")


if __name__ == "__main__":
    main()
