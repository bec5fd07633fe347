#!/usr/bin/env python3
"""The Qwen3 target through the public API (tests/target_driver.c) against
the numpy reference written from the architecture (qwen3_ref.py), on tiny
random checkpoints in the Hugging Face layouts make_qwen3.py writes.

  test_qwen3.py --driver PATH [--backend cpu|cuda] [--only CASE]

Contracts checked (docs/CONTRACTS.md, "The models"):
- against the reference, within a stated tolerance (both round at the same
  points; the reference sums exactly, the C in fp32): every logit and tap
  within TOL_REL of its row's largest magnitude; each layer and the head,
  run by the reference on the C's own inputs, within TOL_REL with at least
  MIN_EQUAL of the values bit-equal; greedy ids equal wherever the
  reference's top two differ by more than twice the tolerance;
- bit for bit: a position's logits, taps and ids do not depend on how its
  tokens were split over calls (prefill, decode, verify), on the other
  sequences of the batch, on the cache slot, on last-row-only selection, or
  on a truncation (rollback) followed by other tokens;
- selection: greedy ids are torch.argmax of the returned logits; sampled ids
  are Gumbel-max with the noise keyed by (seed, position drawn, token id);
- tensor parallelism (mpirun, TP 2 and 4): each within the reference
  tolerance, deterministic, ids the argmax of its own logits; TP sizes that
  do not divide the heads are refused;
- bad checkpoints and bad calls: a non-zero exit with the offending name in
  the message, on every rank, never a crash or a hang."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import make_dspark  # noqa: E402
import make_qwen3  # noqa: E402
import qwen3_ref  # noqa: E402
import ref  # noqa: E402
import st  # noqa: E402

TOL_REL = 2.0 ** -6   # per element, relative to the row's largest |reference|
MIN_EQUAL = 0.99      # fraction of one layer's outputs bit-equal to the reference's on the same inputs
LENS = [24, 17, 9]
L = max(LENS)
BASE_CHUNKS = [5, 1, 1, 4]


class Ctx:
    def __init__(self, driver, backend, wd):
        self.driver, self.backend, self.wd = driver, backend, wd
        self.tally = harness.Tally()
        self.models = {}

    def model(self, name, **kw):
        """A checkpoint directory (made once) and its reference."""
        if name not in self.models:
            d = self.wd.file(name)
            make_qwen3.make(d, **kw)
            self.models[name] = (d, qwen3_ref.Qwen3.from_dir(d))
        return self.models[name]

    def run(self, model_dir, inputs, np_=1, timeout=180, env=None, extra=()):
        """Runs the driver; (rc, outputs or None, stderr)."""
        inp, out = self.wd.file("in.safetensors"), self.wd.file("out.safetensors")
        for f in (inp, out):
            if os.path.exists(f):
                os.remove(f)
        st.save(inp, inputs)
        args = [self.driver, model_dir, inp, out] + ["--backend", self.backend or "cpu"] + list(extra)
        rc, _, se, dt = harness.run(args, np_=np_, timeout=timeout, env=env)
        self.tally.runs += 1
        if rc != 0:
            return rc, None, se
        return rc, st.load(out)[0], se

    def ok_run(self, label, model_dir, inputs, np_=1, env=None, extra=()):
        rc, o, se = self.run(model_dir, inputs, np_, env=env, extra=extra)
        if rc != 0:
            self.tally.fail("%s: exit %s; stderr: %s" % (label, rc, se.strip()[-600:]))
        return o


def token_batch(rng, V, lens=LENS):
    t = np.zeros((len(lens), max(lens)), np.int64)
    for b, n in enumerate(lens):
        t[b, :n] = rng.integers(0, V, n)
    return t


def inputs(tokens, lens=LENS, chunks=BASE_CHUNKS, taps=None, **extra):
    d = {"tokens": tokens, "lengths": np.asarray(lens, np.int64), "chunks": np.asarray(chunks, np.int64)}
    if taps is not None:
        d["taps"] = np.asarray(taps, np.int64)
    for k, v in extra.items():
        d[k] = np.asarray(v, np.float32 if k == "temperature" else np.int64)
    return d


def close(got, want):
    """(within tolerance, fraction bit-equal, worst relative error) of rows."""
    g = ref.f32(got).reshape(-1, got.shape[-1])
    w = ref.f32(want).reshape(-1, want.shape[-1])
    scale = np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-30)
    err = np.abs(g - w) / scale
    return bool((err <= TOL_REL).all()), float((g == w).mean()), float(err.max())


def check_reference(c, label, m, toks, o, lens=LENS, taps=()):
    """Every position's logits and taps against the reference run of its
    sequence (tolerance only: a one-ulp difference in a layer's output moves
    every later position through attention), and, when every layer is tapped,
    each layer and the head on the C's own inputs (tolerance, and most values
    bit-equal: both round at the same points)."""
    V = m.V
    for b, n in enumerate(lens):
        want, wtaps = m.forward(m.new_cache(), toks[b, :n], taps=taps)
        got = o["logits"][b, :n]
        ok, eq, worst = close(got, want)
        c.tally.logits += got.size
        if not ok:
            c.tally.logit_bad += got.size
            c.tally.fail("%s seq %d: logits off the reference: worst %.3g of row scale (tolerance %.3g)" %
                         (label, b, worst, TOL_REL))
        for i, t in enumerate(taps):
            ok, _, worst = close(o["taps"][i, b, :n], wtaps[t])
            if not ok:
                c.tally.fail("%s seq %d: tap %d off the reference: worst %.3g" % (label, b, t, worst))
        if list(taps) == list(range(m.L)):
            x = m.embed[toks[b, :n]]
            cache = m.new_cache()
            stages = [("layer %d" % i, lambda x, i=i: m.layer(i, x, cache, 0), o["taps"][i, b, :n])
                      for i in range(m.L)] + [("head", m.head, got)]
            for name, fn, mine in stages:
                ok, eq, worst = close(mine, fn(x))
                if not ok or eq < MIN_EQUAL:
                    c.tally.fail("%s seq %d: %s on its own inputs: worst %.3g of row scale (tolerance %.3g), "
                                 "%.4f bit-equal (need %.2f)" % (label, b, name, worst, TOL_REL, eq, MIN_EQUAL))
                x = mine
        # the selection is torch.argmax of the logits returned
        c.tally.tokens_eq("%s seq %d: next vs argmax of its logits" % (label, b), o["next"][b, :n],
                          np.array([ref.argmax(ref.f32(r)[:V]) for r in got], np.int64))
        # and the reference's choice wherever its top two are clearly apart
        top2 = np.sort(want, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * TOL_REL * np.abs(want).max(axis=1)
        ra = np.array([ref.argmax(r) for r in want], np.int64)
        c.tally.tokens_eq("%s seq %d: greedy vs reference (%d clear rows)" % (label, b, int(clear.sum())),
                          o["next"][b, :n][clear], ra[clear])


def same(c, label, got, want, keys=("logits", "next", "taps"), rows=None):
    """Bit-equality of two runs' outputs (rows: a boolean [B, L] mask)."""
    if got is None or want is None:
        return
    for k in keys:
        if k not in want:
            continue
        g, w = got[k], want[k]
        if rows is not None:
            g, w = (g[:, rows] if k == "taps" else g[rows]), (w[:, rows] if k == "taps" else w[rows])
        if k == "next":
            c.tally.tokens_eq("%s: next" % label, g, w)
        else:
            c.tally.logits_eq("%s: %s" % (label, k), g, w)


