#!/usr/bin/env python3
"""Runs tests/dist/mpi_count_selftest on 2 ranks with libtwinkle_mpi_count.so preloaded and checks
its report: every call the self-test makes (blocking and non-blocking collectives, point-to-point
variants, persistent requests, one Put) is counted with the bytes written below by hand from the
self-test's arguments (mpi_count.cpp's per-call rules), and nothing else is.

usage: check_mpi_count.py --build BUILD --mpirun MPIRUN
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

F, I, D = 4, 4, 8
# kind -> (calls, bytes), the same on both ranks (comm = world = ranks {0, 1})
EXPECTED = {
    "Allreduce": (2, 3 * F + 10 * F),              # blocking 3 floats + Iallreduce 10
    "Bcast": (1, 7 * I),
    "Allgather": (1, 3 * D * 2),                   # recvcount * comm size
    "Allgatherv": (1, (2 + 5) * F),
    "Reduce_scatter_block": (1, 4 * F * 2),
    "Reduce_scatter": (1, (1 + 3) * F),
    "Alltoall": (1, 2 * I * 2),
    "Alltoallv": (1, (1 + 2) * I),
    "Alltoallw": (1, (1 + 1) * I),
    "Reduce": (1, 6 * F),
    "Gather": (1, 2 * F),
    "Gatherv": (1, 3 * F),
    "Scatter": (1, 3 * F),
    "Scatterv": (1, 2 * F),
    "Scan": (1, 5 * I),
    "Exscan": (1, 4 * I),
    # Isend 5 f, Issend 4 i, Irsend 2 d, Ibsend 3 i, persistent 3 f started twice, Sendrecv_replace 6 i
    "Send": (7, 5 * F + 4 * I + 2 * D + 3 * I + 2 * 3 * F + 6 * I),
    "Recv": (7, 5 * F + 4 * I + 2 * D + 3 * I + 2 * 3 * F + 6 * I),
    "Uncounted Put": (1, 0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--mpirun", required=True)
    a = ap.parse_args()
    lib = os.path.abspath(os.path.join(a.build, "tests", "libtwinkle_mpi_count.so"))
    prog = os.path.abspath(os.path.join(a.build, "tests", "mpi_count_selftest"))
    for p in (lib, prog):
        if not os.path.exists(p):
            sys.exit(f"FAIL: {p} missing (build the twinkle_mpi_count and mpi_count_selftest targets)")
    failures = 0
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, LD_PRELOAD=lib, TWINKLE_MPI_COUNT_DIR=out, OMP_NUM_THREADS="1")
        cmd = [a.mpirun, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "--mca",
               "mpi_yield_when_idle", "1", "-x", "LD_PRELOAD", "-x", "TWINKLE_MPI_COUNT_DIR", "-np", "2", prog]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        print(p.stdout.decode("utf-8", "replace"), end="")
        if p.returncode != 0:
            sys.exit(f"FAIL: mpi_count_selftest exited {p.returncode}")
        for rank in (0, 1):
            path = os.path.join(out, f"rank{rank}.json")
            if not os.path.exists(path):
                sys.exit(f"FAIL: {path} not written (the library was not preloaded?)")
            with open(path) as f:
                rep = json.load(f)
            comms = [c for c in rep["comms"] if c["ops"]]
            if len(comms) != 1 or sorted(comms[0]["ranks"]) != [0, 1]:
                print(f"MISMATCH rank {rank}: traffic on {[c['ranks'] for c in comms]}, expected only the world [0, 1]")
                failures += 1
                continue
            got = {k: (v["calls"], v["bytes"]) for k, v in comms[0]["ops"].items()}
            for kind in sorted(set(got) | set(EXPECTED)):
                if got.get(kind) != EXPECTED.get(kind):
                    print(f"MISMATCH rank {rank} {kind}: counted {got.get(kind)} expected {EXPECTED.get(kind)}")
                    failures += 1
    print(f"check_mpi_count: {len(EXPECTED)} call kinds on 2 ranks, {failures} mismatches")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
