"""The pre-forked Python (tests/reference/prefork.py) runs a script as `python SCRIPT` does.

A probe script is run twice, cold (`python probe.py ...`) and through the server of this build
(`python prefork.py --key BUILD -- probe.py ...`), and what it sees and does must be the same:
argv, working directory, an environment variable, umask, stdin, __name__, sys.path[0],
torch's thread count under OMP_NUM_THREADS, its stdout and stderr, its exit code (0, an int
from sys.exit, an uncaught exception, death by a signal). The run through the server must really
be a fork (the probe's pid differs from the client's; cold, exec keeps the pid). A client that
is killed takes the script's process group with it (a `sleep` it started is gone).

usage: check_prefork.py --build BUILD   (needs the server: the CTest fixture reference_prefork)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PREFORK = os.path.join(HERE, "prefork.py")
sys.path.insert(0, HERE)
from harness import report  # noqa: E402

PROBE = r'''
import json, os, signal, subprocess, sys
import torch
mode = sys.argv[1]
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "probe_var": os.environ.get("PROBE_VAR"),
                  "umask": os.umask(0o22), "stdin": sys.stdin.read(), "name": __name__,
                  "path0": sys.path[0], "threads": torch.get_num_threads(), "pid": os.getpid()}))
print("to stderr", file=sys.stderr)
if mode == "exit7":
    sys.exit(7)
if mode == "raise":
    raise ValueError("probe raised")
if mode == "sigterm":
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGTERM)
if mode == "sleep":
    p = subprocess.Popen(["sleep", "300"])
    print("sleep pid", p.pid, flush=True)
    p.wait()
'''


def run(cmd, cwd, env, stdin):
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(stdin, timeout=120)
    return p.pid, p.returncode, out, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        env = dict(os.environ, PROBE_VAR="värde 1", OMP_NUM_THREADS="1")
        env.pop("REFERENCE_PREFORK_KEY", None)
        expected = {"ok": 0, "exit7": 7, "raise": 1, "sigterm": -15}
        for mode, code in expected.items():
            args = [probe, mode, "two words", "--flag=x"]
            old = os.umask(0o077)
            try:
                cold = run([sys.executable] + args, work, env, "line one\nline two\n")
                warm = run([sys.executable, PREFORK, "--key", a.build, "--"] + args, work, env,
                           "line one\nline two\n")
            finally:
                os.umask(old)
            (cpid, crc, cout, cerr), (wpid, wrc, wout, werr) = cold, warm
            seen_c, seen_w = json.loads(cout.splitlines()[0]), json.loads(wout.splitlines()[0])
            if seen_c.pop("pid") != cpid:
                failures.append(f"{mode}: the cold run is not the interpreter itself")
            if seen_w.pop("pid") == wpid:
                failures.append(f"{mode}: the run through the server was not forked (is the server up?)")
            for k in seen_c:
                if seen_c[k] != seen_w[k]:
                    failures.append(f"{mode}: {k}: cold {seen_c[k]!r}, forked {seen_w[k]!r}")
            if (crc, wrc) != (code, code):
                failures.append(f"{mode}: exit code cold {crc}, forked {wrc}, expected {code}")
            if cout.splitlines()[1:] != wout.splitlines()[1:]:
                failures.append(f"{mode}: stdout differs:\n{cout!r}\n{wout!r}")
            if cerr.replace(probe, "P") != werr.replace(probe, "P"):
                failures.append(f"{mode}: stderr differs:\n{cerr}\n---\n{werr}")
            print(f"{mode}: exit {crc} / {wrc}, stderr {len(cerr)} / {len(werr)} chars")
        # A killed client takes what its script started with it.
        p = subprocess.Popen([sys.executable, PREFORK, "--key", a.build, "--", probe, "sleep"], cwd=work, env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        sleep_pid = None
        for line in p.stdout:
            if line.startswith("sleep pid"):
                sleep_pid = int(line.split()[2])
                break
        p.kill()
        p.wait()
        gone = False
        for _ in range(100):
            try:
                os.kill(sleep_pid, 0)
            except ProcessLookupError:
                gone = True
                break
            time.sleep(0.1)
        if not gone:
            failures.append(f"killed client: its script's child {sleep_pid} still runs")
            os.kill(sleep_pid, 9)
        print(f"killed client: child {sleep_pid} {'gone' if gone else 'still running'}")
    return report(failures, "prefork check OK: forked runs equal cold runs")


if __name__ == "__main__":
    sys.exit(main())