def valid_mask(lens=LENS):
    m = np.zeros((len(lens), max(lens)), bool)
    for b, n in enumerate(lens):
        m[b, :n] = True
    return m


def case_reference(c):
    """Three checkpoint forms against the reference, with a mixed schedule."""
    specs = [
        ("form5-untied", dict(form=5, seed=0)),
        ("form4-tied-3shards", dict(form=4, tied=True, shards=3, seed=1, layers=3)),
        ("gqa4-vocab500", dict(form=5, seed=2, heads=8, kv_heads=2, vocab=500, hidden=96, head_dim=8)),
    ]
    for name, kw in specs:
        d, m = c.model(name, **kw)
        toks = token_batch(np.random.default_rng(10), m.V)
        taps = list(range(m.L))
        o = c.ok_run(name, d, inputs(toks, taps=taps))
        if o is not None:
            check_reference(c, name, m, toks, o, taps=taps)


def case_invariance(c):
    """Bit-exact invariances of one position's results."""
    d, m = c.model("form5-untied", form=5, seed=0)
    rng = np.random.default_rng(11)
    toks = token_batch(rng, m.V)
    taps = [0, 1]
    base = c.ok_run("base", d, inputs(toks, taps=taps))
    mask = valid_mask()
    for label, chunks in (("prefill", [L]), ("decode", [1]), ("verify-like", [3, 7])):
        same(c, "schedule %s vs %s" % (chunks, BASE_CHUNKS), c.ok_run(label, d, inputs(toks, chunks=chunks, taps=taps)),
             base, rows=mask)
    same(c, "slots [4,0,2]", c.ok_run("slots", d, inputs(toks, taps=taps, slots=[4, 0, 2])), base, rows=mask)
    for b, n in enumerate(LENS):  # each sequence alone
        o = c.ok_run("alone %d" % b, d, inputs(toks[b:b + 1, :n], lens=[n], taps=taps))
        if o is not None and base is not None:
            sub = {"logits": base["logits"][b:b + 1, :n], "next": base["next"][b:b + 1, :n],
                   "taps": base["taps"][:, b:b + 1, :n]}
            same(c, "sequence %d alone vs in the batch" % b, o, sub)
    # last-row-only selection: each call's last row per sequence
    o = c.ok_run("last_only", d, inputs(toks, chunks=[4], last_only=[1]))
    lm = np.zeros_like(mask)
    for b, n in enumerate(LENS):
        lm[b, [min(p, n - 1) for p in range(3, n + 3, 4)]] = True
    same(c, "last-row selection", o, base, keys=("logits", "next"), rows=lm)
    # rollback: run, cut each slot, run other tokens from the cut; equals a fresh run of the splice
    cut = [10, 0, 9]
    other = token_batch(np.random.default_rng(12), m.V)
    o = c.ok_run("truncate", d, inputs(toks, taps=taps, truncate=cut, tokens2=other))
    splice = toks.copy()
    for b, p in enumerate(cut):
        splice[b, p:] = other[b, p:]
    fresh = c.ok_run("splice", d, inputs(splice, taps=taps))
    after = np.zeros_like(mask)
    for b, (p, n) in enumerate(zip(cut, LENS)):
        after[b, p:n] = True
    same(c, "rerun after truncation vs a fresh run", o, fresh, rows=after)
    if fresh is not None:
        check_reference(c, "splice", m, splice, fresh)


