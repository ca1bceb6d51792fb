#!/usr/bin/env python3
"""A real `tensorboard --logdir` serves a run written by `twinkle train --tensorboard-dir`, and a headless
Chromium (Debian's /usr/bin/chromium driven by playwright-core, tests/reference/tensorboard_browser.mjs)
opens its Scalars dashboard: the 'lm loss' card is shown, the page's own request for the series answers
the run's steps 1..N, its chart has drawn them, and a screenshot lands in --out (the test's working
directory: tensorboard_scalars.png).

Exit 77 (CTest's SKIP_RETURN_CODE) only when chromium or playwright-core is absent (scripts/setup
installs both: the apt package chromium, the npm package playwright-core of package.json). Prints
"tensorboard browser check OK: ..." on success. Run with .venv/bin/python (it has tensorboard).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from check_tensorboard import tiny_model_and_rows  # noqa: E402
from harness import read_metrics, run  # noqa: E402

STEPS = 4


def start_tensorboard(logdir, log_path):
    """`tensorboard --logdir` on an unused port of 127.0.0.1 (this interpreter's tensorboard package);
    returns (process, base url) once it prints the address it serves."""
    log = open(log_path, "w")
    p = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1",
                          "--port", "0", "--load_fast", "false", "--reload_interval", "1"],
                         stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 40
    while time.time() < deadline:
        with open(log_path) as f:
            m = re.search(r"TensorBoard \S+ at (http://127\.0\.0\.1:\d+/)", f.read())
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.2)
    p.kill()
    with open(log_path) as f:
        raise SystemExit(f"FAIL: tensorboard did not start serving within 40 s:\n{f.read()[-2000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", default=".", help="where the screenshot goes (the test's working directory)")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    node = shutil.which("node")
    if not os.path.exists(args.chromium):
        print(f"SKIP: no {args.chromium} (scripts/setup installs Debian's chromium)")
        return 77
    if node is None or not os.path.isdir(os.path.join(ROOT, "node_modules", "playwright-core")):
        print(f"SKIP: node or {ROOT}/node_modules/playwright-core missing (scripts/setup installs playwright-core)")
        return 77
    twinkle = os.path.join(args.build, "bin", "twinkle")
    os.makedirs(args.out, exist_ok=True)
    shot = os.path.abspath(os.path.join(args.out, "tensorboard_scalars.png"))
    if os.path.exists(shot):
        os.remove(shot)
    tmp = tempfile.mkdtemp(prefix="twinkle-tb-browser-")
    tb_proc = None
    try:
        t0 = time.time()
        # no weights: twinkle's seeded init (no torch needed here)
        model, rows = tiny_model_and_rows(tmp, "rows:16", 99, init_weights=False)
        logdir = os.path.join(tmp, "tb")
        metrics = os.path.join(tmp, "metrics.jsonl")
        run([twinkle, "train", "--model", model, "--dataset", rows, "--batch-size", "4", "--lr", "1e-3",
             "--max-steps", str(STEPS), "--no-save", "--output-dir", os.path.join(tmp, "out"), "--metrics-file",
             metrics, "--tensorboard-dir", os.path.join(logdir, "twinkle_run")],
            env=dict(os.environ, OMP_NUM_THREADS="1"))
        steps = [m["step"] for m in read_metrics(metrics)]
        if steps != list(range(1, STEPS + 1)):
            print(f"FAIL: twinkle train logged steps {steps}")
            return 1
        t_train = time.time() - t0
        tb_proc, url = start_tensorboard(logdir, os.path.join(tmp, "tensorboard.log"))
        t_tb = time.time() - t0 - t_train
        profile = os.path.join(tmp, "chromium-profile")  # a fresh --user-data-dir
        r = subprocess.run([node, os.path.join(HERE, "tensorboard_browser.mjs"), "--url", url, "--tag", "lm loss",
                            "--steps", str(STEPS), "--screenshot", shot, "--user-data-dir", profile,
                            "--chromium", args.chromium], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        print(r.stdout, end="")
        if r.returncode == 77:
            return 77
        if r.returncode != 0:
            with open(os.path.join(tmp, "tensorboard.log")) as f:
                print("tensorboard's log:\n" + f.read()[-2000:])
            print(f"FAIL: the browser check exited with {r.returncode}")
            return 1
        if not os.path.isfile(shot) or os.path.getsize(shot) < 1000:
            print(f"FAIL: no screenshot at {shot}")
            return 1
        print(f"tensorboard browser check OK: {url} served twinkle's {STEPS}-step run, Chromium found the 'lm loss' "
              f"card and its chart (train {t_train:.1f} s, tensorboard up {t_tb:.1f} s, browser "
              f"{time.time() - t0 - t_train - t_tb:.1f} s); screenshot {shot}")
        return 0
    finally:
        if tb_proc is not None:
            tb_proc.terminate()
            try:
                tb_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                tb_proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
