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
//     labels_iet, consistent_iet  the same for pieces_iet (ms-swift's ignore_empty_think)
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
    const ids = await enc(r.text);
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
    // the same for pieces_iet (ignore_empty_think)
    const ietIds = [];
    const labelsIet = [];
    for (const [text, trained] of r.pieces_iet || []) {
      const p = await enc(text);
      for (const id of p) {
        ietIds.push(id);
        labelsIet.push(trained ? id : -100);
      }
    }
    const consistentIet = ietIds.length === ids.length && ietIds.every((x, k) => x === ids[k]);
    out.push(
      JSON.stringify({
        input_ids: ids,
        labels,
        consistent,
        labels_iet: labelsIet,
        consistent_iet: consistentIet,
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
