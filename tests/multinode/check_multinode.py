#!/usr/bin/env python3
"""A recipe on simulated nodes equals the same recipe on one node, step for step and byte for byte.

The nodes are tests/multinode/nodes.sh's network namespaces (fixture multinode_nodes*_up): each
its own network stack, hostname and address, so OpenMPI places ranks per node and carries every
message between nodes over TCP (btl tcp on eth0), inside a node over shared memory. twinkle-run
starts the job from node n0 with the fixture's hostfile, its rsh agent (instead of ssh) and the
interface selection:

  A  twinkle-run --nnodes NN --nproc_per_node NP --hostfile H --rsh-agent AGENT --iface eth0 RECIPE ...
     run inside n0 (ranks 0..NP-1 on n0, the next NP on n1, ...: Megatron's rank order puts tp
     and dp inside a node and pp across the nodes for the cookbook's meshes);
  B  twinkle-run --nproc_per_node NN*NP RECIPE ... on this machine (one node, the independent run).

Checks: the same steps in both metrics.jsonl, each with the same loss and grad norm (and for
MoE the expert grad norm, lm / aux loss and expert loads) bit for bit; every file of the final
checkpoint directory (config, safetensors, tokenizer files) byte-identical. Prints the bytes
that crossed the nodes' links (eth0 tx of every node) per step.

With --reference srun, B is instead the README's Slurm line on the same nodes:
  B  srun --mpi=pmix -N NN --ntasks-per-node=NP RECIPE ...  (fixture multinode2_slurm: slurmctld on n0,
     a slurmd per node), which must equal A (twinkle-run) in the same way.

usage: check_multinode.py --build BUILD --nodes DIR [--recipe tp_recipe] [--steps 3] [--nnodes 2]
                          [--nproc-per-node 4] [--reference one-node|srun] [--keep DIR]
exit 0 = equal, 1 = a difference (printed), 77 = the nodes are not up (reason printed).
"""
import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODES = os.path.join(HERE, "nodes.sh")
# every value a metrics line holds that the layout cannot change (timings excluded)
KEYS = ("step", "loss", "grad_norm", "lr", "tokens", "expert_grad_norm", "lm_loss", "aux_loss",
        "expert_load_max", "expert_load_min")


def scratch_dir(build):
    """Where the runs write: under the build tree, which every node sees (each node has a /tmp of
    its own, as separate hosts do)."""
    d = os.path.join(build, "tests", "multinode", "scratch")
    os.makedirs(d, exist_ok=True)
    return d


