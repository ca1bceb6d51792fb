#!/usr/bin/env python3
"""Reference chat rendering: jinja2 (the project environment, .venv) rendering the REAL Qwen3 chat_template.

Usage: .venv/bin/python template_ref.py TOKENIZER_CONFIG_JSON OUT_DIR [N_RANDOM=300]

Writes OUT_DIR/convs.jsonl  — {"messages": [...]} rows (deterministic: hand-written cases + seeded
                               random conversations), the input of `twinkle encode`;
       OUT_DIR/render.jsonl — per row {"text", "text_gen", "text_gen_nothink", "pieces"}:
           text             render(add_generation_prompt=False)                (enable_thinking=True)
           text_gen         render(add_generation_prompt=True)                 (enable_thinking=True)
           text_gen_nothink render(add_generation_prompt=True, enable_thinking=False)
           iet_ranges       [[start, end], ...] code-point ranges of text matched by ms-swift's
                            ignore_empty_think regex at the start of each trained piece (Python re
                            on a str: Unicode \s); tokens wholly inside one are untrained
           pieces           [[substring, trained], ...] covering text: each assistant turn is trained
                            from the end of its "<|im_start|>assistant\\n" header through its
                            "<|im_end|>\\n" (found by searching the rendered text, independently of
                            the C++ renderer's bookkeeping).
The environment mirrors transformers' _compile_jinja_template: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, a tojson filter and raise_exception (template_check.py
also compares these renders with transformers' own apply_chat_template, template_hf_ref.py).
"""
import json
import os
import random
import re
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HEADER = "<|im_start|>assistant\n"
END = "<|im_end|>\n"


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


USER = [
    "Hi", "What is 2+2?", "Explain BPE tokenization in one sentence.", "你好，请介绍一下你自己。",
    "これは何ですか？", "Write a Python function that reverses a string.", "I'M asking: you'll help, won't you?",
    "  leading and trailing spaces  ", "Line one\nLine two\r\nLine three", "emoji 👨‍👩‍👧 and flags 🇺🇸",
    "Tell me about <think> tags and </think> tags.", "text with <|endoftext|> inside", "caf\u00e9 and cafe\u0301",
    "numbers 1234567890 and 3.14159", "tabs\tand\t\tmore", "\n\nstarts with newlines", "ends with newline\n",
    "<tool_response>\nnot really a tool response, it does not end with the tag", "long " * 50,
]
ASSISTANT = [
    "Hello! How can I help you today?", "4", "BPE merges the most frequent pairs of symbols.",
    "我是一个AI助手。", "それはペンです。", "def rev(s):\n    return s[::-1]\n", "Sure, I'll help.",
    "Here is a list:\n- a\n- b\n- c", "```python\nprint('hi')\n```", "Answer with trailing newlines\n\n",
    "emoji 😀 reply", "The <think> tag marks reasoning.", "<|endoftext|> is a special token.",
    "Mixed 中文 and English.", "   indented answer", "x" * 300,
]
REASONING = [
    "The user greets me.", "\nsimple arithmetic\n", "Let me think step by step.\nFirst, ...\nThen, ...",
    "用户在打招呼。", "\n\n", "reasoning with </think> inside? no", "多行\n推理", "",
]
TOOL = ['{"result": 42}', "file contents:\nline1\nline2", "error: not found", "[]"]


def assistant_message(rng):
    content = rng.choice(ASSISTANT)
    r = rng.random()
    m = {"role": "assistant", "content": content}
    if r < 0.25:
        pass  # no reasoning_content key
    elif r < 0.35:
        m["reasoning_content"] = None
    elif r < 0.45:
        m["reasoning_content"] = ""
    elif r < 0.7:
        m["reasoning_content"] = rng.choice(REASONING)
    elif r < 0.85:
        m["content"] = "<think>\n" + rng.choice(REASONING) + "\n</think>\n\n" + content
    elif r < 0.92:
        m["content"] = rng.choice(REASONING) + "</think>" + content
    else:
        m["content"] = "<think>a</think>b</think>\n\n" + content
    return m


