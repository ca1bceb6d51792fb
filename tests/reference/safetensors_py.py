#!/usr/bin/env python3
"""Minimal, independent safetensors reader/writer (pure Python: struct + json + numpy + torch).

Used by the PyTorch reference (qwen3_ref.py) because the `safetensors` package is not
installed.  Written from the format description (https://github.com/huggingface/safetensors,
README "Format"), not from its code:

    [8 bytes]  N = header length, unsigned little-endian 64-bit
    [N bytes]  UTF-8 JSON object: {"__metadata__": {str: str} (optional),
                                   name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
               offsets are relative to the start of the byte buffer; the writer pads the
               header with spaces so the buffer starts 8-byte aligned
    [rest]     byte buffer, tensors little-endian, row-major, no gaps

Sharded checkpoints (HF convention): a directory with model.safetensors.index.json
{"metadata": {"total_size": bytes}, "weight_map": {name: "model-00001-of-00002.safetensors"}}.

Public functions
  load(path, upcast=False) -> {name: torch.Tensor}
      F32/F64/F16/BF16/I8/U8/I16/I32/I64/BOOL.  BF16 is decoded independently of torch's
      cast (uint16 << 16 reinterpreted as float32 bits) and returned as torch.bfloat16
      (exact), or float32 when upcast=True (F16 likewise).  Raises ValueError naming the file
      and tensor on any inconsistency (bad header, overlapping / out-of-range / non-contiguous
      offsets, size != prod(shape) * itemsize, unknown dtype).
  load_metadata(path) -> {str: str}
  save(path, tensors, dtype=None, metadata=None)
      dtype None keeps each tensor's dtype; "F32"/"F64"/"F16"/"BF16" converts the floating
      tensors (integers are kept).  float32 -> BF16 uses round-to-nearest-even done here with
      integer arithmetic (NaN -> 0x7FC0, as PyTorch's c10::round_to_nearest_even).
      Tensors are written sorted by name.
  load_dir(path, upcast=False) -> {name: tensor}: a .safetensors file, or a directory with
      model.safetensors.index.json (every shard is loaded, the weight map is checked both
      ways) or a single model.safetensors.
  save_sharded(dir, tensors, max_shard_bytes, dtype=None): writes
      model-0000i-of-0000n.safetensors + model.safetensors.index.json (a single
      model.safetensors, no index, when everything fits in one shard).
  f32_to_bf16_bits(np.float32 array) -> np.uint16 array; bf16_bits_to_f32(uint16) -> float32.
"""
import json
import os
import struct

import numpy as np
import torch

# safetensors dtype -> (numpy dtype used for the raw bytes, torch dtype returned)
_DTYPES = {
    "F64": (np.dtype("<f8"), torch.float64),
    "F32": (np.dtype("<f4"), torch.float32),
    "F16": (np.dtype("<f2"), torch.float16),
    "BF16": (np.dtype("<u2"), torch.bfloat16),
    "I64": (np.dtype("<i8"), torch.int64),
    "I32": (np.dtype("<i4"), torch.int32),
    "I16": (np.dtype("<i2"), torch.int16),
    "I8": (np.dtype("i1"), torch.int8),
    "U8": (np.dtype("u1"), torch.uint8),
    "BOOL": (np.dtype("?"), torch.bool),
}
_TORCH_TO_ST = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_FLOAT_ST = ("F64", "F32", "F16", "BF16")
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_MAX_HEADER = 100 * 1024 * 1024


def bf16_bits_to_f32(bits):
    """uint16 array of bfloat16 bit patterns -> float32 array (exact)."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bfloat16 bit patterns, round-to-nearest-even; NaN -> 0x7FC0."""
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16))
    out = (rounded & np.uint64(0xFFFF)).astype(np.uint16)
    out[np.isnan(x)] = np.uint16(0x7FC0)
    return out


