#!/usr/bin/env python3
"""Deterministic tokenizer test corpus: one JSON object per line {"text": str, "nfc_stable": bool}.

Usage: tok_corpus.py [N_RANDOM=1600] [--specials-from TOKENIZER_JSON] > corpus.jsonl
       tok_corpus.py --sweep > probes.jsonl   (one probe string per code point, ~100k lines)

Covers what a byte-level BPE with Qwen's Split regex, NFC and added tokens can get wrong:
Chinese / Japanese / Korean (incl. conjoining jamo and kana voicing marks that NFC composes),
emoji and ZWJ / flag / keycap / skin-tone sequences, combining marks NFC composes or reorders,
singletons NFC replaces (U+212B, U+2126), digits and long numbers in several scripts, long
whitespace runs, CRLF, tabs, exotic spaces (U+0085, U+00A0, U+2028, U+3000, U+FEFF, U+200B, U+180E),
letters and digits added by Unicode 15-17 (the regex engines' Unicode versions differ),
English contractions in every case (also U+017F long s), code snippets, and the special /
added tokens <|im_start|>, <|im_end|>, <|endoftext|>, <think>, </think> inside text, adjacent
to spaces and newlines, partial and nested. Then seeded random mixes of all of the above.
"""
import json
import random
import sys
import unicodedata

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<|vision_pad|>", "<tool_response>"]
PARTIALS = ["<|im_start", "|im_end|>", "<think", "</think >", "< think>", "<|im_end|", "<|IM_START|>",
            "<<|im_start|>>", "<think><think>", "</think></think>", "<|<|im_end|>|>"]

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'vE", "'M", "'LL",
                "'lL", "'D", "'ſ", "'x", "'", "''", "’s", "'sS"]

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "I'M sure you'll like it, won't you? THEY'RE here; we've been waiting.",
    "She'd've done it if he'D asked. It's 5 o'clock somewhere.",
    "Hello, world! How are you doing today?",
    "Mr. O'Neil's car isn't RED; it's BLUE.",
    "  leading spaces and trailing spaces   ",
    "UPPER lower MiXeD CaSe",
    "e-mail: someone@example.com, url: https://example.org/a?b=c&d=e#frag",
    "price: $1,234.56 (≈ €1.100,00) — 50% off!!!",
    "Tabs\tand\t\tmore\t\t\ttabs",
    "Windows line\r\nendings\r\n\r\nhere\r\n",
    "Mixed\n\n\nnewlines\r\r\nand\n \n \nspaces",
]

CJK = [
    "你好，世界！今天天气很好。",
    "深度学习模型的训练需要大量的数据和计算资源。",
    "我喜欢吃苹果，你呢？",
    "東京は日本の首都です。",
    "ひらがなとカタカナとかんじ。",
    "これはテストです。ｶﾀｶﾅ（半角）も。",
    "한국어 문장입니다. 안녕하세요!",
    "中英混合 mixed text 中文English混排123个",
    "「引用」『二重引用』【括弧】〈山括弧〉",
    "全角数字１２３４５と全角英字ＡＢＣ",
]

EMOJI = [
    "😀😃😄😁", "👍🏽 thumbs up", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇺🇸🇨🇳🇯🇵 flags", "1️⃣ keycap",
    "❤️ heart", "🧑🏿‍💻 coder", "👩‍❤️‍💋‍👨", "😀 text 😀 text", "🙂🙃", "🫠🫡 new emoji", "✅❌⚠️",
]

COMBINING = [
    "e\u0301", "cafe\u0301", "Cafe\u0301 de\u0301ja\u0300 vu", "a\u0308", "o\u0308", "A\u030A", "\u212B",
    "\u2126", "n\u0303", "a\u0323\u0302", "a\u0302\u0323", "q\u0307\u0323", "\u1100\u1161\u11A8",
    "\u1112\u1161\u11AB\u1100\u1173\u11AF", "\u304B\u3099", "\u30CF\u309A", "\u0041\u030A\u0301",
    "\u00C5", "\u0065\u0301\u0301", "\u0301 leading mark", "x\u0327\u0301", "\u0958", "\u09CB",
    "\u0B47\u0B3E", "\u1E9B\u0323", "\uFB01 ligature", "\u00BD fraction", "\u2460 circled",
    # marks newer than the reference's normalization tables (Unicode 9.0): inert there
    "a\u0898\u0301", "\u07FD\u0327\u0301", "e\u0D3C\u0301", "\u0627\u08CA\u064B", "a\u1ABF\u0300",
]

