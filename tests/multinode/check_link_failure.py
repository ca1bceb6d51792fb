#!/usr/bin/env python3
"""A node whose link dies mid-training ends the job within a bounded time, naming the lost host
or rank, instead of hanging.

examples/tp_recipe on 2 simulated nodes x 4 ranks (tests/multinode/nodes.sh), many steps; once
step 2 is logged, node n1's link is brought down (the switch side of its veth, `nodes.sh link
DIR n1 down`): its ranks' messages and its daemon's out-of-band connection stall. What ends the
job: twinkle-run's multi-node mpirun options (TCP keepalives on the daemons' connections: mpirun
declares n1's daemon lost after ~16 s) or the collective watchdog of the ranks on n0 (the pp
receive from n1 never completes; --comm-timeout, set here to 20 s).
Checks: the job exits non-zero within --bound seconds (default 60) of the link going down, and
its output names the host n1 (OpenMPI's lost-daemon report) or carries a watchdog line naming
the rank, group and call. The link is brought back up afterwards and any process of the job left
on n1 (its daemon orted or a rank; none are expected) is reported and ended.

usage: check_link_failure.py --build BUILD --nodes DIR [--bound 60]
exit 0 = ended in time with the message, 1 = otherwise, 77 = the nodes are not up.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from check_multinode import NODES, multinode_cmd, nodes_up, scratch_dir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--bound", type=float, default=60.0)
    a = ap.parse_args()
    nodes_up(a.nodes)
    build = os.path.abspath(a.build)
    out_dir = tempfile.mkdtemp(prefix="link-", dir=scratch_dir(build))
    metrics = os.path.join(out_dir, "metrics.jsonl")
    cmd = multinode_cmd(build, a.nodes, 2, 4, [os.path.join(build, "examples", "tp_recipe"), "--max-steps", "200",
                                                "--data-rows", "64", "--output-dir", out_dir])
    cmd.insert(cmd.index("--iface"), "--comm-timeout=20")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log_path = os.path.join(out_dir, "job.log")
    fails = []
    print("+", " ".join(cmd), flush=True)
    with open(log_path, "w") as log:
        job = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            t0 = time.time()
            while time.time() - t0 < 300 and job.poll() is None:
                if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 2:
                    break
                time.sleep(0.2)
            if job.poll() is not None:
                print(open(log_path).read())
                print("check_link_failure: the job ended before step 2")
                return 1
            subprocess.run([NODES, "link", a.nodes, "n1", "down"], check=True)
            t_down = time.time()
            print(f"link of n1 down after step 2 ({t_down - t0:.1f} s into the job)", flush=True)
            try:
                rc = job.wait(timeout=a.bound)
                took = time.time() - t_down
            except subprocess.TimeoutExpired:
                rc, took = None, None
                fails.append(f"the job still runs {a.bound:.0f} s after the link went down (a hang)")
        finally:
            subprocess.run([NODES, "link", a.nodes, "n1", "up"])
            if job.poll() is None:
                job.kill()
                job.wait()
    out = open(log_path).read()
    print("\n".join(out.splitlines()[-25:]))
    if rc is not None:
        print(f"the job exited {rc} {took:.1f} s after the link went down")
        if rc == 0:
            fails.append("the job exited 0")
        lost = re.search(r"(lost communication with a remote daemon|lost contact|unable to reach|"
                         r"ORTE has lost)[\s\S]{0,400}\bn1\b", out, re.I) or \
            re.search(r"\bn1\b[\s\S]{0,200}(lost|unreachable)", out, re.I)
        dog = re.search(r"\[rank \d+\] comm watchdog: MPI_\w+ on process group '[\w-]+' \(\d+ ranks\) has not "
                        r"completed", out)
        if not lost and not dog:
            fails.append("the output names neither the lost host n1 nor a rank / group / call of the watchdog")
        print(f"named: {'host n1 (mpirun)' if lost else ''}{' and ' if lost and dog else ''}"
              f"{dog.group(0) if dog else ''}")
    # nothing of the job may be left on n1 (its ranks and daemon end with the lost connection)
    time.sleep(1)
    left = subprocess.run(["bash", "-c", f"ip netns pids $(sed -n 's/^id=//p' {a.nodes}/state)-n1"],
                          stdout=subprocess.PIPE, text=True).stdout.split()
    if left:  # the job's own: its daemon and ranks (not the Slurm fixture's daemons, which may be up)
        ps = subprocess.run(["ps", "-o", "pid=,comm=", "-p", ",".join(left)], stdout=subprocess.PIPE,
                            text=True).stdout.split("\n")
        job_left = [line.split() for line in ps if len(line.split()) == 2 and line.split()[1] in ("orted", "tp_recipe")]
        if job_left:
            print(f"processes of the job left on n1: {job_left}; ending them")
            subprocess.run(["kill", "-KILL"] + [p for p, _ in job_left])
    shutil.rmtree(out_dir, ignore_errors=True)
    for f in fails:
        print("FAIL:", f)
    if fails:
        return 1
    print(f"check_link_failure: n1's link down at step 2, the job ended in {took:.0f} s (< {a.bound:.0f} s), "
          f"the unreachable host or rank named")
    return 0


if __name__ == "__main__":
    sys.exit(main())
