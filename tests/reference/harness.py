"""Helpers shared by the reference checks in tests/reference: running a command, reading
metrics.jsonl, relative error, random token rows written as jsonl. Nothing here computes a
reference value; it only drives the programs under test and reads what they wrote."""
import json
import os
import random
import subprocess
import sys


def one_thread_env(env=None):
    """`env` (default: this process's environment) with OMP_NUM_THREADS=1, so that N ranks on
    two cores do not oversubscribe them."""
    return dict(os.environ if env is None else env, OMP_NUM_THREADS='1')


PREFORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'prefork.py')


def prefork_cmd(cmd, env=None):
    """cmd, or, for `PYTHON SCRIPT.py ARGS...` when this check runs under the pre-forked server
    (REFERENCE_PREFORK_KEY in `env`, tests/reference/prefork.py), the same command run in a fork of
    that server: same arguments, streams and exit status, without importing torch again."""
    key = (os.environ if env is None else env).get('REFERENCE_PREFORK_KEY')
    if (key and len(cmd) >= 2 and str(cmd[1]).endswith('.py')
            and os.path.basename(str(cmd[0])).startswith('python')):
        return [cmd[0], PREFORK, '--key', key, '--'] + list(cmd[1:])
    return cmd


def run_any(cmd, env=None, timeout=None):
    """Runs cmd with `env` (None: this process's environment, unchanged), stdout and stderr merged
    as text, and returns the CompletedProcess, whatever its exit code. A Python script runs in a
    fork of the pre-forked server when there is one (prefork_cmd)."""
    print('+', ' '.join(cmd), flush=True)
    return subprocess.run(prefork_cmd(cmd, env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=env)


def run(cmd, env=None, timeout=None, expect_fail=False):
    """Runs cmd as run_any and returns its output; prints the output and exits the check with a
    message when the exit code is not the expected one (0, or non-zero with expect_fail)."""
    r = run_any(cmd, env, timeout)
    if (r.returncode != 0) != expect_fail:
        print(r.stdout)
        raise SystemExit(f"FAIL: command exited with {r.returncode} (expected "
                         f"{'failure' if expect_fail else 'success'}): {' '.join(cmd)}")
    return r.stdout


def read_metrics(path, missing_ok=False):
    """The JSON objects of a metrics.jsonl file, one per non-empty line ([] for a missing file
    when missing_ok)."""
    if missing_ok and not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def report(failures, ok="OK", limit=None):
    """Prints the failures (the first `limit` of them when given) and returns 1, or prints `ok`
    and returns 0: the exit code of a check's main()."""
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures[:limit] if limit else failures))
        return 1
    print(ok)
    return 0


def rel(a, b):
    """|a - b| / |b| (b taken as at least 1e-12 in magnitude)."""
    return abs(a - b) / max(abs(b), 1e-12)


def random_rows(n, vocab, seed, lengths=(5, 24), prompt_from=0):
    """n rows of token ids with random lengths in `lengths` (inclusive); the first p tokens of a
    row (p uniform in prompt_from..len/2) are unlabelled (-100), the rest labelled with
    themselves. Returns (ids, labels)."""
    rng = random.Random(seed)
    ids, labels = [], []
    for _ in range(n):
        length = rng.randint(*lengths)
        row = [rng.randrange(vocab) for _ in range(length)]
        p = rng.randint(prompt_from, length // 2)
        ids.append(row)
        labels.append([-100] * p + row[p:])
    return ids, labels


def write_rows(path, ids, labels):
    """A jsonl dataset of pre-tokenized rows {"input_ids": ..., "labels": ...}."""
    with open(path, 'w') as f:
        for a, b in zip(ids, labels):
            f.write(json.dumps({'input_ids': a, 'labels': b}) + '\n')


def start(cmd, stdin_path, stdout_path, what):
    """Starts cmd in the background (a reference that runs while twinkle or another reference does),
    stdin from stdin_path, stdout to stdout_path, stderr kept for finish()."""
    fin, fout, ferr = open(stdin_path, "rb"), open(stdout_path, "wb"), open(stdout_path + ".stderr", "w+b")
    return subprocess.Popen(cmd, stdin=fin, stdout=fout, stderr=ferr), (fin, fout, ferr), cmd, what


def finish(job):
    """Waits for a start()ed command; exits with FAIL and its stderr when it failed, else returns stderr."""
    p, (fin, fout, ferr), cmd, what = job
    rc = p.wait()
    fin.close()
    fout.close()
    ferr.seek(0)
    err = ferr.read().decode("utf-8", "replace")
    ferr.close()
    if rc != 0:
        sys.exit(f"FAIL: {what} exited {rc}: {' '.join(cmd)}\n{err}")
    return err