DIGITS = [
    "12345678901234567890", "3.14159265358979", "1,000,000", "0x1F4A9", "1e-10", "2024-01-31",
    "٠١٢٣٤٥٦٧٨٩", "१२३", "１２３", "²³¹", "Ⅻ roman", "123abc456", "v1.2.3-rc4", "+86 138 0013 8000",
    "9" * 100, "1234 5678\t9012\n3456",
]

SPACES = [
    " ", "  ", " " * 7, " " * 64, " " * 300, "\t", "\t\t\t", "\n", "\n\n", "\r\n", "\r", "\r\r\n\n",
    " \n", "\n ", " \n ", "\t\n\t", "a\u00A0b", "a\u3000b", "a\u0085b", "a\u2028b", "a\u2029b",
    "a\u200Bb", "\uFEFFbom", "a\u202Fb", "a\u2003b", "a \u00A0 b", "x" + " " * 33 + "y",
    "end with spaces   ", "   ", "\u3000\u3000", " \t \t ",
]

CODE = [
    "def f(x):\n    return x ** 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "<div class=\"x\"><p>Hello</p></div>",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "if [ -f \"$HOME/.bashrc\" ]; then\n  source ~/.bashrc\nfi",
    "x = [i for i in range(10) if i % 2 == 0]  # comment",
    "const f = async (a, b) => { await g(a); return a ?? b; };",
    "    indented\n        more indented\n\tand tab",
    "a=1;b=2;c=a+b;print(c)",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$$\\int_0^1 x^2 \\, dx = \\frac{1}{3}$$",
]

OTHER_SCRIPTS = [
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
    "สวัสดีชาวโลก", "Xin chào thế giới", "Ḽơᶉëᶆ ȋṕšᶙṁ", "ÀÉÎÕÜ àéîõü ß ẞ", "İstanbul ıi",
    "ﬁﬂ ligatures", "Ⓐⓑⓒ", "𝐀𝐁𝐂 math bold", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ Σ ΑΣ' ΑΣ\u0301Β",
    "İSTANBUL ǅemal ǄŽ ß ẞ ΐ", "ΌΣΟΣ, ΚΌΣΜΟΣ!",
]

# Code points whose properties changed after Unicode 14.0 (Debian 12's PCRE2 tables): letters
# and digits of Unicode 15.0 / 16.0 (CJK Ext. H, Kawi, Garay, Todhri), Unicode 17.0 ones the
# reference library does not know yet (CJK Ext. J), and U+180E (not White_Space).
NEW_UNICODE = [
    "\U00031350\U00031351\U00031352 ext-H", "x\U00011F04\U00011F05y", "\U00010D40\U00010D41 garay digits",
    "\U000105C0\U000105C1", "x\u180Ey \u180E\u180E 1\u180E's", "\u1C89\u1C8A", "\U000323B0\U000323B1 ext-J",
    "\uA7CB\uA7CC\uA7CD", "\U00011F50\U00011F51 kawi digits",
]

POOLS = {
    "ascii": [chr(c) for c in range(0x20, 0x7F)],
    "letters": list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    "cjk": [chr(c) for c in range(0x4E00, 0x4E00 + 3000)],
    "kana": [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)],
    "hangul": [chr(c) for c in range(0xAC00, 0xAC00 + 500)],
    "emoji": [chr(c) for c in range(0x1F600, 0x1F650)] + ["\u200D", "\uFE0F", "\U0001F3FD"],
    "combining": [chr(c) for c in range(0x300, 0x370)] + ["\u3099", "\u309A"],
    "ws": [" ", " ", " ", "\t", "\n", "\r\n", "\r", "\u00A0", "\u3000", "\u2028", "\u0085", "  ", "\n\n"],
    "punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["，", "。", "！", "？", "、", "…", "—", "“", "”"],
    "digits": list("0123456789") + ["٣", "１", "²"],
    "latin_ext": [chr(c) for c in range(0xC0, 0x250)],
    "new_unicode": list("".join(NEW_UNICODE)),
    "other": [chr(c) for c in range(0x400, 0x450)] + [chr(c) for c in range(0x600, 0x650)]
    + [chr(c) for c in range(0x900, 0x950)] + [chr(c) for c in range(0xE00, 0xE50)],
}