def random_conv(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "你是一个有用的助手。",
                                                              "Be concise.\nAnswer in English.", ""])})
    turns = rng.randint(1, 4)
    for t in range(turns):
        if rng.random() < 0.15 and t > 0:
            msgs.append({"role": "system", "content": "Mid-conversation system note."})
        if rng.random() < 0.1 and t > 0:
            msgs.append({"role": "user", "content": "<tool_response>\n" + rng.choice(TOOL) + "\n</tool_response>"})
        else:
            msgs.append({"role": "user", "content": rng.choice(USER)})
        last_turn = t == turns - 1
        if last_turn and rng.random() < 0.2:
            break  # ends with a user message
        msgs.append(assistant_message(rng))
        if rng.random() < 0.2:
            for _ in range(rng.randint(1, 3)):
                msgs.append({"role": "tool", "content": rng.choice(TOOL)})
            msgs.append(assistant_message(rng))
    return {"messages": msgs}


def fixed_convs():
    u = lambda c: {"role": "user", "content": c}
    a = lambda c, **k: dict({"role": "assistant", "content": c}, **k)
    s = lambda c: {"role": "system", "content": c}
    return [
        {"messages": [u("Hi"), a("Hello!")]},
        {"messages": [s("You are helpful."), u("Hi"), a("Hello!")]},
        {"messages": [u("Hi")]},
        {"messages": [s("sys"), u("Hi")]},
        {"messages": [u("Hi"), a("Hello!", reasoning_content="greeting")]},
        {"messages": [u("Hi"), a("Hello!", reasoning_content="")]},
        {"messages": [u("Hi"), a("Hello!", reasoning_content=None)]},
        {"messages": [u("Hi"), a("<think>\nhmm\n</think>\n\nHello!")]},
        {"messages": [u("Hi"), a("<think>\nhmm\n</think>\n\nHello!", reasoning_content="")]},
        {"messages": [u("q1"), a("r1", reasoning_content="t1"), u("q2"), a("r2", reasoning_content="t2")]},
        {"messages": [u("q1"), a("r1"), u("q2"), a("r2")]},
        {"messages": [u("q1"), a("<think>x</think>r1"), u("q2"), a("<think>y</think>r2")]},
        {"messages": [s("S"), u("q1"), a("r1"), u("q2"), a("r2"), u("q3")]},
        {"messages": [u("q"), a("calling a tool"), {"role": "tool", "content": "42"}, a("the answer is 42")]},
        {"messages": [u("q"), a("tools", reasoning_content="plan"), {"role": "tool", "content": "1"},
                      {"role": "tool", "content": "2"}, a("done", reasoning_content="combine")]},
        {"messages": [u("q"), a("a1"), u("<tool_response>\n42\n</tool_response>"), a("a2", reasoning_content="r")]},
        {"messages": [s("first"), u("q"), s("second system"), a("a")]},
        {"messages": [u("你好"), a("你好！有什么可以帮你的吗？", reasoning_content="用户打招呼")]},
        {"messages": [u("emoji 👨‍👩‍👧"), a("😀")]},
        {"messages": [u("q"), a("\n\nanswer after newlines")]},  # last turn: lstrip('\n') applies
        {"messages": [u("q"), a("  spaced answer  ")]},
        {"messages": [u("q"), a("a", reasoning_content="\n\nr\n\n")]},
        {"messages": [u("multi\nline\nquestion"), a("multi\nline\nanswer\n")]},
        {"messages": [u("q"), a("a</think>b", reasoning_content="")]},
        {"messages": [u("q"), a("x<think>y</think>\n\nz", reasoning_content=None)]},
        {"messages": [u("q"), a("<think>\n\nr\n\n</think>\n\n\na"), u("q2"), a("<think>s</think>b")]},
        # ignore_empty_think: the regex's trailing \s* ends inside the token " Hello" / " 1" (content
        # starting with spaces), Unicode \s (U+3000, U+00A0, U+2003 in two byte-level tokens)
        {"messages": [u("q"), a(" Hello")]},
        {"messages": [u("q"), a("   three spaces")]},
        {"messages": [u("q"), a(" 1"), u("q2"), a(" two", reasoning_content="")]},
        {"messages": [u("q"), a("\u3000\u4f60\u597d")]},
        {"messages": [u("q"), a("\u00a0\u3000\n\n\u4f60\u597d", reasoning_content=" \u2003")]},
        {"messages": [u("q"), a("\t\x1c tab and file separator")]},
        # an earlier assistant turn starting with newlines: "assistant\n" + "\n\n..." is one
        # pre-token, so no label boundary exists there (twinkle must reject the row)
        {"messages": [u("q1"), a("\n\nfirst answer"), u("q2"), a("second")]},
    ]


