#!/usr/bin/env python3
"""Independent reader of twinkle's sharded checkpoints (for the tests), written from the format
description in include/twinkle/io/sharded_checkpoint.h, not from the C++ reader:

    <iter dir>/sharded_index.json  {"format": "twinkle-sharded-checkpoint", "version": 1,
        "world_size": W, "files": [...], "tensors": [{"name", "dtype", "shape",
        "chunks": [{"file", "key", "offsets", "lengths"}]}]}
    <iter dir>/shard-RRRRR-of-WWWWW.safetensors   the chunks, each a tensor of shape `lengths`

assemble(iter_dir) -> ({name: torch.Tensor}, problems): every global tensor rebuilt from its
chunks, with a per-element coverage count; `problems` lists every element covered zero or more
than once, every chunk whose stored tensor is missing / of another shape or dtype, and every
tensor of a shard file that no chunk names (a rank wrote something that is not its slice).
"""
import json
import os

import torch

import safetensors_py

INDEX = "sharded_index.json"
KINDS = {"master": "master_weights.safetensors", "exp_avg": "exp_avg.safetensors",
         "exp_avg_sq": "exp_avg_sq.safetensors"}


def is_sharded(iter_dir):
    return os.path.exists(os.path.join(iter_dir, INDEX))


def assemble(iter_dir):
    with open(os.path.join(iter_dir, INDEX)) as f:
        ix = json.load(f)
    problems = []
    if ix.get("format") != "twinkle-sharded-checkpoint" or ix.get("version") != 1:
        problems.append(f"{INDEX}: format {ix.get('format')!r} version {ix.get('version')!r}")
    files = {}
    named = {}
    for fn in ix["files"]:
        p = os.path.join(iter_dir, fn)
        if not os.path.exists(p):
            problems.append(f"{fn} (listed in the index) is missing")
            continue
        files[fn] = safetensors_py.load(p)
        named[fn] = set()
    out = {}
    for t in ix["tensors"]:
        shape = t["shape"]
        full = torch.zeros(shape, dtype=torch.float32)
        count = torch.zeros(shape, dtype=torch.int32)
        for c in t["chunks"]:
            fn, key = c["file"], c["key"]
            if fn not in files or key not in files[fn]:
                problems.append(f"{t['name']}: chunk {fn}:{key} is not stored")
                continue
            named[fn].add(key)
            data = files[fn][key]
            if list(data.shape) != c["lengths"] or t["dtype"] != "F32" or data.dtype != torch.float32:
                problems.append(f"{t['name']}: chunk {fn}:{key} is {data.dtype} {list(data.shape)}, index {t['dtype']} {c['lengths']}")
                continue
            sl = tuple(slice(o, o + l) for o, l in zip(c["offsets"], c["lengths"]))
            full[sl] = data
            count[sl] += 1
        if count.numel() and (count != 1).any():
            bad = (count != 1).nonzero()
            problems.append(f"{t['name']}: {bad.shape[0]} of {count.numel()} elements covered "
                            f"{sorted(set(count[count != 1].tolist()))} times (first at {bad[0].tolist()})")
        out[t["name"]] = full
    for fn, keys in files.items():
        extra = set(keys) - named[fn]
        if extra:
            problems.append(f"{fn} holds tensors no chunk names: {sorted(extra)[:3]}")
    return out, problems


def state_files(iter_dir):
    """{"master_weights.safetensors": {hf name: tensor}, ...}: the gathered form's three files."""
    tensors, problems = assemble(iter_dir)
    res = {f: {} for f in KINDS.values()}
    for name, t in tensors.items():
        kind, hf = name.split("/", 1)
        res[KINDS[kind]][hf] = t
    return res, problems