def base_strings():
    out = []
    out += ENGLISH + CJK + EMOJI + COMBINING + DIGITS + SPACES + CODE + OTHER_SCRIPTS + NEW_UNICODE
    # contractions in context and in every case
    for c in CONTRACTIONS:
        for w in ["I", "you", "YOU", "He", "it", "x"]:
            out.append(w + c)
            out.append(w + c + " ok")
            out.append(" " + w + c + "\n")
    # special tokens in text, adjacent to spaces / newlines / letters, partial and nested
    for sp in SPECIALS + PARTIALS:
        out += [sp, " " + sp, sp + " ", " " + sp + " ", "a" + sp + "b", "\n" + sp + "\n", sp + sp,
                "  " + sp + "  ", "text" + sp, sp + "text", "你好" + sp + "世界", sp + "\n\n", "e" + sp + "\u0301"]
    out.append("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
               "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n")
    out.append("<think>\nreasoning here\n</think>\n\nanswer")
    return out


def random_string(rng):
    kind = rng.random()
    pools = list(POOLS)
    if kind < 0.15:  # long structured mix
        parts = []
        for _ in range(rng.randint(5, 60)):
            r = rng.random()
            if r < 0.3:
                parts.append(rng.choice(ENGLISH + CJK + CODE))
            elif r < 0.4:
                parts.append(rng.choice(SPECIALS + PARTIALS))
            elif r < 0.5:
                parts.append(rng.choice(SPACES))
            else:
                p = POOLS[rng.choice(pools)]
                parts.append("".join(rng.choice(p) for _ in range(rng.randint(1, 12))))
        return "".join(parts)
    n = rng.randint(1, 80)
    weights = [rng.random() ** 2 for _ in pools]
    s = []
    for _ in range(n):
        r = rng.random()
        if r < 0.02:
            s.append(rng.choice(SPECIALS))
        elif r < 0.03:
            s.append(rng.choice(CONTRACTIONS))
        else:
            s.append(rng.choice(POOLS[rng.choices(pools, weights)[0]]))
    return "".join(s)


def sweep_strings():
    """One probe string per code point: every BMP code point, every 5th one above, and all of the
    Unicode 15-16 letters / digits and post-9.0 combining marks (the ranges where the Rust
    library's Unicode versions differ from PCRE2 14.0 / utf8proc 15.0 / Unicode 9.0)."""
    cps = set(range(0x0, 0xD800)) | set(range(0xE000, 0x10000)) | set(range(0x10000, 0x40000, 5))
    for a, b in [(0x105C0, 0x105F3), (0x10D40, 0x10D85), (0x10EC2, 0x10EFF), (0x10F46, 0x10F85),
                 (0x11380, 0x113D3), (0x11BC0, 0x11BF9), (0x11F00, 0x11F59), (0x16D40, 0x16D79),
                 (0x16EA0, 0x16ED3), (0x1E030, 0x1E08F), (0x1E4D0, 0x1E4F9), (0x1E5D0, 0x1E5FA),
                 (0x31350, 0x313A0), (0x323A0, 0x323C0), (0xE0000, 0xE0080)]:
        cps |= set(range(a, b + 1))
    for cp in sorted(cps):
        c = chr(cp)
        yield "a" + c + "\u0301x" + c + "\u0327\u0301 " + c + c + " 1" + c + "'s" + c + "\n" + c


def main():
    args = sys.argv[1:]
    if "--sweep" in args:
        for t in sweep_strings():
            sys.stdout.write(json.dumps({"text": t, "nfc_stable": unicodedata.normalize("NFC", t) == t}) + "\n")
        return
    if "--specials-from" in args:  # mix the added tokens of another tokenizer.json in as well
        k = args.index("--specials-from")
        with open(args[k + 1], encoding="utf-8") as f:
            extra = [t["content"] for t in json.load(f).get("added_tokens", [])]
        del args[k:k + 2]
        SPECIALS.extend(t for t in extra if t not in SPECIALS)
        SPECIALS.extend(["[MASK]x", "a<word>b", "a <word> b", "Hello World", "hello world", "hello  world",
                         "e\u0301x", "\u00e9x", "  [MASK]  ", "x-y-z", "a,b,,c", "12-34,56 78"])
    n_random = int(args[0]) if args else 1600
    rng = random.Random(20250611)
    texts = base_strings()
    texts += [random_string(rng) for _ in range(n_random)]
    # a few long documents (tens of KB)
    for k in range(4):
        texts.append("".join(random_string(rng) for _ in range(120 + 40 * k)))
    texts.append("lorem ipsum " * 2000)
    texts.append(" " * 5000 + "x" + "\n" * 3000)
    texts.append("")
    out = sys.stdout
    for t in texts:
        out.write(json.dumps({"text": t, "nfc_stable": unicodedata.normalize("NFC", t) == t},
                             ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
