"""How much of the Markov tail's W2 a greedy step must read if rows are
pruned by a bound (an analysis with the numpy reference; nothing in the
runtime uses it yet).

A greedy slot picks the best (value, id) of logit_v = bf16(f32(base_v) +
bf16(W2[v] . W1[prev])) over the vocabulary, and the full step reads all of
W2 ([V, R] bf16) once per drafted token. With U_v an upper bound of |W2[v] .
w1| that holds for the computed fp32 product too (Cauchy-Schwarz:
||W2[v]|| ||w1|| (1 + R 2^-23), norms precomputed at load), a row whose
bf16(f32(base_v) + bf16(U_v)) is below the best exact logit found cannot
win: the rounding chain is monotone. Only the rows whose bound reaches the
winner need their product. This script counts them, per drafted slot, for
the shipped pair on held-out text (teacher-forced: each proposal is anchored
at a position of the text, its context the text before it), and for a
blocked bound (the sum over B blocks of R of the blocks' norm products,
tighter, B norms per row).

usage: python3 bench/markov_prune.py [--target models/kjv-target] [--draft models/kjv-draft]
                                     [--text models/heldout.txt] [--anchors 40] [--blocks 4]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import dspark_ref  # noqa: E402
import qwen3_ref  # noqa: E402
import ref  # noqa: E402

F32 = np.float32


def bf16r(x):
    return ref.f32(ref.bf16(np.asarray(x, F32)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="models/kjv-target")
    ap.add_argument("--draft", default="models/kjv-draft")
    ap.add_argument("--text", default="models/heldout.txt")
    ap.add_argument("--anchors", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=4)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    m = qwen3_ref.Qwen3.from_dir(a.target)
    d = dspark_ref.DSparkDraft.from_dir(a.draft, target=m)
    tk = Tokenizer.from_file(os.path.join(a.target, "tokenizer.json"))
    lines = [x for x in open(a.text, encoding="utf-8").read().splitlines() if len(x) > 60]
    ids = tk.encode(" ".join(lines[40:60])).ids[:64 + a.anchors]
    V, R, G = d.V, d.R, d.gamma
    w2 = ref.f32(d.w2[:V]).astype(np.float64)
    n2 = np.sqrt((w2 * w2).sum(1))
    nb = np.stack([np.sqrt((w2[:, b::a.blocks] ** 2).sum(1)) for b in range(a.blocks)], 1)  # strided blocks
    slack = 1.0 + R * 2.0 ** -23
    _, taps = m.logits(ids, taps=d.taps)
    feats = d.features(taps)
    cs_counts, blk_counts, spread = [[] for _ in range(G)], [[] for _ in range(G)], []
    for start in range(64, 64 + a.anchors):
        cache = d.new_context()
        out = d.propose([cache], [feats[:start]], [ids[start]], [start])
        h = out["hidden"]
        base = ref.f32(ref.product(np.asarray(h).reshape(G, -1), d.lm_head))[:, :V]
        prev = ids[start]
        for k in range(G):
            w1 = ref.f32(d.w1[prev]).astype(np.float64)
            logit = ref.f32(out["logits"][0][k])[:V]
            best = logit.max()
            u_cs = n2 * np.sqrt((w1 * w1).sum()) * slack
            w1b = np.array([np.sqrt((w1[b::a.blocks] ** 2).sum()) for b in range(a.blocks)])
            u_blk = (nb * w1b).sum(1) * slack
            for u, store in ((u_cs, cs_counts[k]), (u_blk, blk_counts[k])):
                ub = bf16r(base[k] + bf16r(u.astype(F32)))
                store.append(int((ub >= best).sum()))
            spread.append((float(np.std(base[k])), float(np.std(logit - base[k]))))
            prev = int(out["tokens"][0][k])
    print("shipped pair: V %d, rank %d, %d proposals of %d slots; base logit std %.2f, Markov bias std %.2f" % (
        V, R, a.anchors, G, np.mean([s[0] for s in spread]), np.mean([s[1] for s in spread])))
    print("| slot | rows to read, Cauchy-Schwarz bound (median, max) | blocked bound, %d blocks (median, max) |"
          % a.blocks)
    print("|---|---|---|")
    for k in range(G):
        print("| %d | %d, %d (%.1f%% of V) | %d, %d (%.1f%% of V) |" % (
            k, np.median(cs_counts[k]), max(cs_counts[k]), 100.0 * np.median(cs_counts[k]) / V,
            np.median(blk_counts[k]), max(blk_counts[k]), 100.0 * np.median(blk_counts[k]) / V))


if __name__ == "__main__":
    main()