def case_sampling(c):
    """Gumbel-max selection keyed by (seed, position, id); logits unchanged by it."""
    d, m = c.model("form5-untied", form=5, seed=0)
    toks = token_batch(np.random.default_rng(13), m.V)
    temp, seed = [0.7, 1.3, 0.0], [11, 2 ** 40 + 3, 13]
    greedy = c.ok_run("greedy", d, inputs(toks))
    o = c.ok_run("sampling", d, inputs(toks, temperature=temp, seed=seed))
    if o is None or greedy is None:
        return
    mask = valid_mask()
    same(c, "logits with sampling vs greedy", o, greedy, keys=("logits",), rows=mask)
    for b, n in enumerate(LENS):
        want = np.array([ref.select(ref.f32(o["logits"][b, p]), m.V, temp[b], seed[b], p + 1) for p in range(n)],
                        np.int64)
        c.tally.tokens_eq("sampled ids seq %d (T=%g)" % (b, temp[b]), o["next"][b, :n], want)
    drawn = o["next"][0, :LENS[0]]
    if (drawn == greedy["next"][0, :LENS[0]]).all():
        c.tally.fail("T=0.7 drew the greedy id at all %d positions: the noise is not applied" % LENS[0])
    same(c, "sampled ids, decode schedule", c.ok_run("sampling decode", d,
         inputs(toks, chunks=[1], temperature=temp, seed=seed)), o, keys=("next",), rows=mask)


