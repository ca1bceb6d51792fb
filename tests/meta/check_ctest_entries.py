#!/usr/bin/env python3
"""CTest entries pass only when their check passes.

1. Lint of every registered test (ctest --show-only=json-v1): no PASS_REGULAR_EXPRESSION (with
   one, CTest ignores the exit code, so a check that prints its pass line and then exits 1 is
   reported passed: "0 mismatches" also matches "10 mismatches") and no WILL_FAIL (any crash
   would pass); use tests/check_run.sh (exit code AND an anchored line) or
   tests/dist/expect_fail.sh (expected error message) instead. No DISABLED test either.
2. Proof on real entries: CTest itself (a nested ctest run in a scratch directory whose
   CTestTestfile.cmake includes this build tree) runs
     - dist_mesh_numpy_reference with TWINKLE_CHECK_INJECT_MISMATCHES=10 (the script then prints
       "10 mismatches" and exits 1)       -> the entry must FAIL;
     - dist_twinkle_run_dry_run with TWINKLE_CHECK_RUN_INJECT_RC=1 (tests/check_run.sh: the
       program printed its expected line but exited 1) -> the entry must FAIL;
     - both without injection            -> they must PASS (the harness itself works).

usage: check_ctest_entries.py BUILD_DIR   (.venv/bin/python, scripts/setup)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def props(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def lint(build):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    tests = json.loads(out)["tests"]
    bad = []
    for t in tests:
        p = props(t)
        if "PASS_REGULAR_EXPRESSION" in p:
            bad.append(f"{t['name']}: PASS_REGULAR_EXPRESSION {p['PASS_REGULAR_EXPRESSION']} makes CTest ignore the "
                       f"exit code; wrap the command in tests/check_run.sh REGEX instead")
        if p.get("WILL_FAIL"):
            bad.append(f"{t['name']}: WILL_FAIL passes on any failure (a crash too); use tests/dist/expect_fail.sh "
                       f"with the expected message")
        if p.get("DISABLED"):
            bad.append(f"{t['name']}: DISABLED (a test that cannot run must fail configuration instead)")
    print(f"lint: {len(tests)} registered tests, {len(bad)} problems")
    return bad


def nested_ctest(build, name, env_extra):
    """Runs the one CTest entry `name` of `build` through CTest, from a scratch directory (so the
    outer run's Testing/ logs are not touched), without the fixture reference_prefork (whose cleanup
    would stop the outer run's server; the entry uses that server if it is up, and runs cold if
    not). Returns (ctest exit code, output)."""
    scratch = tempfile.mkdtemp(prefix="twinkle-meta-")
    try:
        with open(os.path.join(scratch, "CTestTestfile.cmake"), "w") as f:
            f.write(f'subdirs("{os.path.abspath(build)}")\n')
        env = dict(os.environ, **env_extra)
        r = subprocess.run(["ctest", "-R", f"^{name}$", "-FA", "reference_prefork", "--output-on-failure", "--timeout", "120"], cwd=scratch,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return r.returncode, r.stdout
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    build = sys.argv[1]
    failures = lint(build)
    cases = [
        ("dist_mesh_numpy_reference", {"TWINKLE_CHECK_INJECT_MISMATCHES": "10"}, "10 mismatches"),
        ("dist_twinkle_run_dry_run", {"TWINKLE_CHECK_RUN_INJECT_RC": "1"}, "check_run: FAIL: exit code 1"),
    ]
    for name, inject, marker in cases:
        rc, out = nested_ctest(build, name, {})
        ran = "1 tests" in out or "tests passed" in out
        print(f"{name}: plain run -> ctest exit {rc}")
        if rc != 0 or not ran:
            failures.append(f"{name} does not pass without injection (ctest exit {rc}):\n{out[-3000:]}")
        rc, out = nested_ctest(build, name, inject)
        print(f"{name} with {inject} -> ctest exit {rc}")
        if rc == 0:
            failures.append(f"{name} PASSED although its check failed ({inject}):\n{out[-3000:]}")
        elif marker not in out:
            failures.append(f"{name} failed, but not through the injected failure (no '{marker}'):\n{out[-3000:]}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("OK: no pass regexes / WILL_FAIL / DISABLED entries; injected check failures fail their CTest entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
