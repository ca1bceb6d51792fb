#!/usr/bin/env python3
"""Independent reference for DeviceMesh: Megatron's rank layout written with numpy
reshapes (rank = tp + TP*(cp + CP*(dp + DP*pp)), i.e. arange(world).reshape(pp, dp, cp, tp)
in C order; expert grid arange(world).reshape(pp, edp, ep, etp)). A group of kind X varies
the X axes (the faster axis fastest inside the group) and fixes the others; groups are
listed by ascending first rank (megatron/core/parallel_state.py,
generate_masked_orthogonal_rank_groups). Usage: check_mesh_numpy.py path/to/mesh_dump"""
import json
import os
import subprocess
import sys

import numpy as np

MESHES = [  # dp, tp, pp, cp, ep, etp
    (2, 2, 4, 1, 1, 1), (2, 2, 2, 2, 1, 1), (2, 2, 2, 1, 2, 1), (1, 2, 2, 2, 2, 1),
    (4, 2, 1, 1, 2, 2), (3, 1, 2, 2, 3, 1), (1, 4, 3, 1, 2, 2), (5, 1, 1, 1, 5, 1),
    (2, 3, 2, 2, 4, 3), (1, 1, 1, 1, 1, 1), (8, 1, 1, 1, 8, 1), (2, 8, 2, 1, 4, 4),
]


def groups(arr, group_axes):
    """arr: n-d rank grid in C order (slowest axis first). group_axes: axes varying inside a
    group, listed slowest first (so the last listed axis is fastest inside the group)."""
    other = [a for a in range(arr.ndim) if a not in group_axes]
    size = int(np.prod([arr.shape[a] for a in group_axes]))
    rows = arr.transpose(other + list(group_axes)).reshape(-1, size).tolist()
    return sorted(rows, key=lambda g: g[0])


def reference(dp, tp, pp, cp, ep, etp):
    world = dp * tp * pp * cp
    dense = np.arange(world).reshape(pp, dp, cp, tp)  # axes: 0 pp, 1 dp, 2 cp, 3 tp
    edp = world // (etp * ep * pp)
    expert = np.arange(world).reshape(pp, edp, ep, etp)  # axes: 0 pp, 1 edp, 2 ep, 3 etp
    ref = {
        "world": [list(range(world))],
        "tp": groups(dense, [3]),
        "cp": groups(dense, [2]),
        "dp": groups(dense, [1]),
        "pp": groups(dense, [0]),
        "dp-cp": groups(dense, [1, 2]),
        "tp-pp": groups(dense, [0, 3]),
        "etp": groups(expert, [3]),
        "ep": groups(expert, [2]),
        "edp": groups(expert, [1]),
    }
    ref["embedding"] = [[g[0], g[-1]] if len(g) > 1 else [g[0]] for g in ref["pp"]]
    coords = []
    for r in range(world):
        p, d, c, t = (int(v) for v in np.argwhere(dense == r)[0])
        pe, de, e, te = (int(v) for v in np.argwhere(expert == r)[0])
        assert pe == p
        coords.append([t, c, d, p, te, e, de])
    ref["coords"] = coords
    return ref


def main():
    exe = sys.argv[1]
    bad = 0
    for m in MESHES:
        got = json.loads(subprocess.check_output([exe] + [str(v) for v in m]))
        ref = reference(*m)
        for key, want in ref.items():
            if got.get(key) != want:
                bad += 1
                print(f"mesh dp,tp,pp,cp,ep,etp={m}: '{key}' differs\n  got  {got.get(key)}\n  want {want}")
    # the reference itself must reproduce Megatron's docstring example (TP2 PP4, 16 GPUs)
    r = reference(2, 2, 4, 1, 1, 1)
    assert r["pp"][:2] == [[0, 4, 8, 12], [1, 5, 9, 13]] and r["dp"][:3] == [[0, 2], [1, 3], [4, 6]]
    # tests/meta/check_ctest_entries.py sets this to prove that "10 mismatches" fails the CTest entry
    bad += int(os.environ.get("TWINKLE_CHECK_INJECT_MISMATCHES", "0"))
    print(f"check_mesh_numpy: {len(MESHES)} meshes, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