def case_tp(c):
    """Vocabulary-sharded head and split heads over MPI ranks (on CUDA one GPU
    per rank, where the machine has them)."""
    sizes, env = harness.tp_sizes(c.backend, (1, 2, 4))
    d, m = c.model("tp", form=5, seed=3, heads=8, kv_heads=4, vocab=500, layers=2)
    toks = token_batch(np.random.default_rng(14), m.V)
    taps = [0, 1]
    mask = valid_mask()
    runs = {}
    for tp in sizes:
        o = c.ok_run("TP%d" % tp, d, inputs(toks, taps=taps), np_=tp, env=env)
        if o is None:
            continue
        runs[tp] = o
        check_reference(c, "TP%d" % tp, m, toks, o, taps=taps)
    if 2 in runs:
        same(c, "TP2 twice", c.ok_run("TP2 again", d, inputs(toks, taps=taps), np_=2, env=env), runs[2], rows=mask)
        same(c, "TP2 decode schedule", c.ok_run("TP2 decode", d, inputs(toks, chunks=[1], taps=taps), np_=2, env=env),
             runs[2], rows=mask)
    if 1 in runs:
        for tp in (2, 4):
            if tp in runs:
                agree = (runs[tp]["next"][mask] == runs[1]["next"][mask]).mean()
                print("TP%d vs TP1: greedy ids equal at %.4f of %d positions, logits bit-equal %.4f" % (
                    tp, agree, int(mask.sum()), (runs[tp]["logits"][mask] == runs[1]["logits"][mask]).mean()))
    if c.backend != "cuda" or harness.cuda_devices() >= 3:
        expect_refusal(c, "TP3 with 4 kv heads", d, inputs(toks), "divide", np_=3, env=env)
    if c.backend == "cuda" and harness.cuda_devices() >= 2:
        expect_refusal(c, "CUDA TP2 without the switch", d, inputs(toks), "DSPARK_CUDA_TP_UNVERIFIED", np_=2)


def case_tp_invariant(c):
    """CONTRACTS.md: with DSPARK_TP_INVARIANT=1 (the CPU's default) o and down are weights in one K slice per KV head (here 8 heads
    of 32 over 4 KV heads: slices of 64 columns; the MLP's 1024 columns: 256), the slices and the ranks' partials
    added by the halving tree, so TP 2 and 4, under mpirun and in one process, give TP 1's bits. Values of mixed
    magnitudes over K up to 1024, where one sum over K rounds otherwise: with DSPARK_TP_INVARIANT=0 TP 2 must differ
    somewhere, or the case has no power. On CUDA the TP sizes its GPUs allow (one GPU per rank); TP 1's sliced
    model is checked against the reference either way."""
    d, m = c.model("tpi", form=5, seed=5, hidden=256, intermediate=1024, heads=8, kv_heads=4, head_dim=32,
                   vocab=500, layers=3)
    toks = token_batch(np.random.default_rng(15), m.V)
    taps = [0, 2]
    mask = valid_mask()
    sizes, env = harness.tp_sizes(c.backend, (2, 4))
    off = dict(env or {}, DSPARK_TP_INVARIANT="0")
    base = dict(env or {})
    env = dict(base, DSPARK_TP_INVARIANT="1")  # CUDA's default is one sum over K
    # named, since the caller's environment may set it (device_check.sh slices does)
    auto = c.ok_run("TP1, the backend's default", d, inputs(toks, taps=taps), env=dict(base, DSPARK_TP_INVARIANT="auto"))
    base1 = c.ok_run("TP1, one sum over K", d, inputs(toks, taps=taps), env=off)
    if 2 in sizes:
        base2 = c.ok_run("TP2, one sum over K", d, inputs(toks, taps=taps), np_=2, env=off)
        if base1 is not None and base2 is not None:
            eq = (base1["logits"][mask] == base2["logits"][mask]).mean()
            print("one sum over K: TP2 logits bit-equal to TP1's at %.4f" % eq)
            if eq == 1.0:
                c.tally.fail("TP-invariant case: one sum over K gives TP 1's bits at TP 2, so the case has no power")
    one = c.ok_run("TP1, TP-invariant", d, inputs(toks, taps=taps), env=env)
    if one is None:
        return
    if auto is not None:  # auto is the slices on the CPU, one sum over K on CUDA
        ref = one if c.backend != "cuda" else base1
        same(c, "TP1 by default against TP1 %s" % ("TP-invariant" if c.backend != "cuda" else "in one sum"), auto,
             ref, rows=mask)
    check_reference(c, "TP1, TP-invariant", m, toks, one, taps=taps)
    for tp in sizes:
        o = c.ok_run("TP%d, TP-invariant" % tp, d, inputs(toks, taps=taps), np_=tp, env=env)
        same(c, "TP%d against TP1 (TP-invariant)" % tp, o, one, rows=mask)
    if 4 in sizes:
        o = c.ok_run("TP4 in one process, TP-invariant", d, inputs(toks, taps=taps), extra=("--tp", "4"), env=env)
        same(c, "TP4 in one process against TP1 (TP-invariant)", o, one, rows=mask)


