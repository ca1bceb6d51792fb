#!/usr/bin/env python3
"""Communication volume of one training step, counted at the MPI layer, against Megatron's formulas.

bench/layout_bench is run under mpirun with tests/dist/mpi_count.cpp (libtwinkle_mpi_count.so)
preloaded: a PMPI interposition library that counts, per communicator and MPI call, the bytes
of every MPI call made between MPI_Pcontrol(1) and MPI_Pcontrol(0) (layout_bench brackets one
measured training step, after a warm-up step). It knows nothing of twinkle's process groups:
communicators are identified by their sets of world ranks, and this script attributes them to
tp / cp / dp / dp-cp / pp / embedding / world groups with its own formulation of Megatron's rank
layout (order tp-cp-ep-dp-pp, ep = 1: rank = tp + t * (cp + c * (dp + d * pp))).

Expected bytes per rank and step are written here from Megatron-LM's communication pattern
(bench/README.md, "Communication volume: expected figures", derives each line). Volumes that
land on the same set of ranks (e.g. tp and world when tp is the only dimension) are added.
Every (rank set, MPI call kind) must match EXACTLY, and traffic on a rank set or call kind
that no formula predicts fails, so one extra all-reduce of the gradients (or any traffic that
bypasses twinkle's ProcessGroup) is caught.

usage: check_comm_volume.py --build BUILD --mpirun MPIRUN --np N [--tp T] [--pp P] [--dp D]
                            [--cp C [--cp-comm-type p2p|a2a]] [--sp] [--no-distopt]
                            [--bench PATH --device cuda]

--device cuda runs the model on the CUDA device; with --bench build/tests/layout_bench_cuda_emu (the
host emulation of CUDA, tests/cuda.cmake) the CUDA process groups stage their device buffers through
the host MPI groups, so the MPI layer must see the same bytes as on the CPU.
"""
import argparse
import collections
import glob
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

# bench/layout_bench.cpp --config tiny (a Qwen3 shape; tied embeddings, no attention bias)
CFG = dict(vocab=1001, hidden=64, inter=96, layers=4, heads=4, kv_heads=2, head_dim=32, tied=True, bias=False)
ROWS = 8          # --rows
MBS = 1           # --mbs
F32, F64 = 4, 8   # bytes
VOCAB_DIVISIBLE_BY = 128  # Megatron's --make-vocab-size-divisible-by default
# Where twinkle moves more than Megatron / TransformerEngine by design, the extra is a named term:
# the ring attention's backward starts from the rank's own K/V block (TE's from the block its forward
# ended with), so each block's dK/dV takes cp hops instead of cp - 1 (parallel/ring_attention.h):
# + 2·Bkv sent and received per attention layer and micro-batch. 1 = counted; 0 = TE's schedule.
RING_BACKWARD_STARTS_AT_OWN_BLOCK = 1


class MT64:
    """std::mt19937_64 (C++ <random>): layout_bench's rows come from std::mt19937_64(5)."""
    N, M = 312, 156

    def __init__(self, seed):
        m = (1 << 64) - 1
        self.mt = [seed & m]
        for i in range(1, self.N):
            self.mt.append((6364136223846793005 * (self.mt[-1] ^ (self.mt[-1] >> 62)) + i) & m)
        self.i = self.N

    def __call__(self):
        if self.i >= self.N:
            mt = self.mt
            for k in range(self.N):
                y = (mt[k] & 0xFFFFFFFF80000000) | (mt[(k + 1) % self.N] & 0x7FFFFFFF)
                v = mt[(k + self.M) % self.N] ^ (y >> 1)
                mt[k] = v ^ 0xB5026F5AA96619E9 if y & 1 else v
            self.i = 0
        x = self.mt[self.i]
        self.i += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        x ^= x >> 43
        return x & ((1 << 64) - 1)


def row_lengths(n):
    """Lengths of layout_bench's make_rows(n, vocab): L = 48 + g() % 80, then L token draws."""
    g = MT64(5)
    out = []
    for _ in range(n):
        L = 48 + g() % 80
        for _ in range(L):
            g()
        out.append(L)
    return out


