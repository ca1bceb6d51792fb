#!/usr/bin/env python3
"""`pip install .` in a fresh virtual environment builds and installs the Python package, and the
the cookbook's recipe runs from that install.

  1. A new venv from Debian's /usr/bin/python3 (no site packages of the project environment).
  2. `VENV/bin/pip install SOURCE` with pip's build isolation: pip fetches scikit-build-core and
     pybind11 from the package index (pyproject.toml's build-system), which configures and builds the
     CMake target twinkle_python and installs the component `python` into VENV's site-packages
     (--config-settings=build-dir=BUILD-pip-check, beside BUILD, removed afterwards: Debian's pip 23.0
     has no -C; the CUDA backend too where scripts/setup's .cuda/ is there, as in `make`'s build; with
     ccache as the compiler launcher, as the Makefile configures it, `make`'s own build has already
     compiled the same objects and this one takes a few minutes instead of a full build).
  3. From a directory outside the source tree, without PYTHONPATH: `import twinkle` and its
     extension come from VENV's site-packages.
  4. examples/python/tp.py (the cookbook's dense recipe) on 2 ranks (dp 2), 2 steps, fp32, run with
     VENV's python, equals the same script run from the build tree's package (PYTHONPATH=build/python,
     the project environment's python): the loss and grad norm of each step bit for bit. An install
     that misses a module, the extension, or links other code than the build fails here.

usage: check_pip_install.py --build BUILD   (the project environment's python; needs the package index)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cmake_cache(build):
    """The NAME:TYPE=VALUE entries of BUILD/CMakeCache.txt as {NAME: VALUE} ({} when there is none)."""
    out = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line[:1] not in ("#", "/", "\n") and ":" in line and "=" in line:
                    name, rest = line.split(":", 1)
                    out[name] = rest.split("=", 1)[1].rstrip("\n")
    except FileNotFoundError:
        pass
    return out


def sh(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    if r.returncode != 0:
        print(r.stdout[-6000:])
        raise SystemExit(f"FAIL: exit {r.returncode}: {' '.join(cmd)}")
    return r.stdout


def recipe(python, out, env):
    mpirun = shutil.which("mpirun") or "/usr/bin/mpirun"
    cmd = [mpirun, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
           "-x", "OMP_NUM_THREADS=1", "-np", "2", python, os.path.join(ROOT, "examples", "python", "tp.py"),
           "--dp", "2", "--tp", "1", "--pp", "1", "--data-rows", "16", "--batch-size", "4", "--max-steps", "2",
           "--fp32", "--output-dir", out]
    sh(cmd, env=env, cwd=os.path.dirname(out))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="twinkle-pip-")
    try:
        venv = os.path.join(tmp, "venv")
        sh(["/usr/bin/python3", "-m", "venv", venv])
        py = os.path.join(venv, "bin", "python")
        t0 = time.time()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        # BUILD's launcher (the Makefile's ccache, if any) and compilers (pip's build would otherwise take
        # Python's sysconfig compiler, x86_64-linux-gnu-g++: the same binary under another name, which ccache
        # hashes), and a build directory beside BUILD at the same depth under ROOT: with CCACHE_BASEDIR=ROOT
        # every compile command then reads as in BUILD, and ccache returns BUILD's objects
        cache = cmake_cache(a.build)
        for var, key in [(f"CMAKE_{x}_COMPILER_LAUNCHER",) * 2 for x in ("C", "CXX", "CUDA")] + \
                [("CC", "CMAKE_C_COMPILER"), ("CXX", "CMAKE_CXX_COMPILER")]:
            if key in cache:
                env.setdefault(var, cache[key])
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(os.cpu_count() or 2)
        build_dir = os.path.abspath(a.build).rstrip("/") + "-pip-check"
        shutil.rmtree(build_dir, ignore_errors=True)
        try:
            sh([py, "-m", "pip", "install", "--disable-pip-version-check", "-q", ROOT,
                f"--config-settings=build-dir={build_dir}"], env=env)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
        print(f"pip install: {time.time() - t0:.0f} s")
        where = sh([py, "-c", "import os, twinkle, twinkle._core; "
                              "print(os.path.dirname(twinkle.__file__)); print(twinkle._core.__file__)"],
                   env=env, cwd=tmp).split()
        site = sh([py, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"], env=env).strip()
        if not all(os.path.realpath(p).startswith(os.path.realpath(site)) for p in where):
            raise SystemExit(f"FAIL: twinkle imported from {where}, not from the venv's {site}")
        print("imported from", where[0])
        installed = recipe(py, os.path.join(tmp, "out_installed"), env)
        tree_env = dict(env, PYTHONPATH=os.path.join(os.path.abspath(a.build), "python"))
        tree = recipe(sys.executable, os.path.join(tmp, "out_tree"), tree_env)
        bad = []
        if len(installed) != 2 or len(tree) != 2:
            bad.append(f"steps logged: installed {len(installed)}, build tree {len(tree)} (expected 2)")
        for i, (x, y) in enumerate(zip(installed, tree)):
            print(f"step {i + 1}: loss installed {x['loss']!r} build tree {y['loss']!r} | grad_norm "
                  f"{x['grad_norm']!r} vs {y['grad_norm']!r}")
            for k in ("loss", "grad_norm"):
                if x[k] != y[k]:
                    bad.append(f"step {i + 1}: {k} {x[k]!r} (installed) vs {y[k]!r} (build tree)")
        if bad:
            raise SystemExit("FAIL:\n  " + "\n  ".join(bad))
        print("pip install check OK: the installed package runs the recipe as the build tree does")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