def case_tp_process(c):
    """TP ranks as threads of one process (`--tp N`: on the CPU a "threads"
    communicator, on CUDA one process driving N GPUs). On the CPU its F32 sums
    go in rank order, so at TP 2 every output equals the mpirun form's (a sum
    of two is the same either way; on CUDA both forms sum in NCCL), and at any
    TP the outputs do not depend on the schedule; against the reference like
    every TP size."""
    sizes, env = harness.tp_sizes(c.backend, (2, 4))
    d, m = c.model("tp", form=5, seed=3, heads=8, kv_heads=4, vocab=500, layers=2)
    toks = token_batch(np.random.default_rng(14), m.V)
    taps = [0, 1]
    mask = valid_mask()
    for tp in sizes:
        o = c.ok_run("TP%d in one process" % tp, d, inputs(toks, taps=taps), extra=("--tp", str(tp)), env=env)
        if o is None:
            continue
        check_reference(c, "TP%d in one process" % tp, m, toks, o, taps=taps)
        same(c, "TP%d in one process, decode schedule" % tp,
             c.ok_run("TP%d in one process, decode" % tp, d, inputs(toks, chunks=[1], taps=taps),
                      extra=("--tp", str(tp)), env=env), o, rows=mask)
        if tp == 2:
            same(c, "TP2: one process vs two under mpirun", o,
                 c.ok_run("TP2 under mpirun", d, inputs(toks, taps=taps), np_=2, env=env), rows=mask)
    if c.backend != "cuda" or harness.cuda_devices() >= 3:
        expect_refusal(c, "TP3 in one process with 4 kv heads", d, inputs(toks), "divide", extra=("--tp", "3"),
                       env=env)
    if sizes:
        expect_refusal(c, "TP2 in each of two processes", d, inputs(toks), "cannot also run under mpirun", np_=2,
                       extra=("--tp", "2"), env=env)


