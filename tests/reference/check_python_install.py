#!/usr/bin/env python3
"""What `pip install .` installs (pyproject.toml: scikit-build-core installs the CMake component
`python`): `cmake --install BUILD --component python --prefix TMP` must leave an importable package
TMP/twinkle whose extension and modules all come from TMP (not from the build tree), with the
package's public import paths. Catches install rules that miss the extension, a sub-package or a
module (pip would then install a broken package). pip itself is not run: it needs the package
index for scikit-build-core (README.md, "The recipe as a Python script").

usage: check_python_install.py --build BUILD --cmake CMAKE
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', required=True)
    ap.add_argument('--cmake', required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as prefix:
        subprocess.run([a.cmake, '--install', a.build, '--component', 'python', '--prefix', prefix], check=True,
                       stdout=subprocess.DEVNULL)
        src_modules = sorted(os.path.relpath(os.path.join(d, f), os.path.join(ROOT, 'python'))
                             for d, _, fs in os.walk(os.path.join(ROOT, 'python', 'twinkle')) for f in fs
                             if f.endswith('.py'))
        missing = [m for m in src_modules if not os.path.exists(os.path.join(prefix, m))]
        code = ('import os, sys, twinkle, twinkle._core\n'
                'from twinkle import DeviceMesh, LoraConfig, get_logger, initialize\n'
                'from twinkle.dataloader import DataLoader\n'
                'from twinkle.dataset import Dataset, DatasetMeta\n'
                'from twinkle.model import MegatronModel\n'
                'from twinkle.preprocessor import SelfCognitionProcessor\n'
                'p = os.path.realpath(sys.argv[1])\n'
                'for m in (twinkle, twinkle._core):\n'
                '    assert os.path.realpath(m.__file__).startswith(p), m.__file__\n'
                'print("imported from", os.path.dirname(twinkle._core.__file__))\n')
        env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
        env['PYTHONPATH'] = prefix
        r = subprocess.run([sys.executable, '-c', code, prefix], env=env, cwd=prefix, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        print(r.stdout, end='')
        if missing:
            print('FAIL: not installed:', missing)
        if r.returncode != 0 or missing:
            sys.exit(1)
    print(f'python install component OK: {len(src_modules)} modules and the extension')


if __name__ == '__main__':
    main()
