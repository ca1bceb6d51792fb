#!/usr/bin/env python3
"""Independent references for twinkle's dataset readers (used by tests/unit/data/test_dataset.cpp).

Usage: make_reference.py OUTDIR [SEED]

Writes
  csv_ref.csv / csv_ref_expected.json
      random RFC 4180 CSV (quoted and unquoted fields, doubled quotes, commas, CR/LF inside
      quotes, CRLF and LF record ends, UTF-8 text, empty fields, blank lines); expected rows
      come from Python's csv module, start lines from the generator's own line count.
  utf8_ref.jsonl / utf8_ref_expected.json
      one {"t": "..."} object per line whose string holds random bytes (valid multi-byte
      sequences, truncated sequences, overlongs, surrogates, > U+10FFFF, stray continuation
      bytes); expected per line: the decoded value, or the 1-based byte column of the first
      invalid byte as Python's strict UTF-8 decoder reports it (UnicodeDecodeError.start).
"""
import csv
import io
import json
import os
import random
import sys


def csv_ref(rng, out):
    header = ["a", "b c", "ünï"]
    pieces = ["x", "hello", "中文", ",", '"', "\n", "\r\n", " ", "é", "", "1,2", 'say "hi"', "\t", "🙂"]
    text = []
    starts = []
    line = 1

    def field(rng):
        n = rng.randint(0, 4)
        v = "".join(rng.choice(pieces) for _ in range(n))
        needs = any(c in v for c in ',"\r\n') or rng.random() < 0.2
        if needs:
            return '"' + v.replace('"', '""') + '"', v.count("\n")
        return v, 0

    text.append(",".join(header) + "\r\n")
    line += 1
    for r in range(300):
        if rng.random() < 0.05:  # blank line between records
            text.append("\n")
            line += 1
        cells, nl = [], 0
        for _ in header:
            s, k = field(rng)
            cells.append(s)
            nl += k
        if all(c == "" for c in cells):
            cells[0] = "z"
        starts.append(line)
        end = "\r\n" if rng.random() < 0.5 else "\n"
        if r == 299 and rng.random() < 0.5:
            end = ""  # no newline at end of file
        text.append(",".join(cells) + end)
        line += nl + 1
    data = "".join(text)
    with open(os.path.join(out, "csv_ref.csv"), "w", encoding="utf-8", newline="") as f:
        f.write(data)
    rows = list(csv.DictReader(io.StringIO(data, newline="")))
    assert len(rows) == len(starts), (len(rows), len(starts))
    with open(os.path.join(out, "csv_ref_expected.json"), "w", encoding="utf-8") as f:
        json.dump([{"line": l, "row": r} for l, r in zip(starts, rows)], f, ensure_ascii=False)


def utf8_ref(rng, out):
    good = ["a", "é".encode(), "中".encode(), "🙂".encode(), b"z", "\u07ff".encode(), "\uffff".encode(),
            "\U0010ffff".encode()]
    good = [g if isinstance(g, bytes) else g.encode() for g in good]
    bad = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf0\x80\x80\xaf",
           b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\x80", b"\xbf", b"\xe4\xb8", b"\xf0\x9f\x99", b"\xc3A"]
    lines, expected = [], []
    for i in range(400):
        parts = [rng.choice(good) for _ in range(rng.randint(0, 6))]
        if rng.random() < 0.5:
            parts.insert(rng.randint(0, len(parts)), rng.choice(bad))
        payload = b"".join(parts)
        prefix = b'{"t": "'
        line = prefix + payload + b'"}'
        try:
            value = payload.decode("utf-8")
            expected.append({"line": i + 1, "ok": True, "value": value})
        except UnicodeDecodeError as e:
            expected.append({"line": i + 1, "ok": False, "column": len(prefix) + e.start + 1})
        lines.append(line)
    with open(os.path.join(out, "utf8_ref.jsonl"), "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    with open(os.path.join(out, "utf8_ref_expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)


def main():
    out = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1234
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    csv_ref(rng, out)
    utf8_ref(rng, out)


if __name__ == "__main__":
    main()
