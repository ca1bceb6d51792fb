#!/usr/bin/env python3
"""A job that loses a rank resumes exactly: twinkle-run --max-restarts and --resume auto.

examples/tp_recipe (dp2 tp2 pp2), --max-steps 6 --save-interval 2 (every second step a
checkpoint with the optimizer state, the DataLoader position and the scheduler):
  U  uninterrupted, one node x 8 ranks (the independent run);
  R  on the simulated nodes (2 x 4, tests/multinode/nodes.sh), --resume auto, TWINKLE_FAULT_KILL=5:5
     (world rank 5, on node n1, SIGKILLs itself in step 5, after its backward),
     twinkle-run --max-restarts 1: mpirun ends the job, twinkle-run starts it again, the recipe
     resumes from checkpoint-step-4 and takes steps 5 and 6;
  F  fewer nodes: the same fault on 2 x 4 without restarts (the job fails, leaving
     checkpoint-step-4), then a new launch on one node x 8 ranks with --resume auto.
Checks: R and F complete with steps 1..6 in metrics.jsonl, each step's loss, grad norm and lr
bit for bit U's; every file of their output directories (the final HF checkpoint, the interval
checkpoints with the fp32 master weights, AdamW moments and state.json, `latest`; metrics.jsonl
excepted) byte-identical to U's; R's log shows the kill, the
restart and the resume from checkpoint-step-4.

usage: check_restart.py --build BUILD --nodes DIR [--case restart|fewer_nodes]
exit 0 = equal, 1 = a difference, 77 = the nodes are not up (reason printed).
"""
import argparse
import os
import shutil
import sys
import tempfile

from check_multinode import compare_dirs, scratch_dir, compare_metrics, multinode_cmd, nodes_up, read_metrics, run  # noqa: E402

STEPS = 6


def recipe(build, out):
    return [os.path.join(build, "examples", "tp_recipe"), "--max-steps", str(STEPS), "--data-rows", "64",
            "--save-interval", "2", "--output-dir", out]


def run_any(cmd, env, timeout):
    import subprocess
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return r.returncode, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--case", default="restart", choices=["restart", "fewer_nodes"])
    a = ap.parse_args()
    nodes_up(a.nodes)
    build = os.path.abspath(a.build)
    launcher = os.path.join(build, "bin", "twinkle-run")
    tmp = tempfile.mkdtemp(prefix="restart-", dir=scratch_dir(build))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TWINKLE_FAULT_KILL", None)
    fault = dict(env, TWINKLE_FAULT_KILL="5:5")
    fails = []
    try:
        whole, test = os.path.join(tmp, "whole"), os.path.join(tmp, "test")
        run([launcher, "--nproc_per_node=8"] + recipe(build, whole), env, 600)
        if a.case == "restart":
            cmd = multinode_cmd(build, a.nodes, 2, 4, recipe(build, test) + ["--resume", "auto"])
            cmd.insert(cmd.index("--iface"), "--max-restarts=1")
            out, _ = run(cmd, fault, 600)
            for want in ("TWINKLE_FAULT_KILL: SIGKILL in step 5", "restart 1 of 1",
                         "resume auto: no checkpoint in", "resume auto: resuming from " + os.path.join(test, "checkpoint-step-4"),
                         "the job completed after 1 restart(s)"):
                if want not in out:
                    fails.append(f"the log lacks '{want}'")
        else:
            rc, out = run_any(multinode_cmd(build, a.nodes, 2, 4, recipe(build, test) + ["--resume", "auto"]), fault, 600)
            if rc == 0 or "TWINKLE_FAULT_KILL: SIGKILL in step 5" not in out:
                print(out)
                fails.append(f"the faulted 2-node job exited {rc} (expected a failure after the kill in step 5)")
            if not os.path.isdir(os.path.join(test, "checkpoint-step-4")) or os.path.isdir(os.path.join(test, "checkpoint-step-6")):
                fails.append(f"after the failure: {sorted(os.listdir(test))} (expected checkpoint-step-4, no -6)")
            out, _ = run([launcher, "--nproc_per_node=8"] + recipe(build, test) + ["--resume", "auto"], env, 600)
            if "resume auto: resuming from " + os.path.join(test, "checkpoint-step-4") not in out:
                fails.append("the 1-node launch did not resume from checkpoint-step-4")
        mw, mt = read_metrics(os.path.join(whole, "metrics.jsonl")), read_metrics(os.path.join(test, "metrics.jsonl"))
        if [m["step"] for m in mt] != list(range(1, STEPS + 1)):
            fails.append(f"steps logged: {[m['step'] for m in mt]}")
        fails += compare_metrics(mt, mw, a.case, "uninterrupted")
        skip = ("metrics.jsonl",)
        f2, same = compare_dirs(test, whole, skip)
        fails += f2
        print(f"{same} files byte-identical (the final checkpoint; checkpoint-step-2, -4 (the first attempt's) and -6, "
              f"each with the optimizer state)")
        if same < 5:
            fails.append(f"only {same} files compared")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in fails[:40]:
        print("MISMATCH:", f)
    if fails:
        print(f"check_restart: {len(fails)} mismatches")
        return 1
    print(f"check_restart {a.case}: killed at step 5, resumed, {STEPS} steps equal the uninterrupted run, 0 mismatches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