def case_row_parallel(c):
    """o and down in the row-parallel form at TP 1 (DSPARK_ROW_PARALLEL=1: fp32
    partials from the product, the all-reduce, one rounding, then the add).
    With the whole sum on one rank bf16(x + bf16(p)) is bf16(x + o), so every
    logit, id and tap must equal the fused form's: the path TP > 1 runs, on
    each backend (on CUDA the fp32-output products), under every schedule."""
    d, m = c.model("form5-untied", form=5, seed=0)
    toks = token_batch(np.random.default_rng(15), m.V)
    taps = [0, 1]
    mask = valid_mask()
    rp = {"DSPARK_ROW_PARALLEL": "1"}
    for label, chunks in (("base", BASE_CHUNKS), ("decode", [1]), ("verify-like", [3, 7])):
        fused = c.ok_run("fused, %s" % label, d, inputs(toks, chunks=chunks, taps=taps))
        rows = c.ok_run("row-parallel, %s" % label, d, inputs(toks, chunks=chunks, taps=taps), env=rp)
        same(c, "row-parallel vs fused at TP 1, schedule %s" % chunks, rows, fused, rows=mask)
        if label == "base" and rows is not None:
            check_reference(c, "row-parallel", m, toks, rows, taps=taps)


def expect_refusal(c, label, model_dir, inp, needle, np_=1, extra=(), env=None):
    rc, o, se = c.run(model_dir, inp, np_=np_, timeout=120, extra=extra, env=env)
    if rc is None:
        c.tally.fail("%s: hung (killed after 120 s)" % label)
    elif rc == 0:
        c.tally.fail("%s: accepted (exit 0); it must be refused" % label)
    elif rc < 0 or rc > 128 or "AddressSanitizer" in se or "runtime error" in se:
        c.tally.fail("%s: crashed (exit %s): %s" % (label, rc, se.strip()[-400:]))
    elif needle.lower() not in se.lower():
        c.tally.fail("%s: refused without naming %r: %s" % (label, needle, se.strip()[-400:]))
    elif np_ > 1 and se.lower().count("target_driver:") < np_:
        c.tally.fail("%s: not every rank reported the refusal: %s" % (label, se.strip()[-600:]))
    else:
        print("refused as it should (%s): %s" % (label, se.strip().splitlines()[-1][:200]))