def _read_header(path, f):
    raw = f.read(8)
    if len(raw) != 8:
        raise ValueError(f"{path}: file shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw)
    if n > _MAX_HEADER:
        raise ValueError(f"{path}: header length {n} is implausible (> {_MAX_HEADER})")
    hb = f.read(n)
    if len(hb) != n:
        raise ValueError(f"{path}: header truncated ({len(hb)} of {n} bytes)")
    try:
        header = json.loads(hb.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: header is not valid UTF-8 JSON: {e}")
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    return header, 8 + n


def load_metadata(path):
    with open(path, "rb") as f:
        header, _ = _read_header(path, f)
    return dict(header.get("__metadata__") or {})


def load(path, upcast=False):
    """Reads one .safetensors file; see the module docstring."""
    with open(path, "rb") as f:
        header, data_start = _read_header(path, f)
        buf = f.read()
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ValueError(f"{path}: tensor '{name}': entry is not an object")
        dt = info.get("dtype")
        if dt not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}': unsupported dtype {dt!r}")
        shape = info.get("shape")
        offs = info.get("data_offsets")
        if (not isinstance(shape, list) or any((not isinstance(s, int)) or s < 0 for s in shape)):
            raise ValueError(f"{path}: tensor '{name}': bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or any(not isinstance(o, int) for o in offs)
                or offs[0] < 0 or offs[1] < offs[0]):
            raise ValueError(f"{path}: tensor '{name}': bad data_offsets {offs!r}")
        entries.append((offs[0], offs[1], name, dt, shape))
    entries.sort()
    pos = 0
    out = {}
    for begin, end, name, dt, shape in entries:
        if begin != pos:
            raise ValueError(f"{path}: tensor '{name}': data_offsets [{begin}, {end}] leave a gap or "
                             f"overlap (previous tensor ended at {pos})")
        npdt, tdt = _DTYPES[dt]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * npdt.itemsize:
            raise ValueError(f"{path}: tensor '{name}': {end - begin} bytes for shape {shape} "
                             f"of {dt} (expected {count * npdt.itemsize})")
        if end > len(buf):
            raise ValueError(f"{path}: tensor '{name}': data_offsets end {end} beyond the buffer "
                             f"({len(buf)} bytes after the {data_start}-byte header)")
        arr = np.frombuffer(buf, dtype=npdt, count=count, offset=begin).reshape(shape)
        if dt == "BF16":
            f32 = bf16_bits_to_f32(arr)
            t = torch.from_numpy(f32.copy())
            if not upcast:
                t = t.to(torch.bfloat16)  # exact: every value is a bf16 value
        elif dt == "F16":
            t = torch.from_numpy(arr.astype(np.float32) if upcast else arr.astype(np.float16))
        else:
            t = torch.from_numpy(arr.astype(npdt.newbyteorder("=")).copy())
        out[name] = t
        pos = end
    if pos != len(buf):
        raise ValueError(f"{path}: {len(buf) - pos} trailing bytes after the last tensor")
    return out


def _to_bytes(name, t, dtype):
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    t = t.detach().cpu().contiguous()
    st = _TORCH_TO_ST.get(t.dtype)
    if st is None:
        raise ValueError(f"tensor '{name}': unsupported torch dtype {t.dtype}")
    if dtype is not None and st in _FLOAT_ST and dtype != st:
        st = dtype
    if st == "BF16":
        if t.dtype == torch.bfloat16:
            f32 = t.to(torch.float32).numpy()  # exact widening
        else:
            f32 = t.to(torch.float64).numpy().astype(np.float32) if t.dtype == torch.float64 \
                else t.to(torch.float32).numpy()
        arr = f32_to_bf16_bits(f32)
    else:
        npdt = _DTYPES[st][0]
        src = t.to(torch.float32) if t.dtype == torch.bfloat16 else t
        arr = src.numpy().astype(npdt)
    return st, list(t.shape), np.ascontiguousarray(arr).tobytes()


def save(path, tensors, dtype=None, metadata=None):
    """Writes {name: tensor} to path; see the module docstring."""
    if dtype is not None and dtype not in _FLOAT_ST:
        raise ValueError(f"save {path}: dtype must be one of {_FLOAT_ST}, got {dtype!r}")
    header = {}
    md = {"format": "pt"}
    if metadata:
        md.update({str(k): str(v) for k, v in metadata.items()})
    header["__metadata__"] = md
    blobs = []
    pos = 0
    for name in sorted(tensors):
        st, shape, b = _to_bytes(name, tensors[name], dtype)
        header[name] = {"dtype": st, "shape": shape, "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - (8 + len(hb)) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_dir(path, upcast=False):
    """A .safetensors file, or a checkpoint directory (sharded with an index, or single)."""
    if os.path.isfile(path):
        return load(path, upcast)
    idx = os.path.join(path, INDEX_NAME)
    if os.path.isfile(idx):
        with open(idx) as f:
            index = json.load(f)
        wm = index.get("weight_map")
        if not isinstance(wm, dict) or not wm:
            raise ValueError(f"{idx}: missing or empty 'weight_map'")
        out = {}
        for shard in sorted(set(wm.values())):
            sp = os.path.join(path, shard)
            if not os.path.isfile(sp):
                raise ValueError(f"{idx}: shard '{shard}' listed in weight_map does not exist")
            part = load(sp, upcast)
            for name in part:
                if wm.get(name) != shard:
                    raise ValueError(f"{sp}: tensor '{name}' is not mapped to this shard in {idx} "
                                     f"(weight_map says {wm.get(name)!r})")
                if name in out:
                    raise ValueError(f"{sp}: tensor '{name}' appears in two shards")
            out.update(part)
        missing = sorted(set(wm) - set(out))
        if missing:
            raise ValueError(f"{idx}: tensors in weight_map but in no shard: {missing[:5]}")
        return out
    single = os.path.join(path, SINGLE_NAME)
    if os.path.isfile(single):
        return load(single, upcast)
    raise ValueError(f"{path}: neither {INDEX_NAME} nor {SINGLE_NAME} found")


def save_sharded(directory, tensors, max_shard_bytes, dtype=None):
    """Greedy sharding in name order; returns the list of files written."""
    os.makedirs(directory, exist_ok=True)
    shards, cur, cur_bytes, total = [], {}, 0, 0
    for name in sorted(tensors):
        st, _, b = _to_bytes(name, tensors[name], dtype)
        n = len(b)
        total += n
        if cur and cur_bytes + n > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = {}, 0
        cur[name] = tensors[name]
        cur_bytes += n
    if cur:
        shards.append(cur)
    if len(shards) <= 1:
        save(os.path.join(directory, SINGLE_NAME), tensors, dtype)
        return [SINGLE_NAME]
    files, wm = [], {}
    for i, part in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save(os.path.join(directory, fn), part, dtype)
        files.append(fn)
        for name in part:
            wm[name] = fn
    with open(os.path.join(directory, INDEX_NAME), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2, sort_keys=True)
    return files


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 2:
        print("usage: safetensors_py.py FILE_OR_DIR   (lists tensors)", file=sys.stderr)
        sys.exit(2)
    for k, v in sorted(load_dir(sys.argv[1]).items()):
        print(f"{k}\t{str(v.dtype).replace('torch.', '')}\t{list(v.shape)}")