def render(tmpl, msgs, gen, thinking):
    return tmpl.render(messages=msgs, add_generation_prompt=gen, enable_thinking=thinking, tools=None)


def pieces_of(text, n_assistant):
    pieces, pos, found = [], 0, 0
    while True:
        h = text.find(HEADER, pos)
        if h < 0:
            break
        b = h + len(HEADER)
        e = text.find(END, b)
        if e < 0:
            raise SystemExit("template_ref.py: assistant turn without <|im_end|>\\n in " + json.dumps(text))
        e += len(END)
        pieces.append([text[pos:b], False])
        pieces.append([text[b:e], True])
        pos = e
        found += 1
    pieces.append([text[pos:], False])
    if found != n_assistant:
        raise SystemExit(f"template_ref.py: found {found} assistant headers for {n_assistant} assistant messages")
    return [p for p in pieces if p[0]]


# ms-swift's loss_scale "ignore_empty_think" (swift/loss_scale/config/ignore_empty_think.json):
# the part of an assistant response matching this regex at its start gets loss scale 0.
EMPTY_THINK = re.compile(r"^<think>\s*</think>\s*")


def ignore_empty_think_ranges(pieces):
    out, pos = [], 0
    for text, trained in pieces:
        m = EMPTY_THINK.match(text) if trained else None
        if m and m.end() > 0:
            out.append([pos, pos + m.end()])
        pos += len(text)
    return out


def shipped_self_cognition():
    """The shipped data/self_cognition.jsonl through the recipe's preprocessing, written here
    independently of twinkle: {{NAME}} / {{AUTHOR}} replaced literally in query and response
    (Twinkle's SelfCognitionProcessor), messages [system, user, assistant]."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "self_cognition.jsonl")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            fill = lambda t: t.replace("{{NAME}}", "twinkle大模型").replace("{{AUTHOR}}", "ModelScope社区")
            out.append({"messages": [{"role": "system", "content": "You are a helpful assistant."},
                                     {"role": "user", "content": fill(row["query"])},
                                     {"role": "assistant", "content": fill(row["response"])}]})
    return out


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    cfg_path, out_dir = sys.argv[1], sys.argv[2]
    n_random = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    with open(cfg_path, encoding="utf-8") as f:
        source = json.load(f)["chat_template"]
    tmpl = make_env().from_string(source)
    rng = random.Random(4242)
    convs = fixed_convs() + shipped_self_cognition() + [random_conv(rng) for _ in range(n_random)]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "convs.jsonl"), "w", encoding="utf-8") as fc, \
            open(os.path.join(out_dir, "render.jsonl"), "w", encoding="utf-8") as fr:
        for c in convs:
            msgs = c["messages"]
            for m in msgs:  # the span search needs these literals to come from the template only
                assert HEADER not in m["content"] and "<|im_end|>" not in m["content"]
            text = render(tmpl, msgs, False, True)
            n_asst = sum(1 for m in msgs if m["role"] == "assistant")
            fc.write(json.dumps(c, ensure_ascii=False) + "\n")
            fr.write(json.dumps({
                "text": text,
                "text_gen": render(tmpl, msgs, True, True),
                "text_gen_nothink": render(tmpl, msgs, True, False),
                "pieces": pieces_of(text, n_asst),
                "iet_ranges": ignore_empty_think_ranges(pieces_of(text, n_asst)),
            }, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
