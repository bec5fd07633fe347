#!/usr/bin/env python3
"""Speculative decoding through `dspark generate --draft` on tiny random
target + draft pairs (make_qwen3.py, make_dspark.py): a random pair (drafts
mostly rejected) and a bigram pair (a target close to a bigram model and a
draft whose Markov head holds that bigram table: long accepted runs).

Checked:
- greedy: the speculative tokens equal plain greedy decoding's token for
  token (`--compare` runs both in one process) for a batch of prompts of
  different lengths, with gamma below the block size, with the confidence
  cut, with an end-of-sequence id inside accepted drafts, and under mpirun at
  TP 2 and TP 3; the bigram pair accepts (acceptance length above 2);
- gamma auto: its proposals after rounds without drafts (the draft's context
  rows waiting) equal those of a run appending every round, also in its
  probes by part of the batch where no drafts pay; with --draft-block gamma
  each round's proposal equals that of fixed blocks of its drafts' rows;
- the trace: every sequence's tokens are its rounds' accepted drafts and
  bonus tokens, in order;
- lossless sampling: the distribution of the first and second speculative
  tokens over 4000 sequences (one prompt, seeds seed + q) equals the
  target's own, computed exactly with the numpy reference (chi-square at
  p = 1e-4), and the same test rejects a sampler that takes q from the
  uncorrected base logits (its exact distribution, sampled);
- exact verification (--verify exact): sampled tokens equal plain sampled
  decoding's token for token for the batch, at two temperatures, with gamma
  3 and auto, on the random pair (also with the confidence cut), at TP 2
  (equal to TP 1's too) and at TP 3 in one process; over
  1500 seeds, each first draft and whether it is accepted are the numpy
  reference's (the draft's draw and the target's share the noise of
  contract 5), and a draft keyed apart would be told apart;
- refusals: gamma above the block size, a threshold outside [0, 1) or on a
  draft without a confidence head, a target directory as the draft, a draft
  made for another target, a negative temperature."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import dspark_ref  # noqa: E402
import harness  # noqa: E402
import make_dspark  # noqa: E402
import make_qwen3  # noqa: E402
import qwen3_ref  # noqa: E402
import ref  # noqa: E402

PROMPTS = [[5, 9, 3], [17, 2, 8, 8, 40, 11, 3, 90, 1], [7, 7, 7, 7, 7], [100, 3, 2, 1, 9, 4, 4, 8, 2, 60, 61, 62, 3, 5]]
CHI_P = 1e-4


class T:
    def __init__(self, wd, backend="cpu"):
        self.wd = wd
        self.backend = backend
        self.tally = harness.Tally()
        self.dspark, _ = harness.program()

    def gen(self, args, np_=1, timeout=300, env=None):
        if self.backend != "cpu":
            args = list(args) + ["--backend", self.backend]
        rc, so, se, _ = harness.run([self.dspark, "generate"] + list(args), np_=np_, timeout=timeout, env=env)
        self.tally.runs += 1
        return rc, so, se

    def gen_json(self, label, args, np_=1, env=None):
        rc, so, se = self.gen(list(args) + ["--json"], np_=np_, env=env)
        if rc != 0:
            self.tally.fail("%s: exit %s: %s" % (label, rc, se.strip()[-500:]))
            return None
        lines = so.strip().splitlines()
        if len(lines) != 1:
            self.tally.fail("%s: %d lines on stdout" % (label, len(lines)))
            return None
        return json.loads(lines[0])

    def prompts_file(self, prompts, name="prompts.json"):
        f = self.wd.file(name)
        with open(f, "w") as fh:
            json.dump(prompts, fh)
        return f


def pairs(wd):
    rt, rd = wd.file("rand-t"), wd.file("rand-d")
    make_qwen3.make(rt, layers=3, seed=0)
    make_dspark.make(rt, rd, layers=2, taps=[0, 1], markov_rank=16, confidence="markov", block_size=7, seed=1)
    bt, bd = wd.file("bigram-t"), wd.file("bigram-d")
    make_qwen3.make(bt, layers=3, seed=2, residual_scale=0.05)
    make_dspark.make(bt, bd, layers=2, taps=[0, 1], bigram_scale=4, seed=2, block_size=7)
    t3, d3 = wd.file("tp3-t"), wd.file("tp3-d")  # 6 / 3 heads, MLP columns divisible by 3
    make_qwen3.make(t3, layers=3, seed=3, heads=6, kv_heads=3, head_dim=16, hidden=96, intermediate=192,
                    residual_scale=0.05)
    make_dspark.make(t3, d3, layers=2, taps=[0, 1], bigram_scale=4, seed=3, block_size=5)
    return {"random": (rt, rd), "bigram": (bt, bd), "tp3": (t3, d3)}


def check_same(t, label, r, min_accept=None):
    if r is None:
        return
    if r.get("same_as_plain") is not True:
        t.tally.fail("%s: speculative tokens differ from plain decoding's" % label)
    t.tally.tokens += sum(len(x["tokens"]) for x in r["results"])
    acc = r["acceptance_length"]
    print("%s: acceptance length %.2f, per position %s, same as plain: %s" % (
        label, acc, [round(x, 2) for x in r["per_position_acceptance"]], r["same_as_plain"]))
    if min_accept is not None and acc < min_accept:
        t.tally.fail("%s: acceptance length %.2f; this pair should reach %.1f" % (label, acc, min_accept))


def by_anchor(r, q):
    """Sequence q's proposals in a traced run: {anchor's token index: (drafts, whether the round before drafted
    none)}."""
    out, toks, prev0 = {}, [r["results"][q]["tokens"][0]], False
    for rd in (x for x in r["rounds"] if x["sequence"] == q):
        out[len(toks) - 1] = (rd["draft"], prev0)
        prev0 = not rd["draft"]
        toks += rd["draft"][:rd["accepted"]] + [rd["bonus"]]
    return out


def same_first_drafts(t, label, ra, r1):
    """ra's proposals against r1's (a run whose draft appends its context every round) at the same anchors: a
    proposal's first draft depends on the whole context, so any context row missing, doubled or out of order
    shows. Returns (proposals compared, those right after a round without drafts)."""
    same = after0 = 0
    for q in range(len(ra["results"])):
        a_, b_ = by_anchor(ra, q), by_anchor(r1, q)
        for i, (d, prev0) in a_.items():
            if d and i in b_ and b_[i][0]:
                if d[0] != b_[i][0][0]:
                    t.tally.fail("%s: sequence %d, the proposal anchored at token %d drafts %d; a run appending "
                                 "every round drafts %d" % (label, q, i, d[0], b_[i][0][0]))
                same += 1
                after0 += prev0
    return same, after0


def case_probe_part(t, P):
    """gamma auto where no drafts pay (the random pair): after its calibration only decode steps, with the
    draft's context rows waiting, and every 64 rounds a probe by a quarter of the batch (here one sequence in
    turn) whose proposals must be those of a run appending every round; the tokens plain decoding's."""
    pf = t.prompts_file(PROMPTS, "prompts_probe.json")
    base = ["--model", P["random"][0], "--draft", P["random"][1], "--prompts", pf, "--max-new", "90",
            "--ignore-eos", "--trace"]
    ra = t.gen_json("probe-auto", base + ["--gamma", "auto", "--compare"])
    check_same(t, "random pair, gamma auto, 90 tokens", ra)
    r1 = t.gen_json("probe-g1", base + ["--gamma", "1"])
    if ra is None or r1 is None:
        return
    drafted = [sum(1 for x in ra["rounds"] if x["sequence"] == q and x["draft"]) for q in range(len(PROMPTS))]
    same, after0 = same_first_drafts(t, "gamma auto's probes", ra, r1)
    print("random pair, gamma auto: rounds with drafts per sequence %s; %d proposals compared with gamma 1's, %d "
          "after a decode step" % (drafted, same, after0))
    if len(set(drafted)) < 2 or after0 < 1:
        t.tally.fail("gamma auto: no probe by part of the batch after decode steps (rounds with drafts per "
                     "sequence %s, %d proposals after a decode step)" % (drafted, after0))


