#!/usr/bin/env python3
"""Reference input_ids / labels / prompt ids for chat conversations from the Python Hugging Face
packages of the project environment (.venv). Used by template_check.py, two references:

tokenizers_labels(tok, render_rows)
    a `tokenizers.Tokenizer` (template_check.py passes the transformers tokenizer's backend_tokenizer,
    whose ids tok_check.py checks against Tokenizer.from_file(tokenizer.json)) on the jinja2 renders
    of template_ref.py, exactly what tok_labels.js computes with the node binding:
      input_ids    encode(text)
      labels       piece ids for trained pieces, -100 for the others (pieces tokenized one by one)
      consistent   the concatenated piece ids equal encode(text) (else labels are undefined and
                   twinkle must reject the row)
      labels_iet   labels with -100 on every token whose character offsets lie wholly inside one of
                   iet_ranges (ms-swift's ignore_empty_think match)
      iet_straddles  how many iet_ranges end strictly inside a token
      prompt_ids / prompt_ids_nothink  encode(text_gen) / encode(text_gen_nothink)

transformers_reference(auto, convs)
    transformers' own tokenizer.apply_chat_template with the model's chat_template (the
    tokenizer_config.json one, rendered by transformers' sandboxed jinja2 environment, after its own
    message normalisation: None-valued keys dropped, reasoning field aliases), per row:
      text / text_gen / text_gen_nothink
                   apply_chat_template(tokenize=False, add_generation_prompt=False/True/True,
                                       enable_thinking=True/True/False)
      input_ids    apply_chat_template(tokenize=True, add_generation_prompt=False) input_ids
      prompt_ids / prompt_ids_nothink
                   tokenizer(text_gen / text_gen_nothink, add_special_tokens=False), the call
                   apply_chat_template(tokenize=True) makes on its render
      labels       input_ids with -100 on every token not wholly inside a trained span
                   (template_ref.pieces_of on transformers' own render: each assistant turn from the
                   end of its header through its "<|im_end|>\\n"), located with the offset mapping of
                   the same apply_chat_template(tokenize=True) call (tokenizer_kwargs
                   return_offsets_mapping) instead of tokenizing pieces
      consistent   no token straddles a span boundary (a boundary strictly inside a token's offsets)
      labels_iet / iet_straddles  as above, from the same offsets and template_ref's
                   ignore_empty_think ranges on transformers' render
Command line (template_check.py runs it in the background):
  template_hf_ref.py TOKENIZER_DIR CONVS_JSONL RENDER_JSONL OUT_JSONL
    one row per conversation {"transformers": transformers_reference row,
    "tokenizers": tokenizers_labels row}; the tokenizer is tok_hf_ref.config_tokenizer(DIR), the
    class tokenizer_config.json names (what AutoTokenizer gives, asserted by tok_check.py)
"""
import bisect
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import template_ref  # noqa: E402
import tok_hf_ref  # noqa: E402


def _iet(labels, offsets, ranges):
    out = [-100 if any(a <= s and e <= b for a, b in ranges) else l for l, (s, e) in zip(labels, offsets)]
    straddles = sum(1 for _, b in ranges if any(s < b < e for s, e in offsets))
    return out, straddles


def tokenizers_labels(tok, rows):
    texts = [r["text"] for r in rows]
    full = tok_hf_ref.encode_with_offsets(tok, texts)
    gen = tok_hf_ref.encode(tok, [r["text_gen"] for r in rows])
    gen_nothink = tok_hf_ref.encode(tok, [r["text_gen_nothink"] for r in rows])
    flat = [p for r in rows for p in r["pieces"]]
    piece_ids = iter(tok_hf_ref.encode(tok, [p[0] for p in flat]))
    out = []
    for r, (ids, offsets), g, gn in zip(rows, full, gen, gen_nothink):
        cat, labels = [], []
        for text, trained in r["pieces"]:
            p = next(piece_ids)
            cat += p
            labels += p if trained else [-100] * len(p)
        consistent = cat == ids
        labels_iet, straddles = _iet(labels, offsets, r.get("iet_ranges") or [])
        out.append({"input_ids": ids, "labels": labels, "consistent": consistent,
                    "labels_iet": labels_iet if consistent else [], "iet_straddles": straddles,
                    "prompt_ids": g, "prompt_ids_nothink": gn})
    return out


def _span_labels(ids, offsets, text, n_assistant):
    pieces = template_ref.pieces_of(text, n_assistant)
    spans, bounds, pos = [], [], 0
    for piece, trained in pieces:
        if trained:
            spans.append((pos, pos + len(piece)))
        pos += len(piece)
        bounds.append(pos)
    labels = [i if any(a <= s and e <= b for a, b in spans) else -100 for i, (s, e) in zip(ids, offsets)]
    # no span boundary strictly inside a token's offsets (bounds ascend: the first one after s)
    consistent = not any((k := bisect.bisect_right(bounds, s)) < len(bounds) and bounds[k] < e for s, e in offsets)
    labels_iet, straddles = _iet(labels, offsets, template_ref.ignore_empty_think_ranges(pieces))
    return labels, consistent, labels_iet, straddles


def transformers_reference(auto, convs):
    msgs = [c["messages"] for c in convs]
    variants = {"": (False, True), "_gen": (True, True), "_gen_nothink": (True, False)}
    texts, ids = {}, {}
    for suffix, (gen, think) in variants.items():
        texts[suffix] = auto.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen,
                                                 enable_thinking=think)
    # the training render through apply_chat_template(tokenize=True) itself (with the offsets); the
    # generation prompts through the tokenizer call that tokenize=True makes on its render
    # (self(rendered, add_special_tokens=False)), which saves two renders
    enc = auto.apply_chat_template(msgs, tokenize=True, add_generation_prompt=False, enable_thinking=True,
                                   tokenizer_kwargs={"return_offsets_mapping": True})
    ids[""], offsets = enc["input_ids"], {"": enc["offset_mapping"]}
    for suffix in ("_gen", "_gen_nothink"):
        ids[suffix] = auto(texts[suffix], add_special_tokens=False)["input_ids"]
    out = [{"text": texts[""][i], "text_gen": texts["_gen"][i], "text_gen_nothink": texts["_gen_nothink"][i],
            "input_ids": ids[""][i], "prompt_ids": ids["_gen"][i], "prompt_ids_nothink": ids["_gen_nothink"][i]}
           for i in range(len(msgs))]
    for i, (row, m) in enumerate(zip(out, msgs)):
        n_asst = sum(1 for x in m if x["role"] == "assistant")
        labels, consistent, labels_iet, straddles = _span_labels(
            row["input_ids"], [tuple(o) for o in offsets[""][i]], row["text"], n_asst)
        row["labels"] = labels
        row["consistent"] = consistent
        row["labels_iet"] = labels_iet if consistent else []
        row["iet_straddles"] = straddles
    return out


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    auto = tok_hf_ref.config_tokenizer(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        convs = [json.loads(l) for l in f if l.strip()]
    with open(sys.argv[3], encoding="utf-8") as f:
        ren = [json.loads(l) for l in f if l.strip()]
    tf = transformers_reference(auto, convs)
    tk = tokenizers_labels(auto.backend_tokenizer, ren)
    with open(sys.argv[4], "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"transformers": t, "tokenizers": k}, ensure_ascii=False) + "\n"
                     for t, k in zip(tf, tk))
    sys.stderr.write(f"template_hf_ref.py: {len(tf)} conversations through {type(auto).__name__}.apply_chat_template "
                     f"and its backend_tokenizer ({tok_hf_ref.versions()})\n")


if __name__ == "__main__":
    main()
