#!/usr/bin/env python3
"""Parquet files and the rows Hugging Face datasets reads from them (tests/unit/data/test_parquet.cpp).

Usage: make_parquet_reference.py OUTDIR [SEED]

Writes into OUTDIR, each file with `<name>.expected.json` beside it: the rows of
`datasets.load_dataset('parquet', data_files=FILE, split='train')` (the library users load parquet
with), as JSON:
  chat_snappy.parquet     pyarrow, snappy, row groups of 7: `messages` list<struct<role, content>>
                          (empty lists, a null list, a null element, a null field), a `source`
                          column of few distinct strings (dictionary-encoded pages), a row of nulls
  alpaca_zstd.parquet     pyarrow, zstd, row groups of 5, dictionary pages off for `output`:
                          instruction / input / output, some null
  sharegpt_gzip.parquet   pyarrow, gzip, data page v2: ShareGPT `conversations`
                          list<struct<from, value>>, a `query`/`response` pair
  types_none.parquet      pyarrow, uncompressed: int8/int16/int32/int64, uint8/uint64 (2^64-1),
                          float32/float64, bool, large_string, an Arrow dictionary<int32, string>
                          column, struct<a: int, b: list<string>>, list<list<int64>>,
                          fixed_size_list<int32, 2>, a binary column (left out by twinkle, with a
                          warning: datasets gives bytes, which JSON cannot hold)
  pretok_zstd.parquet     pyarrow, zstd, row groups of 3: `input_ids` list<int64>, `labels`
                          list<int64> with -100, a null `labels` row
  hub/                    the layout `push_to_hub` writes: data/train-0000K-of-00003.parquet and
                          data/test-00000-of-00001.parquet, each shard `Dataset.shard(num_shards,
                          index, contiguous=True).to_parquet(path, batch_size=4)` as
                          datasets' _push_parquet_shards_to_hub_single does (so row groups of 4);
                          hub.train.expected.json / hub.test.expected.json are
                          load_dataset(hub, split=...) (the packaged parquet builder over the
                          sharded layout), hub.slice.expected.json the train split's
                          select([i % n for i in range(3, 3 + 2n)]) (Twinkle's data_slice rule).
NaN / inf are not written: JSON (the expected files) has no spelling for them.
"""
import json
import os
import random
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def words(rng, n):
    pool = ["hello", "wörld", "中文", "🙂", "a", "", "line\nbreak", 'q"uote', "tab\tx", "x" * 40]
    return " ".join(rng.choice(pool) for _ in range(n))


def chat(rng, n):
    msgs, src = [], []
    for r in range(n):
        k = rng.randint(0, 5)
        if r == 3:
            msgs.append(None)
        elif r == 4:
            msgs.append([])
        else:
            m = []
            for j in range(k):
                role = ["system", "user", "assistant"][0 if j == 0 and rng.random() < 0.3 else 1 + j % 2]
                m.append({"role": role, "content": words(rng, rng.randint(0, 6))})
            if r == 5 and m:
                m[0]["content"] = None
            if r == 6:
                m.append(None)
            msgs.append(m)
        src.append(rng.choice(["alpaca", "sharegpt", "self"]) if r != 9 else None)
    t = pa.table({"messages": pa.array(msgs, pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
                  "source": pa.array(src, pa.string())})
    # row 9: every column null
    t = t.set_column(0, "messages", pa.array([None if r == 9 else m for r, m in enumerate(msgs)], t.schema[0].type))
    return t


def alpaca(rng, n):
    cols = {"instruction": [], "input": [], "output": []}
    for r in range(n):
        cols["instruction"].append(words(rng, rng.randint(1, 8)))
        cols["input"].append(None if r % 4 == 1 else words(rng, rng.randint(0, 3)))
        cols["output"].append(None if r == 7 else words(rng, rng.randint(1, 10)))
    return pa.table(cols)


def sharegpt(rng, n):
    conv, q, a = [], [], []
    for r in range(n):
        conv.append([{"from": ["human", "gpt"][j % 2], "value": words(rng, rng.randint(1, 5))}
                     for j in range(rng.randint(1, 4))])
        q.append(words(rng, 3))
        a.append(words(rng, 4))
    t = pa.table({"conversations": conv, "query": q, "response": a})
    return t


def types(rng, n):
    return pa.table({
        "i8": pa.array([rng.randint(-128, 127) for _ in range(n)], pa.int8()),
        "i16": pa.array([rng.randint(-2**15, 2**15 - 1) for _ in range(n)], pa.int16()),
        "i32": pa.array([None if r == 2 else rng.randint(-2**31, 2**31 - 1) for r in range(n)], pa.int32()),
        "i64": pa.array([-2**63 if r == 0 else rng.randint(-2**62, 2**62) for r in range(n)], pa.int64()),
        "u8": pa.array([rng.randint(0, 255) for _ in range(n)], pa.uint8()),
        "u64": pa.array([2**64 - 1 if r == 1 else rng.randint(0, 2**63) for r in range(n)], pa.uint64()),
        "f32": pa.array([rng.uniform(-1e6, 1e6) for _ in range(n)], pa.float32()),
        "f64": pa.array([None if r == 3 else rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for r in range(n)]),
        "flag": pa.array([None if r == 4 else rng.random() < 0.5 for r in range(n)]),
        "big": pa.array([words(rng, 2) for _ in range(n)], pa.large_string()),
        "dict": pa.array([rng.choice(["red", "green", None, "blue"]) for _ in range(n)]).dictionary_encode(),
        "st": pa.array([None if r == 5 else {"a": r, "b": [words(rng, 1) for _ in range(r % 3)]} for r in range(n)],
                       pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])),
        "nested": pa.array([[[rng.randint(0, 9) for _ in range(k)] for k in range(r % 4)] for r in range(n)],
                           pa.list_(pa.list_(pa.int64()))),
        "pair": pa.array([[r, -r] for r in range(n)], pa.list_(pa.int32(), 2)),
        "blob": pa.array([bytes([r]) for r in range(n)], pa.binary()),
    })