def groups(t, d, p, c=1):
    """Megatron's rank sets (order tp-cp-ep-dp-pp, ep = 1: rank = tp + t * (cp + c * (dp + d * pp))) as
    {name: {rank: frozenset}}, and each rank's (tp, cp, dp, pp) coordinates. dp-cp is the data-parallel group
    with context parallelism (Megatron's get_data_parallel_group(with_context_parallel=True)): the ranks that
    share the tp and pp coordinates, over which the dense gradients are reduced."""
    W = t * c * d * p
    coord = {r: (r % t, (r // t) % c, (r // (t * c)) % d, r // (t * c * d)) for r in range(W)}
    rank = lambda i, k, j, s: i + t * (k + c * (j + d * s))  # noqa: E731
    g = {}
    for r, (i, k, j, s) in coord.items():
        g.setdefault("tp", {})[r] = frozenset(rank(x, k, j, s) for x in range(t))
        g.setdefault("cp", {})[r] = frozenset(rank(i, x, j, s) for x in range(c))
        g.setdefault("dp", {})[r] = frozenset(rank(i, k, x, s) for x in range(d))
        g.setdefault("dp-cp", {})[r] = frozenset(rank(i, y, x, s) for x in range(d) for y in range(c))
        g.setdefault("pp", {})[r] = frozenset(rank(i, k, j, x) for x in range(p))
        g.setdefault("embedding", {})[r] = frozenset({rank(i, k, j, 0), rank(i, k, j, p - 1)})
        g.setdefault("world", {})[r] = frozenset(range(W))
    return coord, g


def stage_layers(p, split):
    """Decoder layers per pipeline stage. even: Megatron-core's default (the first layers % p
    stages take one more). balanced: twinkle's default, written here by brute force over every
    composition (parallel/pipeline_split.h uses dynamic programming): minimise the largest stage
    cost, a layer costing its forward matmul FLOPs per token and the last stage also the lm head's
    2 * vocab * hidden; ties go to the smaller sum of squared stage costs, then to the composition
    with the larger counts first."""
    c = CFG
    n = c["layers"]
    if split == "even":
        return [n // p + (1 if s < n % p else 0) for s in range(p)]
    h, D, I = c["hidden"], c["head_dim"], c["inter"]
    q, kv = c["heads"] * D, c["kv_heads"] * D
    layer = 2 * h * (q + 2 * kv) + 2 * q * h + 6 * h * I
    head = 2 * c["vocab"] * h
    best = None
    for cuts in itertools.combinations(range(1, n), p - 1):
        counts = [b - a for a, b in zip((0,) + cuts, cuts + (n,))]
        costs = [k * layer + (head if s == p - 1 else 0) for s, k in enumerate(counts)]
        key = (max(costs), sum(x * x for x in costs), [-k for k in counts])
        if best is None or key < best[0]:
            best = (key, counts)
    return best[1]


def expected(t, d, p, sp, distopt, split="balanced", v=1, cp=1, cp_comm="p2p"):
    """{rank: {(rank set, MPI call): bytes}} for one step, from Megatron's formulas. v > 1: Megatron's
    interleaved layout, chunk k of pipeline rank r holding virtual stage k * p + r. cp > 1: context
    parallelism, cp_comm "p2p" (TransformerEngine's AttnFuncWithCPAndKVP2P, the ring) or "a2a"
    (AttnFuncWithCPAndQKVOA2A, Ulysses)."""
    c = CFG
    h, D, I = c["hidden"], c["head_dim"], c["inter"]
    q, kv = c["heads"] * D, c["kv_heads"] * D
    vlayers = stage_layers(p * v, split)  # per virtual stage
    layers = [sum(vlayers[k * p + s] for k in range(v)) for s in range(p)]
    Vp = math.ceil(c["vocab"] / (VOCAB_DIVISIBLE_BY * t)) * VOCAB_DIVISIBLE_BY * t
    Vl = Vp // t
    lengths = row_lengths(ROWS)
    coord, g = groups(t, d, p, cp)
    dc = d * cp  # the dp-cp group: the dense gradients' and the loss's reductions
    out = {}
    for r, (ti, ci, di, pi) in coord.items():
        e = collections.Counter()
        first, last = pi == 0, pi == p - 1
        L = layers[pi]

        def add(group, call, nbytes):
            if len(g[group][r]) > 1 and nbytes:
                e[(g[group][r], call)] += nbytes

        mine = lengths[di * ROWS // d:(di + 1) * ROWS // d]
        for s in range(0, len(mine), MBS):
            rows = mine[s:s + MBS]
            if cp > 1:
                # cp: Megatron needs s % (2·cp) == 0 (s % (2·cp·tp) under SP: each rank's s/cp divides by
                # tp) and splits every sequence into 2·cp chunks, rank k keeping chunks k and 2·cp-1-k
                # (get_batch_on_this_cp_rank); the rows, padded to the longest, are right-padded to that
                # multiple, so a rank holds T = b·s/cp tokens
                m = 2 * cp * (t if sp and t > 1 else 1)
                T = len(rows) * (math.ceil(max(rows) / m) * m) // cp
            else:
                T = len(rows) * max(rows)           # padded to the longest row (b * s tokens)
            if sp and t > 1:
                T = math.ceil(T / t) * t           # SP: the sequence divides by tp
            Tl = T // t if sp and t > 1 else T     # rows of the hidden state a rank holds
            act = T * h * F32                      # one [s, b, h] activation, fp32
            if t > 1:
                # Megatron: VocabParallelEmbedding all-reduces its output (SP: reduce-scatters it,
                # backward all-gathers); per transformer layer 2 all-reduces forward (after the
                # row-parallel o_proj and down_proj) + 2 backward (input grads of the column-parallel
                # qkv and gate/up) - with SP 2 all-gathers + 2 reduce-scatters forward, 2 + 2 backward
                # (Megatron re-gathers the input in backward for the weight gradient; twinkle keeps
                # the gathered input, so those 2 all-gathers are not expected); the output layer
                # all-gathers (SP) its input forward and all-reduces / reduce-scatters its input
                # gradient; vocab-parallel cross entropy all-reduces 3 fp32 values per token
                # (logit max, target logit, sum of exp).
                if sp:
                    if first:
                        add("tp", "Reduce_scatter_block", act)
                        add("tp", "Allgather", act)
                    add("tp", "Allgather", 4 * L * act)
                    add("tp", "Reduce_scatter_block", 4 * L * act)
                    if last:
                        add("tp", "Allgather", act)
                        add("tp", "Reduce_scatter_block", act)
                else:
                    if first:
                        add("tp", "Allreduce", act)
                    add("tp", "Allreduce", 4 * L * act)
                    if last:
                        add("tp", "Allreduce", act)
                if last:
                    add("tp", "Allreduce", 3 * T * F32)
            if p > 1:
                # Megatron 1F1B: each micro-batch's activation goes to the next stage and its
                # gradient back ([s/t, b, h] with SP: scatter-gather of the pipeline tensors);
                # interleaved: once per chunk boundary, rank p-1's chunk k sending to rank 0's
                # chunk k+1 (every chunk but the model's last sends forward and receives backward,
                # every chunk but the model's first receives forward and sends backward)
                fwd_out = v - (1 if last else 0)
                fwd_in = v - (1 if first else 0)
                add("pp", "Send", (fwd_out + fwd_in) * Tl * h * F32)
                add("pp", "Recv", (fwd_out + fwd_in) * Tl * h * F32)
            if cp > 1:
                # the attention of every layer of the stage on the rank's T tokens (all of them under SP:
                # the attention follows the sequence all-gather) and its tp heads
                Bkv = T * (c["kv_heads"] // t) * D * F32   # this rank's K (or V) block, fp32
                Bq = T * (c["heads"] // t) * D * F32
                if cp_comm == "p2p":
                    # TE's ring: forward, cp-1 hops of the concatenated K/V block (2·Bkv) to cp rank k+1
                    # while the block held is computed; backward (reversed ring, starting from the block
                    # the forward ended with), step 0 sends K/V, steps 1..cp-2 K/V with the dK/dV
                    # accumulated so far, step cp-1 dK/dV only, which lands on its owner: (cp-1)·4·Bkv.
                    # Each hop is an isend + irecv of the same size, so Send = Recv.
                    hop = (cp - 1) * 2 * Bkv + (cp - 1) * 4 * Bkv
                    # twinkle (named deviation, parallel/ring_attention.h): the backward starts from the
                    # rank's own K/V (the forward keeps only the local k, v, not the block it ended
                    # with), so every block's dK/dV makes cp hops, the last one home: one more 2·Bkv
                    hop += RING_BACKWARD_STARTS_AT_OWN_BLOCK * 2 * Bkv
                    add("cp", "Send", L * hop)
                    add("cp", "Recv", L * hop)
                else:
                    # Ulysses: all-to-alls of q, k, v to head shards before the attention and of its
                    # output back; backward of dout, then dq, dk, dv. An all-to-all's bytes at the MPI
                    # layer are its whole send buffer (the rank's own block included): 2·Bq + 2·Bkv
                    # forward and again backward. (twinkle's ProcessGroup has only the v-form: equal
                    # counts through MPI_Alltoallv.)
                    add("cp", "Alltoallv", L * 2 * (2 * Bq + 2 * Bkv))
        # parameters this rank holds (Megatron sharding; vocab padded to 128 * tp)
        layer = [h * q // t, h * kv // t, h * kv // t, q * h // t, h * I // t, h * I // t, I * h // t, h, h, D, D]
        if c["bias"]:
            layer += [q // t, kv // t, kv // t, h]
        sizes = L * layer
        if first:
            sizes.append(Vl * h)
        if last:
            sizes.append(h)
            if not c["tied"] or p > 1:
                sizes.append(Vl * h)  # lm_head (the tied copy of the embedding on the last stage)
        # The flat grad / param buffer that the data-parallel collectives move: each parameter
        # starts 16-element (64-byte) aligned and the buffer is padded to a multiple of 64 * d so
        # that it divides into d equal shards (Megatron: 64-element starts, buckets padded to
        # lcm(d, 128) - the same rule with other constants; bench/README.md); d is the size of the
        # group the gradients are reduced over, dp-cp (a cp rank's gradients cover its own tokens).
        n = sum(math.ceil(x / 16) * 16 for x in sizes)
        n = math.ceil(n / (64 * dc)) * 64 * dc
        if t > 1:
            # finalize_model_grads / _allreduce_layernorm_grads: grads of parameters that are
            # replicated across tp but see only part of the work - q_layernorm / k_layernorm
            # always (each tp rank normalises its own heads), and with SP every parameter marked
            # sequence_parallel (input/post-attention layernorm, the final norm, o_proj bias).
            ln = L * 2 * D
            if sp:
                ln += L * 2 * h + (L * h if c["bias"] else 0) + (h if last else 0)
            add("tp", "Allreduce", ln * F32)
        if p > 1 and c["tied"] and (first or last):
            # _allreduce_word_embedding_grads: the word embedding grad between first and last stage
            add("embedding", "Allreduce", Vl * h * F32)
        if p > 1:
            # twinkle: the step's loss (fp64) broadcast from the last stage to its pipeline
            add("pp", "Bcast", F64)
        if dc > 1:
            # over dp-cp (Megatron's DistributedDataParallel reduces over dp_cp_group / intra_dp_cp_group,
            # the distributed optimizer shards over it; finalize_model_grads all-reduces num_tokens over
            # dp_cp_group)
            if distopt:
                # distributed optimizer: reduce-scatter of the grad buffer, all-gather of the params
                add("dp-cp", "Reduce_scatter_block", n * F32)
                add("dp-cp", "Allgather", n * F32)
            else:
                add("dp-cp", "Allreduce", n * F32)  # DDP: all-reduce of the grad buffer
            # loss sum and label-token count of the step (2 fp64), then the global token count
            # (1 fp64) that scales the per-token loss gradient; twinkle adds the step's sequences and
            # their real tokens (2 int64) to that count, for MFU's global mean sequence length
            # (Megatron's MFU uses the fixed --seq-length and sends nothing for it), and the number of
            # ranks that refused their micro-batches (1 int64: a bad row on one replica is raised on
            # every rank, twinkle/dist/agreed_error.h; Megatron raises it on that rank alone)
            add("dp-cp", "Allreduce", 3 * F64 + 3 * 8)
        # grad norm: the dense and the expert squared norms (2 fp64, the expert one 0 on a dense
        # model or stage) summed over every rank (Megatron: model-parallel group, plus
        # data-parallel with the distributed optimizer)
        add("world", "Allreduce", 2 * F64)
        if t * p > 1:
            # twinkle: the ranks that refused their micro-batches (1 int64) once more over the world,
            # when it is larger than dp-cp: a replica's tp / pp ranks may be given different rows
            add("world", "Allreduce", 8)
        out[r] = e
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--sp", action="store_true")
    ap.add_argument("--no-distopt", action="store_true")
    ap.add_argument("--split", default="balanced", choices=["balanced", "even"])
    ap.add_argument("--vpp", type=int, default=1, help="virtual pipeline stages (layout_bench --vpp)")
    ap.add_argument("--cp", type=int, default=1, help="context-parallel size (layout_bench --cp)")
    ap.add_argument("--cp-comm-type", default="p2p", choices=["p2p", "a2a"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="layout_bench --device")
    ap.add_argument("--bench", default=None, help="the layout_bench binary (default BUILD/bench/layout_bench)")
    a = ap.parse_args()
    if a.np != a.tp * a.pp * a.dp * a.cp:
        print(f"FAILED: --np {a.np} is not tp*pp*dp*cp = {a.tp * a.pp * a.dp * a.cp}")
        return 2
    lib = os.path.abspath(os.path.join(a.build, "tests", "libtwinkle_mpi_count.so"))
    bench = os.path.abspath(a.bench or os.path.join(a.build, "bench", "layout_bench"))
    tmp = tempfile.mkdtemp(prefix="twinkle-mpicount-")
    try:
        flags = ["--tp", str(a.tp), "--pp", str(a.pp), "--dp", str(a.dp), "--rows", str(ROWS), "--mbs", str(MBS),
                 "--steps", "1", "--config", "tiny", "--no-baseline", "--split", a.split]
        if a.sp:
            flags.append("--sp")
        if a.vpp > 1:
            flags += ["--vpp", str(a.vpp)]
        if a.no_distopt:
            flags.append("--no-distopt")
        if a.cp > 1:
            flags += ["--cp", str(a.cp), "--cp-comm-type", a.cp_comm_type]
        if a.device != "cpu":
            flags += ["--device", a.device]
        # the emulated device program runs under ASan, whose runtime must otherwise come first in the preload list
        env = ["-x", "ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0"] if a.device != "cpu" else []
        cmd = [a.mpirun, "-np", str(a.np), "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "--mca",
               "mpi_yield_when_idle", "1", "-x", "OMP_NUM_THREADS=1", "-x", f"LD_PRELOAD={lib}", "-x",
               f"TWINKLE_MPI_COUNT_DIR={tmp}"] + env + [bench] + flags
        print("+", " ".join(cmd), flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        print(r.stdout[-4000:])
        if r.returncode != 0:
            print(f"FAILED: layout_bench exited {r.returncode}")
            return 1
        files = sorted(glob.glob(os.path.join(tmp, "rank*.json")))
        if len(files) != a.np:
            print(f"FAILED: {len(files)} count files for {a.np} ranks (is the PMPI library preloaded?)")
            return 1
        want = expected(a.tp, a.dp, a.pp, a.sp, not a.no_distopt, a.split, a.vpp, a.cp, a.cp_comm_type)
        _, g = groups(a.tp, a.dp, a.pp, a.cp)
        names = {}
        for name, per in g.items():
            for s in per.values():
                names.setdefault(s, set()).add(name)
        bad = 0
        for fn in files:
            with open(fn) as f:
                rep = json.load(f)
            r_ = rep["world_rank"]
            got = collections.Counter()
            for cm in rep["comms"]:
                s = frozenset(cm["ranks"])
                for op, st in cm["ops"].items():
                    if len(s) > 1 or st["bytes"]:
                        got[(s, op)] += st["bytes"]
            keys = sorted(set(got) | set(want[r_]), key=lambda k: (sorted(k[0]), k[1]))
            for k in keys:
                gname = "/".join(sorted(names.get(k[0], {"?"})))
                ok = got[k] == want[r_][k]
                if not ok:
                    bad += 1
                print(f"rank {r_}: {gname:16s} {sorted(k[0])!s:24s} {k[1]:22s} counted {got[k]:>10d} "
                      f"expected {want[r_][k]:>10d} {'ok' if ok else 'MISMATCH'}")
        if bad:
            print(f"FAILED: {bad} (rank, group, call) volumes differ from Megatron's formulas")
            return 1
        print(f"comm volume: all {a.np} ranks match Megatron's formulas at the MPI layer")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
