#!/usr/bin/env python3
"""Contract 5 (Gumbel-max sampling) through `dspark head`:
(a) the same seeds give the same tokens at TP 1 and TP 3 (sharding-invariant
    noise) and the oracle's tokens; other seeds change some tokens;
(b) chi-square: 4000 rows with one hidden state and anchor but different seeds
    sample V = 8 ids; the counts must fit softmax(logit / T) (statistic below
    24.32, the 0.999 quantile for 7 degrees of freedom) and must reject a wrong
    distribution (the T = 1 softmax, the uniform one), so the check can fail."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import ref  # noqa: E402

CHI2_999_DF7 = 24.32


def chi2(counts, p):
    e = p * counts.sum()
    return float(((counts - e) ** 2 / e).sum())


def part_a(tally, wd):
    rng = np.random.default_rng(5)
    B, G, V, VP, R, H = 6, 4, 300, 302, 16, 32
    lm = harness.rand_bf16(rng, (VP, H), 1 / math.sqrt(H))
    w1 = harness.rand_bf16(rng, (VP, R), 1.0)
    w2 = harness.rand_bf16(rng, (VP, R), 1 / math.sqrt(R))
    hidden = harness.rand_bf16(rng, (B, G, H), 1.0)
    anchor = rng.integers(0, V, size=B)
    temp = np.full(B, 1.0, np.float32)
    pos = rng.integers(0, 100, size=B)
    wpath = wd.file("wa.safetensors")
    harness.save_weights(wpath, lm, w1, w2, vocab=V)
    results = {}
    for si, seed in enumerate((np.arange(B, dtype=np.int64) + 1000,
                               np.arange(B, dtype=np.int64) + 2000)):
        ipath = wd.file("ia%d.safetensors" % si)
        harness.save_inputs(ipath, hidden, anchor, temp, seed, pos)
        want, want_lg = ref.head(lm, w1, w2, V, hidden, anchor, temp, seed, pos)
        for tp, path in ((1, None), (3, "sharded"), (3, "original")):
            label = "(a) seeds %d TP%d %s" % (si, tp, path or "auto")
            got = harness.head_run(tally, wd, label, wpath, ipath, np_=tp, path=path)
            if got is None:
                continue
            tally.tokens_eq(label + " vs oracle", got[0], want)
            tally.logits_eq(label + " logits", got[1], want_lg)
            results.setdefault(si, []).append(got[0])
        base = results.get(si, [want])[0]
        for other in results.get(si, [])[1:]:
            tally.tokens_eq("(a) seeds %d TP1 vs TP3" % si, other, base)
    if 0 in results and 1 in results:
        differ = int((results[0][0] != results[1][0]).sum())
        print("(a) tokens that differ between the two seed sets: %d of %d" % (differ, B * G))
        if differ == 0:
            tally.fail("(a) different seeds gave identical tokens")


def part_b(tally, wd):
    B, V, VP, R, H = 4000, 8, 11, 4, 8
    logit = np.array([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2.0])
    # lm_head is the identity on the real rows, so base = hidden exactly;
    # W2 = 0 makes every bias +0, so the logits are the hidden values.
    lm = np.zeros((VP, H))
    lm[np.arange(V), np.arange(V)] = 1
    lm[V:] = 4  # padding rows score 4 * sum(hidden) = 29: never to be drawn
    lm = ref.bf16(lm)
    w1 = harness.rand_bf16(np.random.default_rng(9), (VP, R), 1.0)
    w2 = ref.bf16(np.zeros((VP, R)))
    hidden = ref.bf16(np.tile(logit, (B, 1, 1)))
    anchor = np.full(B, 3, np.int64)
    seed = np.arange(B, dtype=np.int64) * 7919 + 12345
    wpath = wd.file("wb.safetensors")
    harness.save_weights(wpath, lm, w1, w2, vocab=V)
    for T, runs in ((0.7, ((1, None), (3, "sharded"))), (1.5, ((1, None),))):
        temp = np.full(B, T, np.float32)
        ipath = wd.file("ib.safetensors")
        harness.save_inputs(ipath, hidden, anchor, temp, seed)
        want, want_lg = ref.head(lm, w1, w2, V, hidden, anchor, temp, seed)
        lg = ref.f32(want_lg[0, 0]).astype(np.float64)
        assert np.array_equal(lg, logit)
        p = ref.softmax(lg, T)
        # The oracle's own draws must fit, and the wrong answers must not.
        own = np.bincount(want[:, 0], minlength=V)
        stats = {"T": chi2(own, p), "T=1": chi2(own, ref.softmax(lg, 1.0)),
                 "uniform": chi2(own, np.full(V, 1.0 / V))}
        print("(b) T=%.1f oracle counts %s; chi2 vs softmax(l/T) %.2f, vs softmax(l) %.2f, "
              "vs uniform %.2f" % (T, own.tolist(), stats["T"], stats["T=1"], stats["uniform"]))
        if not stats["T"] < CHI2_999_DF7:
            tally.fail("(b) T=%.1f: the oracle's draws fail the chi-square (%.2f)" % (T, stats["T"]))
        if not (stats["T=1"] > CHI2_999_DF7 and stats["uniform"] > CHI2_999_DF7):
            tally.fail("(b) T=%.1f: the test cannot tell a wrong distribution" % T)
        for tp, path in runs:
            label = "(b) T=%.1f TP%d %s" % (T, tp, path or "auto")
            got = harness.head_run(tally, wd, label, wpath, ipath, np_=tp, path=path)
            if got is None:
                continue
            tok = got[0]
            if tok.shape != (B, 1) or tok.min() < 0 or tok.max() >= V:
                tally.fail("%s: tokens out of range or shape %s" % (label, tok.shape))
                continue
            counts = np.bincount(tok[:, 0], minlength=V)
            s = chi2(counts, p)
            wrong = min(chi2(counts, ref.softmax(lg, 1.0)), chi2(counts, np.full(V, 1.0 / V)))
            print("%s: counts %s, chi2 %.2f (limit %.2f), nearest wrong distribution %.2f" % (
                label, counts.tolist(), s, CHI2_999_DF7, wrong))
            if not s < CHI2_999_DF7:
                tally.fail("%s: chi-square %.2f >= %.2f" % (label, s, CHI2_999_DF7))
            if not wrong > CHI2_999_DF7:
                tally.fail("%s: counts also fit a wrong distribution (%.2f)" % (label, wrong))
            tally.tokens_eq(label + " vs oracle", tok, want)


def main():
    harness.program()
    tally = harness.Tally()
    with harness.Workdir() as wd:
        part_a(tally, wd)
        part_b(tally, wd)
    return tally.finish("sampling")


if __name__ == "__main__":
    sys.exit(main())
