#!/usr/bin/env python3
"""Builds Qwen-format tokenizer.json files with Hugging Face `tokenizers`.

The main file, qwen.json, has what Qwen2/Qwen3 ship: a byte-level BPE trained
here on a generated corpus, NFC, Qwen's split regex then ByteLevel, ByteLevel
decoder and post-processor, and special tokens after the vocab. The variants
exercise the other forms the C loader accepts:

  qwen_legacy.json  merges as "a b" strings, subword prefix / suffix ""
  gpt2.json         bare ByteLevel pre-tokenizer (GPT-2's regex), no normalizer
  options.json      added tokens with lstrip / rstrip / single_word /
                    normalized, one that is also a vocab entry; ignore_merges
  unk.json          a vocab without most non-ASCII bytes and an unk_token
  unk_fused.json    the same with fuse_unk
  nounk.json        the same without unk_token (unknown bytes are dropped)

usage: make_tokenizer.py OUTDIR [--vocab N] [--seeds DIR]
  --seeds  also write small seed inputs for fuzz/fuzz_tokenizer.c: tiny
           tokenizer.json variants and a few texts
"""
import argparse
import copy
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# Seed sentences in several scripts, written for this test.
SEEDS = [
    "The quick brown fox doesn't jump over the lazy dog; it's tired, and we'll let it sleep.",
    "I've seen 12 cats and 3405 dogs in 2024, they're all well.",
    "Le cœur a ses raisons que la raison ne connaît point, déjà vu à l'école.",
    "Über die Brücke gehen zwölf Männer mit großen Füßen.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "敏捷的棕色狐狸跳过了懒狗。我们今天去北京大学学习中文。",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ。東京は大きい都市です。",
    "다람쥐 헌 쳇바퀴에 타고파. 한국어를 공부합니다.",
    "def main(argv):\n    return sum(int(x) for x in argv[1:])  # total\n",
    "for (int i = 0; i < n; i++) {\n\tprintf(\"%d\\n\", a[i]);\n}\r\n",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ and more 🚀🚀🚀.",
    "Prices: $19.99, €5, ¥1000, 3.14159265358979, 1,000,000 and 0x1F600.",
    "   indented line with trailing spaces   \n\n\nnext paragraph",
]

WORD_PARTS = ["an", "ther", "ing", "tion", "qu", "ly", "ment", "er", "es", "pre", "con", "ab", "ou", "ei", "sch",
              "ch", "th", "ph", "str", "io", "ñ", "é", "ü", "ø", "å", "ß", "ł", "ž", "ă", "ı"]


def corpus_lines(rng, n):
    out = []
    for _ in range(n):
        k = rng.random()
        if k < 0.5:
            out.append(rng.choice(SEEDS))
        elif k < 0.8:
            words = ["".join(rng.choice(WORD_PARTS) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(3, 12))]
            if rng.random() < 0.3:
                words = [w.capitalize() for w in words]
            out.append(" ".join(words) + rng.choice([".", ",", "!", "?", "", "\n"]))
        else:
            s = rng.choice(SEEDS)
            a = rng.randrange(len(s))
            out.append(s[a:] + " " + str(rng.randint(0, 10**rng.randint(1, 9))))
    return out


def make_main(vocab_size, alphabet=True, unk=None, fuse_unk=False, lines=30000):
    tok = Tokenizer(models.BPE(unk_token=unk, fuse_unk=fuse_unk, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if alphabet else [],
        special_tokens=[unk] if unk else [])
    rng = random.Random(1234)
    lines = corpus_lines(rng, lines)
    if not alphabet:  # ASCII only, so most byte symbols stay out of the vocab
        lines = [l.encode("ascii", "ignore").decode() for l in lines]
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return json.loads(tok.to_str())


def write(outdir, name, obj):
    path = os.path.join(outdir, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
    Tokenizer.from_file(path)  # tokenizers itself must accept every variant
    return path


def added(obj, content, special, lstrip=False, rstrip=False, single_word=False, normalized=False, vocab=None):
    ids = [a["id"] for a in obj["added_tokens"]]
    vid = obj["model"]["vocab"].get(content)
    obj["added_tokens"].append({
        "id": vid if vid is not None else max(ids + [len(obj["model"]["vocab"]) - 1]) + 1,
        "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
        "normalized": normalized, "special": special})


def write_seeds(outdir):
    """Small inputs for the fuzzer: it reads each as a tokenizer.json and as text."""
    os.makedirs(outdir, exist_ok=True)
    tiny = make_main(120, alphabet=False, lines=300)
    variants = {"tiny.json": tiny}
    v = copy.deepcopy(tiny)
    v["model"]["merges"] = [a + " " + b for a, b in v["model"]["merges"]]
    variants["tiny_legacy.json"] = v
    v = copy.deepcopy(tiny)
    v["normalizer"] = None
    v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    variants["tiny_gpt2.json"] = v
    v = copy.deepcopy(tiny)
    v["model"]["ignore_merges"] = True
    added(v, "<mask>", True, lstrip=True, rstrip=True)
    added(v, "[W]", False, single_word=True)
    added(v, "cafe\u0301", False, normalized=True)
    variants["tiny_options.json"] = v
    for name, obj in variants.items():
        with open(os.path.join(outdir, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
    texts = [s.encode() for s in SEEDS[:6]] + [
        "<|im_start|>user\nhi<|im_end|>\n".encode(), "e\u0301 A\u030a \u212b".encode(), b"a\xff\xe2\x82b",
        " <m> [w] cafe\u0301 ".encode(), "IT'S we'll 12345 \t\r\n  ".encode()]
    for i, t in enumerate(texts):
        with open(os.path.join(outdir, f"text{i}.txt"), "wb") as f:
            f.write(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--vocab", type=int, default=6000)
    ap.add_argument("--seeds")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    if args.seeds:
        write_seeds(args.seeds)

    base = make_main(args.vocab)
    write(args.outdir, "qwen.json", base)

    legacy = copy.deepcopy(base)
    m = legacy["model"]
    m["merges"] = [a + " " + b for a, b in m["merges"]]
    m["continuing_subword_prefix"] = ""
    m["end_of_word_suffix"] = ""
    write(args.outdir, "qwen_legacy.json", legacy)

    gpt2 = copy.deepcopy(base)
    gpt2["normalizer"] = None
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    write(args.outdir, "gpt2.json", gpt2)

    opt = copy.deepcopy(base)
    opt["model"]["ignore_merges"] = True
    added(opt, "<mask>", True, lstrip=True, rstrip=True)
    added(opt, "[W]", False, single_word=True)
    added(opt, "cafe\u0301", False, normalized=True)          # matched in NFC text as "café"
    added(opt, "<sep>", False, lstrip=True, normalized=True)
    added(opt, "<sep>>", False)                                 # longer match at the same start
    added(opt, "the", False, normalized=True)                   # also a vocab entry: keeps its id
    write(args.outdir, "options.json", opt)

    unk = make_main(600, alphabet=False, unk="<unk>")
    write(args.outdir, "unk.json", unk)
    fused = copy.deepcopy(unk)
    fused["model"]["fuse_unk"] = True
    write(args.outdir, "unk_fused.json", fused)
    nounk = copy.deepcopy(unk)
    nounk["model"]["unk_token"] = None
    write(args.outdir, "nounk.json", nounk)


if __name__ == "__main__":
    main()
