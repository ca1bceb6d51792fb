#!/usr/bin/env node
// Reference tokenization with the Rust Hugging Face `tokenizers` library (through the
// @anush008/tokenizers N-API binding), plus a second opinion from the pure-JS
// @huggingface/tokenizers. Both are pinned in the repository's package.json and installed
// by scripts/fetch-assets.
//
// Usage: node tok_ref.js TOKENIZER_JSON [TOKENIZER_CONFIG_JSON] < corpus.jsonl > ref.jsonl
//        node tok_ref.js TOKENIZER_JSON --decode-only < id_arrays.jsonl > decoded.jsonl
//   --no-js skips the @huggingface/tokenizers comparison (js_agree null)
//   input lines: {"text": "..."} or a bare JSON string
//   output lines: {"ids": [...], "decoded": "...", "decoded_skip": "...", "js_agree": bool|null}
//     ids           Rust encode(text, add_special_tokens=false)
//     decoded       Rust decode(ids, skip_special_tokens=false)
//     decoded_skip  Rust decode(ids, skip_special_tokens=true)
//     js_agree      @huggingface/tokenizers gives the same ids (null when it threw)
// A summary goes to stderr. Exits 2 (with the reason) when a library cannot be loaded.
"use strict";
const fs = require("fs");
const path = require("path");

function fail(msg) {
  process.stderr.write("tok_ref.js: " + msg + "\n");
  process.exit(2);
}

let rust, hfjs;
try {
  rust = require("@anush008/tokenizers");
} catch (e) {
  fail("cannot load @anush008/tokenizers (run scripts/fetch-assets): " + e.message);
}
try {
  hfjs = require("@huggingface/tokenizers");
} catch (e) {
  fail("cannot load @huggingface/tokenizers (run scripts/fetch-assets): " + e.message);
}

async function main() {
  const tokPath = process.argv[2];
  if (!tokPath) fail("usage: node tok_ref.js TOKENIZER_JSON [TOKENIZER_CONFIG_JSON] < in > out");
  if (!fs.existsSync(tokPath)) fail(tokPath + " not found (run scripts/fetch-assets)");
  const cfgPath = process.argv[3] && !process.argv[3].startsWith("--") ? process.argv[3]
    : path.join(path.dirname(tokPath), "tokenizer_config.json");
  const tok = rust.Tokenizer.fromFile(tokPath);
  let js = null;
  if (!process.argv.includes("--no-js")) try {
    const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
    js = new hfjs.Tokenizer(JSON.parse(fs.readFileSync(tokPath, "utf8")), cfg);
  } catch (e) {
    process.stderr.write("tok_ref.js: @huggingface/tokenizers cannot load " + tokPath + ": " + e.message + "\n");
  }

  const lines = fs.readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0);
  if (process.argv.includes("--decode-only")) {
    // input lines: JSON id arrays; output: {"decoded", "decoded_skip"} (Rust decode)
    const idss = lines.map((l) => JSON.parse(l));
    const a = await tok.decodeBatch(idss, false);
    const b = await tok.decodeBatch(idss, true);
    process.stdout.write(idss.map((_, i) => JSON.stringify({ decoded: a[i], decoded_skip: b[i] })).join("\n") + "\n");
    return;
  }
  const texts = lines.map((l) => {
    const v = JSON.parse(l);
    return typeof v === "string" ? v : v.text;
  });
  const out = [];
  let jsAgree = 0, jsDisagree = 0, jsError = 0;
  const CHUNK = 256;
  for (let s = 0; s < texts.length; s += CHUNK) {
    const chunk = texts.slice(s, s + CHUNK);
    const encs = await tok.encodeBatch(chunk, { addSpecialTokens: false });
    const ids = encs.map((e) => e.getIds());
    const dec = await tok.decodeBatch(ids, false);
    const decSkip = await tok.decodeBatch(ids, true);
    for (let i = 0; i < chunk.length; ++i) {
      let agree = null;
      if (js) {
        try {
          const j = js.encode(chunk[i], { add_special_tokens: false }).ids;
          agree = j.length === ids[i].length && j.every((x, k) => x === ids[i][k]);
        } catch (e) {
          agree = null;
        }
      }
      if (agree === true) ++jsAgree;
      else if (agree === false) ++jsDisagree;
      else ++jsError;
      out.push(JSON.stringify({ ids: ids[i], decoded: dec[i], decoded_skip: decSkip[i], js_agree: agree }));
    }
  }
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
  process.stderr.write(
    `tok_ref.js: ${texts.length} texts; @huggingface/tokenizers agrees on ${jsAgree}, ` +
      `disagrees on ${jsDisagree}, failed on ${jsError}\n`
  );
}

main().catch((e) => fail(e.stack || String(e)));
