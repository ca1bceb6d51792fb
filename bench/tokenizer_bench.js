#!/usr/bin/env node
// bench/tokenizer_bench.js — single-thread encode throughput of the Rust HF `tokenizers`
// library through @anush008/tokenizers, on the same lines and protocol as
// bench/tokenizer_bench.cpp (warm-up pass over the distinct lines, then a timed pass over
// the lines repeated to >= --mb MB).
//
// Usage: TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 \
//          node bench/tokenizer_bench.js --tokenizer DIR --input LINES.jsonl [--mb 8]
// encodeBatch runs serially under TOKENIZERS_PARALLELISM=false, so the timing is one
// thread of Rust work plus the N-API cost of returning each Encoding and reading its ids.
"use strict";
const fs = require("fs");
const path = require("path");

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

async function main() {
  if (process.env.TOKENIZERS_PARALLELISM !== "false")
    process.stderr.write("tokenizer_bench.js: warning: TOKENIZERS_PARALLELISM is not 'false' (multi-threaded)\n");
  const { Tokenizer } = require("@anush008/tokenizers");
  const dir = arg("--tokenizer", path.join(__dirname, "..", "models", "qwen3-tiny"));
  const input = arg("--input");
  const mb = parseFloat(arg("--mb", "8"));
  if (!input) throw new Error("--input LINES.jsonl is required");
  const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
  const lines = fs
    .readFileSync(input, "utf8")
    .split("\n")
    .filter((l) => l.length)
    .map((l) => {
      const v = JSON.parse(l);
      return typeof v === "string" ? v : v.text;
    });
  const distinct = lines.reduce((a, s) => a + Buffer.byteLength(s, "utf8"), 0);
  const CHUNK = 1024;
  async function encodeAll(texts) {
    let tokens = 0;
    for (let s = 0; s < texts.length; s += CHUNK) {
      const encs = await tok.encodeBatch(texts.slice(s, s + CHUNK), { addSpecialTokens: false });
      for (const e of encs) tokens += e.getIds().length;
    }
    return tokens;
  }
  // cold pass (fresh tokenizer, empty cache) doubles as the warm-up
  const c0 = process.hrtime.bigint();
  await encodeAll(lines);
  const coldSec = Number(process.hrtime.bigint() - c0) / 1e9;
  const reps = Math.floor((mb * 1e6) / distinct) + 1;
  let all = [];
  for (let r = 0; r < reps; ++r) all = all.concat(lines);
  const bytes = distinct * reps;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const tokens = await encodeAll(all);
  const sec = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  const cpuSec = (cpu.user + cpu.system) / 1e6;
  console.log(
    JSON.stringify({
      impl: "rust-tokenizers(@anush008/tokenizers)",
      threads: 1,
      lines: all.length,
      mb: +(bytes / 1e6).toFixed(3),
      seconds: +sec.toFixed(4),
      mb_per_s: +(bytes / 1e6 / sec).toFixed(2),
      cpu_seconds: +cpuSec.toFixed(4),
      mb_per_cpu_s: +(bytes / 1e6 / cpuSec).toFixed(2),
      tokens,
      mtokens_per_s: +(tokens / 1e6 / sec).toFixed(3),
      cold_mb_per_s: +(distinct / 1e6 / coldSec).toFixed(2),
    })
  );
}

main().catch((e) => {
  process.stderr.write("tokenizer_bench.js: " + (e.stack || e) + "\n");
  process.exit(1);
});
