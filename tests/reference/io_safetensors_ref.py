#!/usr/bin/env python3
"""Independent cross-check of twinkle's safetensors reader / writer.

The `safetensors` Python package is not available here, so this file implements the
format by hand from its specification (8-byte little-endian header length N, N bytes of
JSON {name: {dtype, shape, data_offsets}, "__metadata__"}, then the data buffer) with
struct + json + numpy, and uses torch only to convert bfloat16 (numpy has no bf16).

  .venv/bin/python io_safetensors_ref.py <io_xcheck_tool> <scratch dir>

1. Python writes files (all bf16 / f16 bit patterns, random f32 with specials, ints, a
   scalar, an empty tensor; header unpadded; buffer order != header order) and a sharded
   directory; the C++ tool dumps them; raw bytes and f32 conversions must match exactly.
2. The C++ tool writes a file and a sharded directory from fixed formulas; Python parses
   them by hand and checks the header layout (padding, coverage, metadata, index) and
   every value against the same formulas evaluated here.
3. A few corrupt files written here must make the tool fail with a message naming them.
Exit status 0 when everything matches.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "BF16": np.uint16, "F64": np.float64}
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def write_st(path, tensors, metadata=None, buffer_order=None, pad=False):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    order = buffer_order or [t[0] for t in tensors]
    by_name = {t[0]: t for t in tensors}
    offs, data, at = {}, b"", 0
    for n in order:
        raw = by_name[n][3]
        offs[n] = (at, at + len(raw))
        data += raw
        at += len(raw)
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    for n, dt, shape, _ in tensors:
        header[n] = {"dtype": dt, "shape": list(shape), "data_offsets": list(offs[n])}
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def read_st(path):
    """Hand parser: returns (header dict, data bytes, header length)."""
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n].decode("utf-8"))
    return header, b[8 + n:], n


def to_f32_bits(dt, raw):
    """Reference conversion to float32 bit patterns (uint32 array)."""
    if dt == "F32":
        return np.frombuffer(raw, dtype=np.uint32)
    if dt == "F16":
        return np.frombuffer(raw, dtype=np.float16).astype(np.float32).view(np.uint32)
    if dt == "BF16":
        i16 = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy())
        return i16.view(torch.bfloat16).to(torch.float32).numpy().view(np.uint32)
    if dt == "F64":  # PyTorch's Tensor.float(): round to nearest even, overflow to inf
        return torch.from_numpy(np.frombuffer(raw, dtype=np.float64).copy()).to(torch.float32).numpy().view(np.uint32)
    raise ValueError(dt)


def same_f32(want_bits, got_hex, what):
    got = np.frombuffer(bytes.fromhex(got_hex), dtype=np.uint32)
    if got.shape != want_bits.shape:
        check(False, f"{what}: size {got.shape} != {want_bits.shape}")
        return
    wf, gf = want_bits.view(np.float32), got.view(np.float32)
    nan = np.isnan(wf)
    check(np.array_equal(np.isnan(gf), nan), f"{what}: NaN positions differ")
    diff = np.nonzero((want_bits != got) & ~nan)[0]
    check(diff.size == 0, f"{what}: {diff.size} values differ, first at {diff[:5].tolist()}")


def tool(*args, expect_ok=True):
    p = subprocess.run([TOOL] + [str(a) for a in args], capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        check(False, f"tool {args} failed: {p.stderr.strip()}")
        return None
    if not expect_ok:
        return p
    return json.loads(p.stdout)


def f64_values(rng):
    """64 doubles that exercise the rounding to fp32: random magnitudes 1e-50..1e50 (fp32
    subnormals, overflow to inf), exact ties between two fp32 values (even and odd), 0, -0, inf,
    nan, the largest finite fp32 and the value just past its rounding boundary."""
    v = rng.standard_normal(64) * 10.0 ** rng.uniform(-50, 50, 64)
    one_ulp = 2.0 ** -23
    v[:10] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0 + one_ulp / 2, 1.0 + 1.5 * one_ulp,
              float(np.finfo(np.float32).max), float(np.finfo(np.float32).max) * (1 + 2.0 ** -25), 1e-46]
    return v


def python_tensors():
    rng = np.random.default_rng(1234)
    f32 = rng.standard_normal(97).astype(np.float32) * 1e3
    f32[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40]  # incl. a subnormal
    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    return [
        ("w.f32", "F32", (97,), f32.tobytes()),
        ("w.bf16_all", "BF16", (256, 256), all16.tobytes()),
        ("w.f16_all", "F16", (65536,), all16.tobytes()),
        ("w.bf16_rand", "BF16", (3, 5, 7), rng.integers(0, 65536, 105, dtype=np.uint16).tobytes()),
        ("ids.i32", "I32", (2, 9), rng.integers(-2**31, 2**31, 18, dtype=np.int64).astype(np.int32).tobytes()),
        ("ids.i64", "I64", (4,), np.array([-2**63, 2**63 - 1, 0, 12345678901234], dtype=np.int64).tobytes()),
        ("s.scalar", "F16", (), np.array([1.5], dtype=np.float16).tobytes()),
        ("z.empty", "F32", (0, 7), b""),
        ("w.f64", "F64", (4, 16), f64_values(rng).tobytes()),
        ("uni.\u00e9\u4e2d", "F32", (1,), np.array([3.0], dtype=np.float32).tobytes()),
    ]


def check_dump(dump, tensors, what):
    got = {t["name"]: t for t in dump["tensors"]}
    check(sorted(got) == sorted(t[0] for t in tensors), f"{what}: names {sorted(got)}")
    for n, dt, shape, raw in tensors:
        if n not in got:
            continue
        g = got[n]
        check(g["dtype"] == dt, f"{what}/{n}: dtype {g['dtype']} != {dt}")
        check(tuple(g["shape"]) == tuple(shape), f"{what}/{n}: shape {g['shape']} != {shape}")
        check(g["raw"] == raw.hex(), f"{what}/{n}: raw bytes differ")
        if dt in ("F32", "F16", "BF16", "F64"):
            same_f32(to_f32_bits(dt, raw), g["f32"], f"{what}/{n} load_f32")


def part1_python_writes(work):
    ts = python_tensors()
    p = os.path.join(work, "py.safetensors")
    order = [t[0] for t in ts][::-1]  # buffer order reversed w.r.t. header order
    write_st(p, ts, metadata={"format": "pt", "by": "python"}, buffer_order=order)
    d = tool("dump", p)
    if d:
        check(d["metadata"] == {"format": "pt", "by": "python"}, f"metadata {d['metadata']}")
        # names() is the on-disk order (zero-size tensors sort first at equal offsets).
        check([n for n in d["order"] if n != "z.empty"] == [n for n in order if n != "z.empty"], f"order {d['order']}")
        check_dump(d, ts, "python file")
    # Narrow against numpy slicing of the reference conversion.
    raw = dict((t[0], t) for t in ts)["w.bf16_rand"][3]
    full = to_f32_bits("BF16", raw).reshape(3, 5, 7)
    for dim, start, ln in [(0, 1, 2), (1, 0, 5), (1, 3, 2), (2, 2, 4), (-1, 6, 1)]:
        n = tool("narrow", p, "w.bf16_rand", dim, start, ln)
        if n:
            sl = [slice(None)] * 3
            sl[dim] = slice(start, start + ln)
            want = np.ascontiguousarray(full[tuple(sl)])
            check(tuple(n["shape"]) == want.shape, f"narrow {dim},{start},{ln}: shape {n['shape']}")
            same_f32(want.reshape(-1), n["f32"], f"narrow {dim},{start},{ln}")
    # Sharded directory written by python, as transformers lays it out.
    dd = os.path.join(work, "pydir")
    os.makedirs(dd)
    shards = [ts[:3], ts[3:]]
    wm = {}
    for i, part in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_st(os.path.join(dd, fn), part, metadata={"format": "pt"}, pad=True)
        wm.update({t[0]: fn for t in part})
    with open(os.path.join(dd, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(len(t[3]) for t in ts)}, "weight_map": wm}, f, indent=2)
    d = tool("dump-dir", dd)
    if d:
        check(d["has_weights"] is True, "pydir has_weights")
        check(d["files"] == wm, "pydir file_of differs from weight_map")
        check_dump(d, ts, "python dir")


# ---- the C++ writer, checked against formulas evaluated here ------------------------------

SPECS = [("a.f32", "F32", (3, 5)), ("b.bf16", "BF16", (4, 7)), ("c.f16", "F16", (11,)), ("d.i32", "I32", (2, 3)),
         ("e.i64", "I64", (5,)), ("f.scalar", "F32", ()), ("g.empty", "F16", (0, 4))]


def expected_raw(k, dt, shape):
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n, dtype=np.int64)
    if dt == "F32":
        return (((i * 7 + k * 13) % 101 - 50) / 8.0).astype(np.float32).tobytes()
    if dt == "BF16":
        v = (((i * 5 + k) % 61 - 30) / 4.0).astype(np.float32)
        return (v.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # exact: <= 8 significant bits
    if dt == "F16":
        return (((i * 3 + k) % 201 - 100) / 16.0).astype(np.float16).tobytes()
    if dt == "I32":
        return (i * i - 1000 * k).astype(np.int32).tobytes()
    if dt == "I64":
        return (i * 1000000000007 - k).astype(np.int64).tobytes()
    raise ValueError(dt)


def check_cpp_file(path, specs, what, metadata):
    header, data, n = read_st(path)
    check(n % 8 == 0, f"{what}: header length {n} not a multiple of 8")
    check(header.get("__metadata__") == metadata, f"{what}: metadata {header.get('__metadata__')}")
    spans = []
    for name, dt, shape in specs:
        e = header.get(name)
        if e is None:
            check(False, f"{what}: tensor {name} missing")
            continue
        check(e["dtype"] == dt, f"{what}/{name}: dtype {e['dtype']}")
        check(tuple(e["shape"]) == tuple(shape), f"{what}/{name}: shape {e['shape']}")
        b, en = e["data_offsets"]
        spans.append((b, en))
        k = [s[0] for s in SPECS].index(name)
        check(data[b:en] == expected_raw(k, dt, shape), f"{what}/{name}: values differ")
    check(set(header) - {"__metadata__"} == {s[0] for s in specs}, f"{what}: extra tensors {sorted(header)}")
    at = 0
    for b, en in sorted(spans):
        check(b == at, f"{what}: data buffer not contiguous at {at} (next span {b})")
        at = en
    check(at == len(data), f"{what}: data buffer {len(data)} bytes, tensors end at {at}")


def part2_cpp_writes(work):
    p = os.path.join(work, "cpp.safetensors")
    r = subprocess.run([TOOL, "write", p], capture_output=True, text=True)
    check(r.returncode == 0, f"tool write failed: {r.stderr}")
    if r.returncode == 0:
        check_cpp_file(p, SPECS, "cpp file", {"format": "pt", "writer": "twinkle"})
        check(not [f for f in os.listdir(work) if ".tmp." in f], "temporary file left behind")
    dd = os.path.join(work, "cppdir")
    r = subprocess.run([TOOL, "write-dir", dd, "100"], capture_output=True, text=True)
    check(r.returncode == 0, f"tool write-dir failed: {r.stderr}")
    if r.returncode != 0:
        return
    with open(os.path.join(dd, "model.safetensors.index.json")) as f:
        index = json.load(f)
    wm = index["weight_map"]
    check(sorted(wm) == sorted(s[0] for s in SPECS), f"weight_map keys {sorted(wm)}")
    total = sum(len(expected_raw(k, dt, sh)) for k, (_, dt, sh) in enumerate(SPECS))
    check(index["metadata"]["total_size"] == total, f"total_size {index['metadata']['total_size']} != {total}")
    files = sorted(set(wm.values()))
    nshard = len(files)
    check(nshard > 1, "expected several shards at 100 bytes")
    check(files == [f"model-{i:05d}-of-{nshard:05d}.safetensors" for i in range(1, nshard + 1)], f"shard names {files}")
    for fn in files:
        specs = [s for s in SPECS if wm[s[0]] == fn]
        check_cpp_file(os.path.join(dd, fn), specs, fn, {"format": "pt"})
        size = sum(len(expected_raw([x[0] for x in SPECS].index(s[0]), s[1], s[2])) for s in specs)
        check(size <= 100 or len(specs) == 1, f"{fn}: {size} bytes in {len(specs)} tensors exceeds the cap")
    check(sorted(os.listdir(dd)) == files + ["model.safetensors.index.json"], f"dir content {os.listdir(dd)}")


def part3_corrupt(work):
    f = [("a", "F32", (2,), b"\0" * 8)]
    cases = {
        "hole.safetensors": (lambda p: write_st(p, f + [("b", "F32", (1,), b"\0" * 4)]) or _poke(p, "b", [12, 16]), "hole"),
        "trail.safetensors": (lambda p: (write_st(p, f), open(p, "ab").write(b"junk")), "trailing"),
        "dtype.safetensors": (lambda p: write_st(p, [("a", "F8_E4M3", (1,), b"\0")]), "'dtype'"),
        "short.safetensors": (lambda p: open(p, "wb").write(b"\x10\0\0"), "shorter"),
    }
    for fn, (make, needle) in cases.items():
        p = os.path.join(work, fn)
        make(p)
        r = tool("dump", p, expect_ok=False)
        check(r.returncode != 0 and needle in r.stderr and p in r.stderr, f"{fn}: rc {r.returncode} stderr {r.stderr!r}")


def _poke(path, name, offsets):
    header, data, _ = read_st(path)
    header[name]["data_offsets"] = offsets
    data = data + b"\0" * (offsets[1] - len(data))
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


if __name__ == "__main__":
    TOOL = sys.argv[1]
    work = sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    part1_python_writes(work)
    part2_cpp_writes(work)
    part3_corrupt(work)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    print("io_safetensors_ref: all cross-checks passed")
