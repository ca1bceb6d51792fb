#!/usr/bin/env python3
"""The tail of an epoch: every layout trains exactly the rows one process trains, at every
step, across an epoch boundary, including a short last batch that leaves some data-parallel ranks
without a row (they count 0 tokens; the global per-token loss stays right, no NaN, no hang).

9 pre-tokenized rows, global batch 4, no shuffle, 4 steps at lr 0 (the weights never move, so each
step's loss is the loss of that step's rows at the initial weights):
  expected batches: step 1 rows 0-3, step 2 rows 4-7, step 3 row 8 alone, step 4 rows 0-3 (epoch 1).
Oracle: tests/reference/qwen3_ref.py (PyTorch) loss and label-token count of those rows.
Layouts: dp 1, 2, 4, tp2 x dp2, pp2 x dp2: per-step loss, label tokens, grad norm equal to dp 1
and the oracle (1e-5 relative). --drop-last: batches 0-3, 4-7, then 0-3 again, for dp 1 and dp 4 alike.
The dp>1 runs must also warn that a rank gets no row.
No labelled token: 2 supervised + 2 fully masked rows ([v,v,m,m] and [v,m,v,m]) as dp1 mbs4 /
mbs1 and dp2 mbs1 / mbs2 (so a micro-batch or a dp rank has no labelled token): the PyTorch loss
of the 4 rows, the same grad norm in every layout.
Run with the project environment's python (.venv, scripts/setup).
"""
import argparse
import functools
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import random_rows, rel, write_rows  # noqa: E402
run = functools.partial(harness.run, env=harness.one_thread_env())  # every child on one thread


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    launcher = os.path.join(a.build, "bin", "twinkle-run")
    tmp = tempfile.mkdtemp(prefix="twinkle-tail-")
    failures = []
    try:
        run([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "b"])
        model = os.path.join(tmp, "tiny_b")
        cfg_path = os.path.join(model, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["num_hidden_layers"] = 4
        cfg["max_window_layers"] = 4
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", cfg_path, "--seed", "0",
             "--out", model])
        ids, labels = random_rows(9, cfg["vocab_size"], 21, (5, 20))
        rows = os.path.join(tmp, "rows.jsonl")
        write_rows(rows, ids, labels)

        def oracle(sel):
            b = os.path.join(tmp, "b.json")
            with open(b, "w") as f:
                json.dump({"input_ids": [ids[i] for i in sel], "labels": [labels[i] for i in sel]}, f)
            out = run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "loss", "--model", model, "--batch", b])
            return json.loads(out.strip().splitlines()[-1])

        def train(tag, np_, flags, steps, extra=()):
            metrics = os.path.join(tmp, f"m_{tag}.jsonl")
            cmd = [twinkle, "train", "--model", model, "--dataset", rows, "--batch-size", "4", "--max-steps",
                   str(steps), "--lr", "0", "--no-save", "--metrics-file", metrics] + flags + list(extra)
            if np_ > 1:
                cmd = [launcher, f"--nproc_per_node={np_}"] + cmd
            log = run(cmd)
            with open(metrics) as f:
                return [json.loads(l) for l in f if l.strip()], log

        def check(tag, got, want_rows, base):
            for s, sel in enumerate(want_rows):
                o = oracles[tuple(sel)]
                g = got[s]
                print(f"{tag} step {s + 1}: rows {sel[0]}-{sel[-1]} loss {g['loss']:.9f} oracle {o['loss']:.9f} "
                      f"label_tokens {g['label_tokens']} oracle {o['tokens']} grad_norm {g['grad_norm']:.9f}")
                if g["label_tokens"] != o["tokens"]:
                    failures.append(f"{tag} step {s + 1}: {g['label_tokens']} label tokens, oracle {o['tokens']}")
                if g["loss"] is None or rel(g["loss"], o["loss"]) > 1e-5:
                    failures.append(f"{tag} step {s + 1}: loss {g['loss']} vs oracle {o['loss']}")
                if base is not None and rel(g["grad_norm"], base[s]["grad_norm"]) > 1e-5:
                    failures.append(f"{tag} step {s + 1}: grad norm {g['grad_norm']} vs dp1 {base[s]['grad_norm']}")

        batches = [list(range(0, 4)), list(range(4, 8)), [8], list(range(0, 4))]
        oracles = {tuple(b): oracle(b) for b in batches}
        base, _ = train("dp1", 1, [], 4)
        check("dp1", base, batches, None)
        for tag, np_, flags in (("dp2", 2, ["--dp", "2"]), ("dp4", 4, ["--dp", "4"]),
                                ("tp2_dp2", 4, ["--tp", "2", "--dp", "2"]), ("pp2_dp2", 4, ["--pp", "2", "--dp", "2"])):
            got, log = train(tag, np_, flags, 4)
            check(tag, got, batches, base)
            if "get no row" not in log:
                failures.append(f"{tag}: no warning that a data-parallel rank gets no row")
        # drop_last: the short batch is dropped for every layout alike
        dl_batches = [list(range(0, 4)), list(range(4, 8)), list(range(0, 4))]
        dl1, _ = train("dl_dp1", 1, ["--drop-last"], 3)
        check("drop_last dp1", dl1, dl_batches, None)
        dl4, log = train("dl_dp4", 4, ["--dp", "4", "--drop-last"], 3)
        check("drop_last dp4", dl4, dl_batches, dl1)
        if "drop_last drops the last 1 rows" not in log:
            failures.append("drop_last: no warning about the dropped rows")

        # Micro-batches / dp ranks holding rows but no labelled token. Rows 0, 1 supervised,
        # 2, 3 fully masked, in the orders [v,v,m,m] and [v,m,v,m]; dp1 mbs4, dp1 mbs1, dp2 mbs1,
        # dp2 mbs2: loss = the PyTorch loss of the 4 rows, the same grad norm everywhere, no NaN.
        for order in ([0, 1, 2, 3], [0, 2, 1, 3]):
            sup = [ids[8], ids[4]]
            rows4 = [(sup[0], labels[8]), (sup[1], labels[4]), (ids[5], [-100] * len(ids[5])),
                     (ids[6], [-100] * len(ids[6]))]
            rows4 = [rows4[k] for k in order]
            rows_path = os.path.join(tmp, "rows4.jsonl")
            write_rows(rows_path, [x for x, _ in rows4], [y for _, y in rows4])
            b = os.path.join(tmp, "b4.json")
            with open(b, "w") as f:
                json.dump({"input_ids": [x for x, _ in rows4], "labels": [y for _, y in rows4]}, f)
            o = json.loads(run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "loss", "--model", model,
                                "--batch", b]).strip().splitlines()[-1])
            ref = None
            for tag, np_, flags in (("dp1_mbs4", 1, ["--micro-batch-size", "4"]),
                                    ("dp1_mbs1", 1, ["--micro-batch-size", "1"]),
                                    ("dp2_mbs1", 2, ["--dp", "2", "--micro-batch-size", "1"]),
                                    ("dp2_mbs2", 2, ["--dp", "2", "--micro-batch-size", "2"])):
                metrics = os.path.join(tmp, "m_b24.jsonl")
                cmd = [twinkle, "train", "--model", model, "--dataset", rows_path, "--batch-size", "4",
                       "--max-steps", "1", "--lr", "0", "--no-save", "--metrics-file", metrics] + flags
                if np_ > 1:
                    cmd = [launcher, f"--nproc_per_node={np_}"] + cmd
                run(cmd)
                with open(metrics) as f:
                    g = json.loads(f.readline())
                name = f"no-label rows order {order} {tag}"
                print(f"{name}: loss {g['loss']} oracle {o['loss']:.9f} label_tokens {g['label_tokens']} "
                      f"grad_norm {g['grad_norm']}")
                if g["loss"] is None or rel(g["loss"], o["loss"]) > 1e-5 or g["label_tokens"] != o["tokens"]:
                    failures.append(f"{name}: loss {g['loss']} / {g['label_tokens']} tokens vs oracle {o}")
                if g["grad_norm"] is None or not (g["grad_norm"] > 0):
                    failures.append(f"{name}: grad norm {g['grad_norm']}")
                elif ref is not None and rel(g["grad_norm"], ref) > 1e-5:
                    failures.append(f"{name}: grad norm {g['grad_norm']} vs dp1_mbs4 {ref}")
                ref = ref if ref is not None else g["grad_norm"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