def case_bad(c):
    """Checkpoints and calls that must be refused."""
    good, m = c.model("form5-untied", form=5, seed=0)
    toks = token_batch(np.random.default_rng(15), m.V)
    inp = inputs(toks)
    n = [0]

    def variant(edit_config=None, edit_tensors=None, shards=0, after=None):
        """A copy of a checkpoint with its config or tensors edited."""
        n[0] += 1
        d = c.wd.file("bad%d" % n[0])
        cfg = make_qwen3.config()
        w = make_qwen3.weights(cfg, 0)
        if edit_config:
            edit_config(cfg)
        if edit_tensors:
            edit_tensors(w)
        os.makedirs(d)
        make_qwen3.write_json(os.path.join(d, "config.json"), cfg)
        make_qwen3.write_weights(d, w, shards)
        if after:
            after(d)
        return d

    def setk(k, v):
        return lambda cfg: cfg.__setitem__(k, v)

    def delk(k):
        return lambda cfg: cfg.pop(k)

    w_name = "model.layers.1.mlp.down_proj.weight"
    cases = [
        ("missing tensor", variant(edit_tensors=lambda w: w.pop(w_name)), w_name),
        ("unexpected tensor", variant(edit_tensors=lambda w: w.__setitem__(
            "model.layers.0.self_attn.q_proj.bias", np.zeros(64, qwen3_ref.BF16))), "q_proj.bias"),
        ("wrong shape", variant(edit_tensors=lambda w: w.__setitem__(
            "model.layers.0.self_attn.q_norm.weight", np.ones(8, qwen3_ref.BF16))), "q_norm"),
        ("wrong dtype", variant(edit_tensors=lambda w: w.__setitem__(
            "model.norm.weight", np.ones(64, np.float32))), "model.norm.weight"),
        ("config without num_hidden_layers", variant(edit_config=delk("num_hidden_layers")), "num_hidden_layers"),
        ("attention bias", variant(edit_config=setk("attention_bias", True)), "attention_bias"),
        ("yarn rope scaling", variant(edit_config=setk("rope_scaling", {"rope_type": "yarn", "factor": 4.0})),
         "rope"),
        ("yarn rope parameters (5.x)", variant(edit_config=setk("rope_parameters", {
            "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0})), "rope_type"),
        ("another architecture", variant(edit_config=setk("architectures", ["LlamaForCausalLM"])), "architectures"),
        ("sliding window", variant(edit_config=setk("use_sliding_window", True)), "sliding"),
        ("float16 checkpoint", variant(edit_config=setk("torch_dtype", "float16")), "dtype"),
        ("heads not dividing", variant(edit_config=setk("num_key_value_heads", 3)), "num_key_value_heads"),
        ("config not JSON", variant(after=lambda d: open(os.path.join(d, "config.json"), "w").write("{\"a\": ")),
         "config.json"),
        ("config an array", variant(after=lambda d: open(os.path.join(d, "config.json"), "w").write("[1, 2]")),
         "config.json"),
        ("no config.json", variant(after=lambda d: os.remove(os.path.join(d, "config.json"))), "config.json"),
        ("no weights", variant(after=lambda d: os.remove(os.path.join(d, "model.safetensors"))), "safetensors"),
        ("missing shard", variant(shards=2, after=lambda d: os.remove(
            os.path.join(d, "model-00002-of-00002.safetensors"))), "model-00002-of-00002"),
        ("truncated shard", variant(shards=2, after=lambda d: truncate(
            os.path.join(d, "model-00001-of-00002.safetensors"))), "model-00001-of-00002"),
        ("index names a tensor its shard lacks", variant(shards=2, after=lambda d: index_lie(d)), "ghost"),
        ("index not JSON", variant(shards=2, after=lambda d: open(
            os.path.join(d, "model.safetensors.index.json"), "w").write("{")), "index"),
    ]
    for label, d, needle in cases:
        expect_refusal(c, label, d, inp, needle)
    if c.backend != "cuda":  # one GPU: the CUDA target runs one rank
        expect_refusal(c, "missing tensor, 2 ranks", cases[0][1], inp, w_name, np_=2)
    expect_refusal(c, "no such directory", c.wd.file("nowhere"), inp, "nowhere")
    draft = c.wd.file("a-draft")  # a DSpark draft given as the target: named as such
    make_dspark.make(good, draft)
    expect_refusal(c, "a DSpark draft as the target", draft, inp, "a DSpark draft, not a target")
    bad_tok = toks.copy()
    bad_tok[1, 3] = m.V
    expect_refusal(c, "token id = vocab", good, inputs(bad_tok), "outside the vocabulary")
    bad_tok[1, 3] = -1
    expect_refusal(c, "token id -1", good, inputs(bad_tok), "outside the vocabulary")
    expect_refusal(c, "prompt longer than the cache", good, inputs(toks, chunks=[L], max_len=[16]), "cache holds")
    expect_refusal(c, "truncate past the length", good, inputs(toks, truncate=[30, 1, 1]), "cannot keep")
    expect_refusal(c, "negative temperature", good, inputs(toks, temperature=[-1, 0, 0], seed=[1, 2, 3]),
                   "temperature")
    expect_refusal(c, "tap past the last layer", good, inputs(toks, taps=[2]), "tap")


def truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 100)


def index_lie(d):
    p = os.path.join(d, "model.safetensors.index.json")
    idx = json.load(open(p))
    idx["weight_map"]["model.layers.0.ghost.weight"] = "model-00001-of-00002.safetensors"
    make_qwen3.write_json(p, idx)


CASES = {"reference": case_reference, "invariance": case_invariance, "sampling": case_sampling,
         "tp": case_tp, "tp_invariant": case_tp_invariant, "tp_process": case_tp_process, "row_parallel": case_row_parallel, "bad": case_bad}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", required=True)
    ap.add_argument("--backend", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--only", choices=sorted(CASES), action="append")
    a = ap.parse_args()
    if not os.path.exists(a.driver):
        print("no driver at %s" % a.driver)
        return 1
    if a.backend == "cuda":
        harness.cuda_or_skip()
    with harness.Workdir() as wd:
        return harness.run_cases(Ctx(a.driver, a.backend, wd), CASES, a.only, "test_qwen3")


if __name__ == "__main__":
    sys.exit(main())