def pretok(rng, n):
    ids, labels = [], []
    for r in range(n):
        k = rng.randint(1, 12)
        x = [rng.randint(0, 151935) for _ in range(k)]
        ids.append(x)
        labels.append(None if r == 2 else [-100 if j < k // 2 else t for j, t in enumerate(x)])
    return pa.table({"input_ids": pa.array(ids, pa.list_(pa.int64())),
                     "labels": pa.array(labels, pa.list_(pa.int64()))})


def rows(ds):
    import datasets  # noqa: F401
    out = []
    for r in ds:
        out.append({k: v for k, v in r.items() if not isinstance(v, bytes)})
    return out


def dump(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, allow_nan=False)


def main():
    out = sys.argv[1]
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 35)
    os.makedirs(out, exist_ok=True)
    cache = os.path.join(out, "hf_cache")
    os.environ["HF_DATASETS_CACHE"] = cache
    os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()

    files = {
        "chat_snappy.parquet": (chat(rng, 30), dict(compression="snappy", row_group_size=7)),
        "alpaca_zstd.parquet": (alpaca(rng, 23), dict(compression="zstd", row_group_size=5,
                                                      use_dictionary=["instruction", "input"])),
        "sharegpt_gzip.parquet": (sharegpt(rng, 11), dict(compression="gzip", data_page_version="2.0")),
        "types_none.parquet": (types(rng, 17), dict(compression="none", row_group_size=6)),
        "pretok_zstd.parquet": (pretok(rng, 10), dict(compression="zstd", row_group_size=3)),
    }
    for name, (table, kw) in files.items():
        p = os.path.join(out, name)
        pq.write_table(table, p, **kw)
        md = pq.ParquetFile(p).metadata
        assert "row_group_size" not in kw or md.num_row_groups > 1, (name, md.num_row_groups)
        ds = datasets.load_dataset("parquet", data_files=p, split="train", cache_dir=cache)
        dump(p + ".expected.json", rows(ds))

    hub = os.path.join(out, "hub")
    full = datasets.Dataset.from_dict({
        "messages": [[{"role": "user", "content": words(rng, 3)}, {"role": "assistant", "content": words(rng, 4)}]
                     for _ in range(22)],
        "id": list(range(22)),
    })
    test = datasets.Dataset.from_dict({"messages": [[{"role": "user", "content": "t"}]], "id": [100]})
    for split, d, shards in (("train", full, 3), ("test", test, 1)):
        for k in range(shards):
            path = os.path.join(hub, "data", f"{split}-{k:05d}-of-{shards:05d}.parquet")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            d.shard(num_shards=shards, index=k, contiguous=True).to_parquet(path, batch_size=4)
    assert pq.ParquetFile(os.path.join(hub, "data", "train-00000-of-00003.parquet")).metadata.num_row_groups == 2
    for split in ("train", "test"):
        ds = datasets.load_dataset(hub, split=split, cache_dir=cache)
        dump(os.path.join(out, f"hub.{split}.expected.json"), rows(ds))
    ds = datasets.load_dataset(hub, split="train", cache_dir=cache)
    n = len(ds)
    dump(os.path.join(out, "hub.slice.expected.json"), rows(ds.select([i % n for i in range(3, 3 + 2 * n)])))
    print("DONE")


if __name__ == "__main__":
    main()