def case_auto_blocks(t, bt, bd, base):
    """gamma auto with --draft-block gamma: each round's block has as many rows as the drafts it verifies, so each
    proposal must be the one that fixed blocks of that many rows (--gamma k --draft-block gamma) make from the same
    context and anchor; a block of other rows would change the drafts. One-draft rounds are compared with a run
    of 1-row blocks at the same anchors, deeper ones with a run whose prompt is the context up to the round's
    anchor (its first round anchors there). The tokens plain decoding's."""
    ra = t.gen_json("gamma-auto-block", ["--model", bt, "--draft", bd, "--gamma", "auto", "--draft-block", "gamma",
                                         "--trace"] + base)
    check_same(t, "bigram pair, gamma auto in blocks of its drafts", ra, min_accept=1.3)
    r1 = t.gen_json("gamma1-block-trace", ["--model", bt, "--draft", bd, "--gamma", "1", "--draft-block", "gamma",
                                           "--trace"] + base)
    if ra is None or r1 is None:
        return
    rounds = [(q, i, d) for q in range(len(ra["results"])) for i, (d, _) in sorted(by_anchor(ra, q).items()) if d]
    compared, sizes = [0], set()

    def agree(q, i, d, theirs):
        if d != theirs:
            t.tally.fail("gamma auto in blocks: sequence %d, the %d-row proposal anchored at token %d drafts %s; "
                         "blocks of %d rows draft %s" % (q, len(d), i, d, len(d), theirs))
        compared[0] += 1
        sizes.add(len(d))

    for q in range(len(ra["results"])):
        ones = by_anchor(r1, q)
        for q_, i, d in rounds:
            if q_ == q and len(d) == 1 and i in ones and len(ones[i][0]) == 1:
                agree(q, i, d, ones[i][0])
    # deeper rounds fill the comparisons up to 10 (at least 5): gamma auto's sizes follow measured times, so how
    # many one-draft rounds a machine gives varies (an H100 gave 4)
    deep = [r for r in rounds if len(r[2]) >= 2]
    ones = compared[0]
    n_deep = min(len(deep), max(5, 10 - ones))
    for q, i, d in deep[::max(1, len(deep) // max(1, n_deep))][:n_deep]:
        ids = PROMPTS[q] + ra["results"][q]["tokens"][:i]
        rp = t.gen_json("prefix-%d-%d" % (q, i), ["--model", bt, "--draft", bd, "--prompt-ids",
                                                  ",".join(str(x) for x in ids), "--max-new", "2", "--ignore-eos",
                                                  "--gamma", str(len(d)), "--draft-block", "gamma", "--trace"])
        if rp is None:
            return
        if not rp["rounds"] or rp["results"][0]["tokens"][0] != ra["results"][q]["tokens"][i]:
            t.tally.fail("gamma auto in blocks: the run from sequence %d's first %d tokens did not anchor at its "
                         "token %d" % (q, i, i))
            continue
        agree(q, i, d, rp["rounds"][0]["draft"])
    counts = {}
    for _, _, d in rounds:
        counts[len(d)] = counts.get(len(d), 0) + 1
    print("gamma auto in blocks of its drafts: rounds by drafts %s; %d proposals compared with fixed blocks of %s rows"
          % (dict(sorted(counts.items())), compared[0], sorted(sizes)))
    # gamma auto chooses by measured times, so a loaded machine may leave it one draft a round: then only the
    # one-row blocks are compared here (test_dspark checks a call's block of fewer rows at two and more rows)
    want = min(10, ones + len(deep))
    if compared[0] < want or (deep and not any(k >= 2 for k in sizes)):
        t.tally.fail("gamma auto in blocks: only %d proposals compared, at %s rows (expected %d, and the rounds of "
                     "two drafts or more among them)" % (compared[0], sorted(sizes), want))


def case_greedy(t, P):
    pf = t.prompts_file(PROMPTS)
    base = ["--prompts", pf, "--max-new", "40", "--ignore-eos", "--compare"]
    rr = t.gen_json("random", ["--model", P["random"][0], "--draft", P["random"][1]] + base)
    check_same(t, "random pair", rr)
    if rr is not None and rr.get("verify") != "greedy":
        t.tally.fail("random pair, greedy: the JSON says verify %r" % rr.get("verify"))
    bt, bd = P["bigram"]
    r = t.gen_json("bigram", ["--model", bt, "--draft", bd, "--trace"] + base)
    check_same(t, "bigram pair", r, min_accept=1.7)
    if r is not None:  # the trace rebuilds every sequence
        for q, res in enumerate(r["results"]):
            toks = [res["tokens"][0]]
            for rd in (x for x in r["rounds"] if x["sequence"] == q):
                if rd["anchor"] != toks[-1]:
                    t.tally.fail("trace: sequence %d round anchored at %d after %d" % (q, rd["anchor"], toks[-1]))
                    break
                toks += rd["draft"][:rd["accepted"]] + [rd["bonus"]]
            if toks[:len(res["tokens"])] != res["tokens"]:
                t.tally.fail("trace: sequence %d's rounds do not rebuild its tokens" % q)
    check_same(t, "bigram pair, gamma 3", t.gen_json("gamma3", ["--model", bt, "--draft", bd, "--gamma", "3"] + base),
               min_accept=1.5)
    # blocks of gamma rows: other proposals, the same greedy tokens
    rb = t.gen_json("gamma3-block", ["--model", bt, "--draft", bd, "--gamma", "3", "--draft-block", "gamma"] + base)
    check_same(t, "bigram pair, gamma 3 in blocks of 3 rows", rb, min_accept=1.5)
    # gamma auto: a different count of drafts verified per round, the same greedy tokens; on the TP 2 ranks too
    ra = t.gen_json("gamma-auto", ["--model", bt, "--draft", bd, "--gamma", "auto", "--trace"] + base)
    check_same(t, "bigram pair, gamma auto", ra, min_accept=1.3)
    # its decode-step rounds leave the draft's context rows waiting; the proposals after them must be those of a
    # run that appends every round: gamma 1 anchors a round at most positions, and a proposal's first draft
    # depends on the whole context (the block runs its trained rows whatever the gamma)
    r1 = t.gen_json("gamma-1", ["--model", bt, "--draft", bd, "--gamma", "1", "--trace"] + base)
    check_same(t, "bigram pair, gamma 1", r1)
    if ra is not None and r1 is not None:
        same, after0 = same_first_drafts(t, "gamma auto", ra, r1)
        print("gamma auto vs gamma 1: %d proposals compared, %d of them right after a decode-step round" % (same, after0))
        if same < 10 or after0 < 1:
            t.tally.fail("gamma auto vs gamma 1: only %d proposals compared (%d after a decode step)" % (same, after0))
    # its fourth round (calibration) is a decode step for every running sequence: the draft only appends
    if ra is not None and ra.get("rounds_without_drafts", 0) < len(ra["results"]):
        t.tally.fail("gamma auto: %s sequence-rounds without drafts, expected at least one per sequence"
                     % ra.get("rounds_without_drafts"))
    case_auto_blocks(t, bt, bd, base)
    sizes, env = harness.tp_sizes(t.backend, (2, 3))
    if 2 in sizes:
        check_same(t, "bigram pair, gamma auto, TP 2", t.gen_json(
            "gamma-auto-tp2", ["--model", bt, "--draft", bd, "--gamma", "auto"] + base, np_=2, env=env), 1.3)
    check_same(t, "random pair, confidence cut 0.5", t.gen_json(
        "p-min", ["--model", P["random"][0], "--draft", P["random"][1], "--draft-p-min", "0.5"] + base))
    if 2 in sizes:
        r2 = t.gen_json("tp2", ["--model", bt, "--draft", bd] + base, np_=2, env=env)
        check_same(t, "bigram pair, TP 2", r2, 1.7)
        check_same(t, "bigram pair, TP 2, gamma 2 in blocks of 2 rows", t.gen_json(
            "tp2-block", ["--model", bt, "--draft", bd, "--gamma", "2", "--draft-block", "gamma"] + base, np_=2,
            env=env), 1.5)
        # the TP ranks as threads of one process (on CUDA one process driving the GPUs)
        r2p = t.gen_json("tp2-process", ["--model", bt, "--draft", bd, "--tp", "2"] + base, env=env)
        check_same(t, "bigram pair, TP 2 in one process", r2p, 1.7)
        if r2 is not None and r2p is not None:
            if [x["tokens"] for x in r2p["results"]] != [x["tokens"] for x in r2["results"]]:
                t.tally.fail("TP 2: one process's tokens differ from those of two processes under mpirun")
            if r2p["acceptance_length"] != r2["acceptance_length"]:
                t.tally.fail("TP 2: one process accepted %.4f a round, two processes under mpirun %.4f" % (
                    r2p["acceptance_length"], r2["acceptance_length"]))
    if 3 in sizes:
        check_same(t, "6-head pair, TP 3", t.gen_json("tp3", ["--model", P["tp3"][0], "--draft", P["tp3"][1]] + base,
                                                     np_=3, env=env), 1.5)
        check_same(t, "6-head pair, TP 3, gamma auto", t.gen_json(
            "tp3-auto", ["--model", P["tp3"][0], "--draft", P["tp3"][1], "--gamma", "auto"] + base, np_=3, env=env),
            1.2)
        check_same(t, "6-head pair, TP 3 in one process, gamma auto", t.gen_json(
            "tp3-process", ["--model", P["tp3"][0], "--draft", P["tp3"][1], "--gamma", "auto", "--tp", "3"] + base,
            env=env), 1.2)
    # an end-of-sequence id the bigram pair drafts: it ends the sequence inside accepted drafts
    if r is not None:
        toks = r["results"][1]["tokens"]
        k = next((i for i in range(6, len(toks)) if toks[i] not in toks[:i]), None)
        if k is not None:
            e = t.wd.file("bigram-eos-t")
            os.makedirs(e)
            for f in os.listdir(bt):
                os.symlink(os.path.join(bt, f), os.path.join(e, f))
            os.remove(os.path.join(e, "generation_config.json"))
            make_qwen3.write_json(os.path.join(e, "generation_config.json"), {"eos_token_id": [toks[k]]})
            r2 = t.gen_json("eos", ["--model", e, "--draft", bd, "--prompts", pf, "--max-new", "40", "--compare"])
            check_same(t, "bigram pair, stopping at an end-of-sequence id", r2)
            if r2 is not None and (r2["results"][1]["finish"] != "eos" or r2["results"][1]["tokens"] != toks[:k + 1]):
                t.tally.fail("eos: sequence 1 gave %s (%s), want %s" % (
                    r2["results"][1]["tokens"], r2["results"][1]["finish"], toks[:k + 1]))


def chi2_sf(x, k):
    """Survival function of the chi-square distribution (regularized upper gamma), k degrees of freedom."""
    a, z = k / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    if z < a + 1:  # series for the lower incomplete gamma
        s, term, n = 1.0 / a, 1.0 / a, 1
        while abs(term) > 1e-15 * abs(s):
            term *= z / (a + n)
            s += term
            n += 1
        return 1.0 - s * math.exp(-z + a * math.log(z) - math.lgamma(a))
    b, c, d = z + 1 - a, 1e300, 1.0 / (z + 1 - a)  # continued fraction for the upper one
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(-z + a * math.log(z) - math.lgamma(a)) * h


def chi2(counts, probs):
    """(statistic, dof, p-value), merging cells with expected counts below 5."""
    n = counts.sum()
    order = np.argsort(probs)
    obs, exp, cur_o, cur_e = [], [], 0.0, 0.0
    for i in order:
        cur_o += counts[i]
        cur_e += probs[i] * n
        if cur_e >= 5:
            obs.append(cur_o), exp.append(cur_e)
            cur_o = cur_e = 0.0
    if cur_e > 0 and exp:
        obs[-1] += cur_o
        exp[-1] += cur_e
    obs, exp = np.array(obs), np.array(exp)
    x = float(((obs - exp) ** 2 / exp).sum())
    k = len(obs) - 1
    return x, k, chi2_sf(x, k)


def softmax(logits, T):
    z = np.asarray(logits, np.float64) / T
    e = np.exp(z - z.max())
    return e / e.sum()


def case_sampling(t, wd):
    tt, dd = wd.file("v16-t"), wd.file("v16-d")
    make_qwen3.make(tt, layers=3, seed=5, vocab=16, residual_scale=0.05, bos=14, eos=15)
    make_dspark.make(tt, dd, layers=2, taps=[0, 1], bigram_scale=4, seed=5, block_size=4, mask_token_id=13)
    T_, N, prompt = 0.9, 4000, [3, 1, 4, 1, 5]
    pf = t.prompts_file([prompt] * N, "same.json")
    r = t.gen_json("sampling", ["--model", tt, "--draft", dd, "--prompts", pf, "--max-new", "3", "--ignore-eos",
                                "--temperature", str(T_), "--seed", "1000"])
    if r is None:
        return
    got = np.array([x["tokens"] for x in r["results"]])
    print("sampling: acceptance length %.2f over %d rounds" % (r["acceptance_length"], r["rounds_total"]))
    m = qwen3_ref.Qwen3.from_dir(tt)
    d = dspark_ref.DSparkDraft.from_dir(dd, target=m)
    V = m.V
    p0 = softmax(m.logits(prompt)[0][-1], T_)
    p1 = np.zeros(V)
    p2 = np.zeros(V)
    broken = np.zeros(V)  # the first speculative token when q is the uncorrected base logits' softmax
    for x0 in range(V):
        lg, taps = m.logits(prompt + [x0], taps=d.taps)
        px = softmax(lg[-1], T_)
        p1 += p0[x0] * px
        for x1 in range(V):
            p2 += p0[x0] * px[x1] * softmax(m.logits(prompt + [x0, x1])[0][-1], T_)
        # the draft's first slot after anchor x0: its proposal distribution and the base one
        cache = d.new_context()
        out = d.propose([cache], [d.features({k: v[:len(prompt)] for k, v in taps.items()})], [x0], [len(prompt)])
        qc = softmax(out["logits"][0][0].astype(np.float32), T_)
        qb = softmax(qwen3_ref.f32(qwen3_ref.linear(out["hidden"][0][:1], d.lm_head))[0], T_)
        acc = np.minimum(1.0, px / np.maximum(qb, 1e-300))
        resid = np.maximum(px - qb, 0)
        resid = resid / resid.sum() if resid.sum() > 1e-12 else px
        broken += p0[x0] * (qc * acc + (1 - (qc * acc).sum()) * resid)
    for label, counts, want in (("first speculative token", np.bincount(got[:, 1], minlength=V), p1),
                                ("second speculative token", np.bincount(got[:, 2], minlength=V), p2)):
        x, k, pv = chi2(counts, want)
        print("sampling, %s: chi-square %.1f on %d dof, p = %.3g" % (label, x, k, pv))
        if pv < CHI_P:
            t.tally.fail("sampling, %s: not the target's distribution (p = %.3g < %g)" % (label, pv, CHI_P))
    fake = np.bincount(np.random.default_rng(7).choice(V, size=N, p=broken / broken.sum()), minlength=V)
    x, k, pv = chi2(fake, p1)
    print("sampling, q from the base logits (the test's power): chi-square %.1f on %d dof, p = %.3g" % (x, k, pv))
    if pv >= CHI_P:
        t.tally.fail("the chi-square test does not reject a sampler with q from the base logits (p = %.3g)" % pv)


def case_sampling_threads(t, wd):
    """A vocabulary of 8192 (past 4096, where the acceptance's softmax rows and residual draws spread over the
    host's threads): one thread and two give the same tokens."""
    tt, dd = wd.file("v8k-t"), wd.file("v8k-d")
    make_qwen3.make(tt, layers=3, seed=6, vocab=8192, residual_scale=0.05)
    make_dspark.make(tt, dd, layers=1, taps=[0, 1], bigram_scale=4, seed=6, block_size=4)
    pf = t.prompts_file(PROMPTS, "v8k.json")
    args = ["--model", tt, "--draft", dd, "--prompts", pf, "--max-new", "24", "--ignore-eos", "--temperature", "0.9",
            "--seed", "5"]
    runs = [t.gen_json("sampling, %s threads" % n, args, env={"OMP_NUM_THREADS": n}) for n in ("1", "2")]
    if None in runs:
        return
    same = [a["tokens"] for a in runs[0]["results"]] == [b["tokens"] for b in runs[1]["results"]]
    print("sampling, vocabulary 8192: acceptance length %.2f, one thread and two alike: %s" % (
        runs[0]["acceptance_length"], same))
    if not same:
        t.tally.fail("sampling, vocabulary 8192: the tokens depend on the host's thread count")
    if runs[0]["acceptance_length"] <= 1.0:
        t.tally.fail("sampling, vocabulary 8192: no draft accepted, so no acceptance was tested")


def case_exact(t, P, wd):
    """--verify exact: sampled rows accept a draft where it equals the target's own Gumbel-max draw, so the tokens
    are plain sampled decoding's (the same seed), whatever gamma, gamma auto or TP."""
    pf = t.prompts_file(PROMPTS)
    bt, bd = P["bigram"]
    rt, rd = P["random"]
    base = ["--prompts", pf, "--max-new", "40", "--ignore-eos", "--compare", "--verify", "exact", "--seed", "11"]
    runs = {}
    for label, args in (
            ("bigram pair, exact, T 0.9", ["--model", bt, "--draft", bd, "--temperature", "0.9"]),
            ("bigram pair, exact, T 0.9, gamma 3", ["--model", bt, "--draft", bd, "--temperature", "0.9", "--gamma",
                                                   "3"]),
            ("bigram pair, exact, T 0.9, gamma auto", ["--model", bt, "--draft", bd, "--temperature", "0.9", "--gamma",
                                                      "auto"]),
            ("bigram pair, exact, T 0.3", ["--model", bt, "--draft", bd, "--temperature", "0.3"]),
            ("random pair, exact, T 0.9", ["--model", rt, "--draft", rd, "--temperature", "0.9"]),
            ("random pair, exact, T 0.9, confidence cut 0.5", ["--model", rt, "--draft", rd, "--temperature", "0.9",
                                                              "--draft-p-min", "0.5"])):
        runs[label] = r = t.gen_json(label, args + base)
        check_same(t, label, r)
    for label, r in runs.items():
        if r is not None and r.get("verify") != "exact":
            t.tally.fail("%s: the JSON says verify %r" % (label, r.get("verify")))
    r03 = runs["bigram pair, exact, T 0.3"]
    if r03 is not None and r03["acceptance_length"] < 1.5:
        t.tally.fail("exact, T 0.3: acceptance length %.2f; the bigram pair should reach 1.5" % r03["acceptance_length"])
    sizes, env = harness.tp_sizes(t.backend, (2, 3))
    if 3 in sizes:  # three TP ranks as threads of one process, with gamma auto
        label = "6-head pair, exact, T 0.9, TP 3 in one process, gamma auto"
        check_same(t, label, t.gen_json(label, ["--model", P["tp3"][0], "--draft", P["tp3"][1], "--temperature",
                                                "0.9", "--gamma", "auto", "--tp", "3"] + base, env=env))
    if 2 in sizes:
        label = "bigram pair, exact, T 0.9, TP 2"
        r2 = t.gen_json(label, ["--model", bt, "--draft", bd, "--temperature", "0.9"] + base, np_=2, env=env)
        check_same(t, label, r2)
        r1 = runs["bigram pair, exact, T 0.9"]
        if r1 is not None and r2 is not None and \
                [x["tokens"] for x in r1["results"]] != [x["tokens"] for x in r2["results"]]:
            t.tally.fail("exact: TP 2's sampled tokens differ from TP 1's")
    # which first drafts are accepted, seed by seed, against the reference: the draft's slot-0 draw and the
    # target's draw at the same position share contract 5's noise (seed, position, id); keyed apart they
    # would agree far less often
    tt, dd = wd.file("v16x-t"), wd.file("v16x-d")
    make_qwen3.make(tt, layers=3, seed=5, vocab=16, residual_scale=0.05, bos=14, eos=15)
    make_dspark.make(tt, dd, layers=2, taps=[0, 1], bigram_scale=4, seed=5, block_size=4, mask_token_id=13)
    T_, N, prompt, seed0 = 0.9, 1500, [3, 1, 4, 1, 5], 2000
    r = t.gen_json("exact, first drafts", ["--model", tt, "--draft", dd, "--prompts",
                                           t.prompts_file([prompt] * N, "same-exact.json"), "--max-new", "2",
                                           "--ignore-eos", "--temperature", str(T_), "--seed", str(seed0),
                                           "--verify", "exact", "--trace"])
    if r is None:
        return
    m = qwen3_ref.Qwen3.from_dir(tt)
    d = dspark_ref.DSparkDraft.from_dir(dd, target=m)
    V, n = m.V, len(prompt)
    last = m.logits(prompt)[0][-1]
    per_anchor = {}
    for x0 in range(V):
        lg, taps = m.logits(prompt + [x0], taps=d.taps)
        out = d.propose([d.new_context()], [d.features({k: v[:n] for k, v in taps.items()})], [x0], [n])
        per_anchor[x0] = (lg[-1], qwen3_ref.f32(out["logits"][0][0]))
    first = {x["sequence"]: x for x in r["rounds"]}
    agree = accepted = want_acc = wrong = apart = 0
    for q in range(N):
        s_ = seed0 + q
        x0 = ref.select(last, V, T_, s_, n)
        pl, ql = per_anchor[x0]
        d0, t1 = ref.select(ql, V, T_, s_, n + 1), ref.select(pl, V, T_, s_, n + 1)
        rd = first.get(q)
        if rd is None:
            wrong += 1
            continue
        agree += rd["anchor"] == x0 and rd["draft"][0] == d0
        accepted += rd["accepted"] > 0
        want_acc += d0 == t1
        wrong += (rd["accepted"] > 0) != (d0 == t1)
        apart += (ref.select(ql, V, T_, s_ + 7919, n + 1) == t1) != (d0 == t1)  # the draft's noise keyed apart
    print("exact, first drafts over %d seeds: anchor and draft as the reference's in %d; accepted %d, the reference "
          "%d, seeds that differ %d; the draft's noise keyed apart would change %d seeds' outcome" % (
              N, agree, accepted, want_acc, wrong, apart))
    if agree < 0.99 * N or wrong > 0.01 * N:
        t.tally.fail("exact: the first drafts and their acceptance are not the reference's (%d seeds differ)" % wrong)
    if apart < 0.05 * N:
        t.tally.fail("exact: the test has no power (noise keyed apart changes only %d seeds)" % apart)


def case_bad(t, P):
    rt, rd = P["random"]
    bt, bd = P["bigram"]
    pid = ["--prompt-ids", "1,2,3", "--max-new", "5", "--ids"]
    other_t, nocf = t.wd.file("other-t"), t.wd.file("bigram-d-noconf")
    make_qwen3.make(other_t, layers=3, seed=9, hidden=96)
    make_dspark.make(bt, nocf, layers=2, taps=[0, 1], bigram_scale=4, seed=2, block_size=7, confidence="none")
    for label, args, needle in (
            ("gamma above the block size", ["--model", rt, "--draft", rd, "--gamma", "9"] + pid, "block_size"),
            ("threshold above 1", ["--model", rt, "--draft", rd, "--draft-p-min", "1.5"] + pid, "--draft-p-min"),
            ("threshold on a draft without a confidence head", ["--model", bt, "--draft", nocf, "--draft-p-min", "0.3"]
             + pid, "confidence head"),
            ("a target as the draft", ["--model", rt, "--draft", rt] + pid, "Qwen3DSparkModel"),
            ("a draft for another target", ["--model", other_t, "--draft", rd] + pid, "hidden_size"),
            ("negative temperature", ["--model", rt, "--draft", rd, "--temperature", "-0.5"] + pid, "--temperature"),
            ("--gamma without a draft", ["--model", rt, "--gamma", "3"] + pid, "--draft"),
            ("gamma auto with sampling", ["--model", rt, "--draft", rd, "--gamma", "auto", "--temperature", "0.8"] + pid,
             "auto is for greedy"),
            ("gamma neither a count nor auto", ["--model", rt, "--draft", rd, "--gamma", "many"] + pid, "got 'many'"),
            ("--verify without a draft", ["--model", rt, "--verify", "exact"] + pid, "--draft"),
            ("--verify neither rejection nor exact", ["--model", rt, "--draft", rd, "--verify", "close"] + pid,
             "got 'close'"),
            ("--draft-block neither full nor gamma", ["--model", rt, "--draft", rd, "--gamma", "2", "--draft-block",
                                                      "half"] + pid, "got 'half'"),
            ("--draft-block gamma without a gamma", ["--model", rt, "--draft", rd, "--draft-block", "gamma"] + pid,
             "needs --gamma"),
            ("--draft-block without a draft", ["--model", rt, "--draft-block", "gamma"] + pid, "--draft")):
        rc, so, se = t.gen(args)
        if rc in (0, None) or rc > 128 or rc < 0 or needle.lower() not in se.lower() or so.strip():
            t.tally.fail("%s: exit %s, stdout %r, stderr %s" % (label, rc, so[:100], se.strip()[-300:]))
        else:
            print("refused as it should (%s): %s" % (label, se.strip().splitlines()[-1][:160]))


def main():
    backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "cpu"
    only = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--only"]  # greedy, sampling, ...
    if backend == "cuda":
        harness.cuda_or_skip()
    with harness.Workdir() as wd:
        t = T(wd, backend)
        P = pairs(wd)
        for name, fn in (("greedy", lambda: case_greedy(t, P)), ("probe part", lambda: case_probe_part(t, P)),
                         ("sampling", lambda: case_sampling(t, wd)),
                         ("sampling threads", lambda: case_sampling_threads(t, wd)), ("exact", lambda: case_exact(t, P, wd)),
                         ("bad", lambda: case_bad(t, P))):
            if only and name.replace(" ", "_") not in only:
                continue
            print("== %s" % name)
            sys.stdout.flush()
            fn()
        return t.tally.finish("test_speculative")


if __name__ == "__main__":
    sys.exit(main())