def nodes_up(d):
    r = subprocess.run([NODES, "check", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout.strip())
        sys.exit(77 if r.returncode == 77 else 1)


def run(cmd, env, timeout):
    print("+", " ".join(cmd), flush=True)
    t0 = time.time()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if r.returncode != 0:
        print(r.stdout)
        raise SystemExit(f"FAIL: exit status {r.returncode}: {' '.join(cmd)}")
    return r.stdout, time.time() - t0


def tx_bytes(d, nnodes):
    total = 0
    for i in range(nnodes):
        out = subprocess.run([NODES, "bytes", d, f"n{i}"], stdout=subprocess.PIPE, text=True, check=True).stdout
        total += int(out.split()[0])
    return total


def multinode_cmd(build, d, nnodes, nproc, recipe_args):
    launcher = os.path.join(build, "bin", "twinkle-run")
    return [NODES, "exec", d, "n0", launcher, f"--nnodes={nnodes}", f"--nproc_per_node={nproc}",
            "--hostfile", os.path.join(d, "hostfile"), "--rsh-agent", os.path.join(d, "agent"),
            "--iface", "eth0"] + recipe_args


def srun_cmd(d, nnodes, nproc, recipe_args):
    """The README's Slurm line, `srun --mpi=pmix -N NN --ntasks-per-node=NP PROGRAM ...`, run inside n0
    against the fixture's slurmctld (nodes.sh slurm-up)."""
    return [NODES, "exec", d, "n0", "env", "SLURM_CONF=" + os.path.join(d, "slurm", "slurm.conf"),
            "srun", "--mpi=pmix", "-N", str(nnodes), f"--ntasks-per-node={nproc}"] + recipe_args


def recipe_args(build, recipe, steps, out, extra=()):
    a = [os.path.join(build, "examples", recipe), "--max-steps", str(steps), "--data-rows", "64",
         "--output-dir", out]
    if recipe != "tp_recipe":  # the aux loss is per micro-batch: the cookbook's checks use micro-batch size 1
        a += ["--micro-batch-size", "1"]
    return a + list(extra)


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare_metrics(a, b, what_a, what_b):
    fails = []
    if [m["step"] for m in a] != [m["step"] for m in b]:
        fails.append(f"steps: {what_a} {[m['step'] for m in a]} vs {what_b} {[m['step'] for m in b]}")
    for x, y in zip(a, b):
        for k in KEYS:
            if k in x or k in y:
                if x.get(k) != y.get(k):
                    fails.append(f"step {x.get('step')}: {k} {what_a} {x.get(k)!r} != {what_b} {y.get(k)!r}")
        print(f"step {x.get('step')}: loss {x.get('loss')!r} / {y.get('loss')!r}, grad_norm {x.get('grad_norm')!r}"
              f" / {y.get('grad_norm')!r}")
    return fails


def compare_dirs(a, b, skip=("metrics.jsonl",)):
    """Every file under a and b (recursively; names in `skip` left out) present in both and byte-identical."""
    fails = []

    def files(root):
        out = set()
        for dp, _, fs in os.walk(root):
            for f in fs:
                if f not in skip:
                    out.add(os.path.relpath(os.path.join(dp, f), root))
        return out

    fa, fb = files(a), files(b)
    for f in sorted(fa ^ fb):
        fails.append(f"checkpoint file {f} only in {'the first' if f in fa else 'the second'} run")
    same = 0
    for f in sorted(fa & fb):
        if filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False):
            same += 1
        else:
            fails.append(f"checkpoint file {f} differs")
    return fails, same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--nodes", required=True, help="the fixture's directory (tests/multinode/nodes.sh up DIR N)")
    ap.add_argument("--recipe", default="tp_recipe", choices=["tp_recipe", "moe_recipe", "moe_cp_recipe"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--nnodes", type=int, default=2)
    ap.add_argument("--nproc-per-node", type=int, default=4)
    ap.add_argument("--keep", default="", help="keep the runs' output directories here")
    ap.add_argument("--reference", default="one-node", choices=["one-node", "srun"],
                    help="one-node: A = twinkle-run on the nodes vs B = twinkle-run --nproc_per_node NN*NP on this "
                    "machine; srun: A = srun --mpi=pmix on the nodes (Slurm, nodes.sh slurm-up) vs B = twinkle-run on "
                    "the nodes")
    a = ap.parse_args()
    nodes_up(a.nodes)
    build = os.path.abspath(a.build)
    tmp = a.keep or tempfile.mkdtemp(prefix="run-", dir=scratch_dir(build))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    fails = []
    try:
        multi, single = os.path.join(tmp, "multi"), os.path.join(tmp, "single")
        for d in (multi, single):
            shutil.rmtree(d, ignore_errors=True)
        world = a.nnodes * a.nproc_per_node
        tx0 = tx_bytes(a.nodes, a.nnodes)
        out_m, t_m = run(multinode_cmd(build, a.nodes, a.nnodes, a.nproc_per_node,
                                       recipe_args(build, a.recipe, a.steps, multi)), env, 600)
        crossed = tx_bytes(a.nodes, a.nnodes) - tx0
        if crossed < 100000:  # the pp activations alone are megabytes: the ranks did not talk across the nodes
            fails.append(f"only {crossed} bytes crossed the nodes' links")
        if a.reference == "srun":  # the same layout launched by Slurm (PMIx), on the same nodes
            # what twinkle-run would add: waiting ranks yield (the nodes' cores are oversubscribed)
            senv = dict(env, OMPI_MCA_mpi_yield_when_idle="1", OMP_WAIT_POLICY="passive")
            out_s, t_s = run(srun_cmd(a.nodes, a.nnodes, a.nproc_per_node,
                                      recipe_args(build, a.recipe, a.steps, single)), senv, 600)
        else:
            out_s, t_s = run([os.path.join(build, "bin", "twinkle-run"), f"--nproc_per_node={world}"]
                             + recipe_args(build, a.recipe, a.steps, single), env, 600)
        mm, ms = read_metrics(os.path.join(multi, "metrics.jsonl")), read_metrics(os.path.join(single, "metrics.jsonl"))
        if len(mm) != a.steps:
            fails.append(f"{a.nnodes} nodes: {len(mm)} metrics lines, expected {a.steps}")
        other = "srun" if a.reference == "srun" else f"1x{world}"
        fails += compare_metrics(mm, ms, f"{a.nnodes}x{a.nproc_per_node}", other)
        f2, same = compare_dirs(multi, single)
        fails += f2
        print(f"{a.recipe}: {a.nnodes} nodes x {a.nproc_per_node} ranks {t_m:.1f} s, "
              f"{'srun on the nodes' if a.reference == 'srun' else f'1 node x {world} ranks'} {t_s:.1f} s; {crossed} bytes sent over the nodes' links ({crossed / max(1, a.steps):.0f} per step, "
              f"the job's start and the checkpoint gather included); {same} checkpoint files byte-identical")
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    for f in fails[:40]:
        print("MISMATCH:", f)
    if fails:
        print(f"check_multinode: {len(fails)} mismatches")
        return 1
    other = "srun" if a.reference == "srun" else f"1x{a.nnodes * a.nproc_per_node}"
    print(f"check_multinode {a.recipe}: {a.nnodes}x{a.nproc_per_node} == {other}, {a.steps} steps, 0 mismatches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
