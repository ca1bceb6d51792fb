#!/usr/bin/env node
// Reference input_ids / labels / prompt ids for rendered conversations, tokenized by the Rust
// HF `tokenizers` library (@anush008/tokenizers).
//
// Usage: node tok_labels.js TOKENIZER_JSON < render.jsonl > labels.jsonl
//   input lines (tests/reference/template_ref.py): {"text", "text_gen", "text_gen_nothink", "pieces"}
//   output lines: {"input_ids", "labels", "consistent", "prompt_ids", "prompt_ids_nothink"}
//     input_ids   encode(text)
//     labels      piece ids for trained pieces, -100 for the others (pieces tokenized one by one)
//     consistent  the concatenated piece ids equal encode(text) (else labels are undefined and
//                 twinkle must reject the row)
//     labels_iet  labels with -100 on every token whose character offsets lie wholly inside one
//                 of iet_ranges (ms-swift's ignore_empty_think match; the ids stay encode(text))
//     iet_straddles  how many iet_ranges end strictly inside a token (the case where the match's
//                 whitespace and the content's first characters form one token)
//     prompt_ids  encode(text_gen); prompt_ids_nothink encode(text_gen_nothink)
"use strict";
const fs = require("fs");

let rust;
try {
  rust = require("@anush008/tokenizers");
} catch (e) {
  process.stderr.write("tok_labels.js: cannot load @anush008/tokenizers (run scripts/fetch-assets): " + e.message + "\n");
  process.exit(2);
}

async function main() {
  const tokPath = process.argv[2];
  if (!tokPath || !fs.existsSync(tokPath)) {
    process.stderr.write("tok_labels.js: tokenizer.json not found: " + tokPath + " (run scripts/fetch-assets)\n");
    process.exit(2);
  }
  const tok = rust.Tokenizer.fromFile(tokPath);
  const enc = async (s) => (await tok.encode(s, null, { addSpecialTokens: false })).getIds();
  const rows = fs
    .readFileSync(0, "utf8")
    .split("\n")
    .filter((l) => l.length)
    .map((l) => JSON.parse(l));
  const out = [];
  for (const r of rows) {
    const e = await tok.encode(r.text, null, { addSpecialTokens: false });
    const ids = e.getIds();
    const pieceIds = [];
    const labels = [];
    for (const [text, trained] of r.pieces) {
      const p = await enc(text);
      for (const id of p) {
        pieceIds.push(id);
        labels.push(trained ? id : -100);
      }
    }
    const consistent = pieceIds.length === ids.length && pieceIds.every((x, k) => x === ids[k]);
    // ignore_empty_think: tokens wholly inside a matched range are untrained (Rust offsets are
    // code points, as Python's str indices in iet_ranges)
    const offsets = e.getOffsets();
    const ranges = r.iet_ranges || [];
    const labelsIet = !consistent ? [] : labels.map((l, k) =>
      ranges.some(([a, b]) => a <= offsets[k][0] && offsets[k][1] <= b) ? -100 : l);
    let ietStraddles = 0;
    for (const [, b] of ranges) if (offsets.some(([s, t]) => s < b && b < t)) ietStraddles += 1;
    out.push(
      JSON.stringify({
        input_ids: ids,
        labels,
        consistent,
        labels_iet: labelsIet,
        iet_straddles: ietStraddles,
        prompt_ids: await enc(r.text_gen),
        prompt_ids_nothink: await enc(r.text_gen_nothink),
      })
    );
  }
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}

main().catch((e) => {
  process.stderr.write("tok_labels.js: " + (e.stack || e) + "\n");
  process.exit(2);
});
