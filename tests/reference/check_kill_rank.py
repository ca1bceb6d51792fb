#!/usr/bin/env python3
"""A rank killed (SIGKILL) in the middle of training ends the whole job, non-zero, within 30 s."""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import prefork_cmd  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(prefork_cmd([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp,
                                    "--variant", "a"]),
                       check=True, stdout=subprocess.DEVNULL)
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "w") as f:
            for i in range(8):
                f.write(json.dumps({"input_ids": list(range(1, 30 + i))}) + "\n")
        metrics = os.path.join(tmp, "metrics.jsonl")
        tag = os.path.join(tmp, "killme")
        cmd = [os.path.join(args.build, "bin", "twinkle-run"), "--nproc_per_node=4",
               os.path.join(args.build, "bin", "twinkle"), "train", "--model", os.path.join(tmp, "tiny_a"),
               "--dataset", rows, "--batch-size", "8", "--max-steps", "100000", "--tp", "2", "--pp", "2",
               "--metrics-file", metrics, "--output-dir", tag, "--no-save"]
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
        deadline = time.time() + 90
        while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
            if job.poll() is not None:
                print(job.stdout.read())
                print("FAILED: the job ended before training started")
                return 1
            time.sleep(0.2)
        if not os.path.exists(metrics):
            job.kill()
            print("FAILED: training did not start within 90 s")
            return 1
        # the ranks are the processes whose command line carries our unique output dir
        pids = [int(p) for p in subprocess.run(["pgrep", "-f", "--", tag], stdout=subprocess.PIPE, text=True)
                .stdout.split() if int(p) != job.pid]
        ranks = []
        for p in pids:
            try:
                with open(f"/proc/{p}/cmdline") as f:
                    cl = f.read().split("\0")
                if any(c.endswith("/bin/twinkle") for c in cl) and "mpirun" not in cl[0]:
                    ranks.append(p)
            except OSError:
                pass
        if not ranks:
            job.kill()
            print("FAILED: could not find the rank processes")
            return 1
        victim = sorted(ranks)[-1]
        t0 = time.time()
        os.kill(victim, signal.SIGKILL)
        try:
            out, _ = job.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            print("FAILED: the job still runs 30 s after a rank was killed")
            return 1
        dt = time.time() - t0
        steps = sum(1 for _ in open(metrics))
        print(out[-1500:])
        print(f"killed rank pid {victim} after {steps} steps; job exited with {job.returncode} after {dt:.1f} s")
        if job.returncode == 0:
            print("FAILED: the job exited 0")
            return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
