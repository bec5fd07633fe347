#!/usr/bin/env python3
"""The KDA layer of a Kimi-Linear checkpoint through the public API
(tests/kda_layer_driver.c) against the fp64 numpy oracle's layer
(kda_ref.layer_forward, written from the architecture), on small random
checkpoints written with Kimi-Linear's tensor names and shapes
(model.layers.N.self_attn.*, conv weights [D, 1, W], A_log [1, 1, H, 1] and
dt_bias in F32, config.json's linear_attn_config with 1-based layer lists).

  test_kda_layer.py --driver PATH [--backend cpu|cuda] [--only CASE]

With --backend cuda (one GPU) the layer runs on the CUDA backend and the cases
that need several ranks (TP 2, the TP 3 refusal) are left out.

Checked:
- against the oracle, per sequence: the relative RMS error of the layer's
  output within TOL_RMS and every value within TOL_MAX of the sequence's
  largest magnitude (the runtime keeps bf16 between the layer's stages and sums
  in fp32; the oracle rounds at the same points and sums in fp64), for the
  softplus gate and the lower-bound gate, chunked prefill of a varlen batch,
  prefill followed by recurrent decode, and TP 2 under mpirun;
- bit for bit: a sequence alone equals it inside a varlen batch (and in another
  slot); the recurrent form gives the same bits whatever the tokens per call;
  a kept verify call, an accepted prefix and more tokens equal a fresh run
  over the accepted tokens;
- bad checkpoints and calls: a non-zero exit naming the field or tensor, on
  every rank (an unexpected tensor under the layer's self_attn. included)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import harness  # noqa: E402
import kda_ref  # noqa: E402
import st  # noqa: E402

TOL_RMS = 4e-3
TOL_MAX = 2.0 ** -5
LAYERS = 3         # layer numbers 1 and 3 are KDA, 2 full attention
LAYER = 2          # the 0-based layer run (number 3)
LENS = [70, 5, 130]


def bf(a):
    return np.asarray(a, np.float64).astype(ml_dtypes.bfloat16)


def make(path, cfg, seed, lower_bound=None, edit_config=None, edit_tensors=None):
    """A Kimi-Linear directory whose layer LAYER holds kda_ref's random weights."""
    os.makedirs(path, exist_ok=True)
    wt = kda_ref.random_weights(cfg, np.random.default_rng(seed))
    lac = {"kda_layers": [1, 3], "full_attn_layers": [2], "head_dim": cfg.K, "num_heads": cfg.H,
           "short_conv_kernel_size": cfg.W}
    if lower_bound is not None:
        lac["gate_lower_bound"] = lower_bound
    conf = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": cfg.hidden,
            "num_hidden_layers": LAYERS, "rms_norm_eps": cfg.norm_eps, "torch_dtype": "bfloat16",
            "linear_attn_config": lac}
    if edit_config:
        edit_config(conf)
    pre = "model.layers.%d.self_attn." % LAYER
    t = {}
    for n in ("q_proj", "k_proj", "v_proj", "f_a_proj", "f_b_proj", "b_proj", "g_a_proj", "g_b_proj", "o_proj"):
        t[pre + n + ".weight"] = bf(wt[n])
    for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
        t[pre + n + ".weight"] = bf(wt[n][:, None, :])
    t[pre + "A_log"] = wt["A_log"].astype(np.float32).reshape(1, 1, -1, 1)
    t[pre + "dt_bias"] = wt["dt_bias"].astype(np.float32)
    t[pre + "o_norm.weight"] = wt["o_norm"].astype(np.float32)
    if edit_tensors:
        edit_tensors(t, pre)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(conf, f)
    st.save(os.path.join(path, "model.safetensors"), t)
    return wt


class Ctx:
    def __init__(self, driver, backend, wd):
        self.driver, self.backend, self.wd = driver, backend, wd
        self.tally = harness.Tally()
        self.n = 0

    def run(self, mdir, x, lens, chunks, forms=None, slots=None, np_=1, layer=LAYER, extra=None, plan=False, tp=None,
            env=None):
        self.n += 1
        inp, out = self.wd.file("in%d.safetensors" % self.n), self.wd.file("out%d.safetensors" % self.n)
        d = {"x": bf(x), "lengths": np.asarray(lens, np.int64), "layer": np.asarray([layer], np.int64),
             "chunks": np.asarray(chunks, np.int64)}
        if forms is not None:
            d["forms"] = np.asarray(forms, np.int64)
        if slots is not None:
            d["slots"] = np.asarray(slots, np.int64)
        d.update(extra or {})
        st.save(inp, d)
        args = [self.driver, mdir, inp, out] + (["--backend", self.backend] if self.backend else []) + \
            (["--plan"] if plan else []) + (["--tp", str(tp)] if tp else [])
        rc, _, se, _ = harness.run(args, np_=np_, timeout=180, env=env)
        self.tally.runs += 1
        if rc != 0:
            return rc, None, se
        o = st.load(out)[0]
        return rc, (o["y"].astype(np.float64) if extra is None else {k: v.astype(np.float64) for k, v in o.items()}), se

    def ok(self, label, *a, **kw):
        rc, y, se = self.run(*a, **kw)
        if rc != 0:
            self.tally.fail("%s: exit %s: %s" % (label, rc, se.strip()[-600:]))
        return y


def config(lower_bound=None):
    return kda_ref.Config(hidden=96, H=4, K=32, W=4, lower_bound=lower_bound, norm_eps=1e-5)


def inputs(seed, lens=LENS, hidden=96):
    return bf(np.random.default_rng(seed).standard_normal((sum(lens), hidden))).astype(np.float64)


def against(c, label, y, x, wt, cfg, lens):
    """y against the oracle's layer over the same varlen batch."""
    cu = np.cumsum([0] + list(lens))
    want, _ = kda_ref.layer_forward(x, wt, cfg, cu_seqlens=cu, mode="chunk")
    for n in range(len(lens)):
        a, b = y[cu[n]:cu[n + 1]], want[cu[n]:cu[n + 1]]
        rms = float(np.sqrt(np.sum((a - b) ** 2) / max(np.sum(b * b), 1e-300)))
        worst = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
        c.tally.logits += a.size
        if not (rms <= TOL_RMS and worst <= TOL_MAX):
            c.tally.logit_bad += a.size
            c.tally.fail("%s, sequence %d: relative RMS error %.2e (tolerance %.0e), largest %.2e (tolerance %.2e)"
                         % (label, n, rms, TOL_RMS, worst, TOL_MAX))
        else:
            print("  %s, sequence %d (%d tokens): rms %.2e, largest %.2e" % (label, n, lens[n], rms, worst))


def same(c, label, got, want):
    c.tally.logits += want.size
    if got is None or got.shape != want.shape or not np.array_equal(got, want):
        c.tally.logit_bad += want.size
        c.tally.fail("%s: not bit-identical" % label)


def case_reference(c):
    for lb in (None, -5.0):
        cfg = config(lb)
        d = c.wd.file("ref%s" % ("" if lb is None else "-lb"))
        wt = make(d, cfg, 3, lower_bound=lb)
        x = inputs(4)
        label = "softplus gate" if lb is None else "lower-bound gate"
        y = c.ok(label, d, x, LENS, [1000])
        if y is not None:
            against(c, label + ", one chunked call", y, x, wt, cfg, LENS)
        # prefill of 40 (chunked), then recurrent calls of one token
        y2 = c.ok(label + " decode", d, x, LENS, [40, 1], forms=[0, 1])
        if y2 is not None:
            against(c, label + ", prefill 40 then decode", y2, x, wt, cfg, LENS)


def case_invariance(c):
    cfg = config()
    d = c.wd.file("inv")
    make(d, cfg, 5)
    x = inputs(6)
    base = c.ok("batch", d, x, LENS, [1000])
    cu = np.cumsum([0] + LENS)
    for n in range(len(LENS)):
        alone = c.ok("alone %d" % n, d, x[cu[n]:cu[n + 1]], [LENS[n]], [1000], slots=[2 - n])
        if base is not None and alone is not None:
            same(c, "sequence %d alone in slot %d vs in the batch" % (n, 2 - n), alone, base[cu[n]:cu[n + 1]])
    r1 = c.ok("recurrent x1", d, x, LENS, [1], forms=[1])
    r7 = c.ok("recurrent x7", d, x, LENS, [7], forms=[1])
    if r1 is not None and r7 is not None:
        same(c, "recurrent form, 1 vs 7 tokens per call", r7, r1)


def case_decode_form(c):
    """Calls of one token per sequence go to the op's decode form (on CUDA one fused kernel where the head dim is
    64 or 128); calls of 7 tokens take the separate kernels. The recurrent form's bits do not depend on the
    tokens per call, so the two agree bit for bit, and both follow the reference."""
    cfg = kda_ref.Config(hidden=96, H=2, K=64, W=4, lower_bound=None, norm_eps=1e-5)
    d = c.wd.file("dec64")
    wt = make(d, cfg, 17)
    x = inputs(18)
    r1 = c.ok("K 64, decode calls", d, x, LENS, [1], forms=[1])
    r7 = c.ok("K 64, 7 tokens a call", d, x, LENS, [7], forms=[1])
    if r1 is not None:
        against(c, "K 64, decode calls", r1, x, wt, cfg, LENS)
    if r1 is not None and r7 is not None:
        same(c, "K 64, decode calls vs 7 tokens a call", r1, r7)


def case_rollback(c):
    """A kept verify call, an accepted prefix per sequence, then more tokens:
    bit for bit a fresh run over the accepted tokens and the same continuation
    (the recurrent form's bits do not depend on the tokens per call)."""
    cfg = config()
    d = c.wd.file("rb")
    make(d, cfg, 13)
    L0, NV, NC, acc = 24, 6, 5, [2, 6, 1]
    rng = np.random.default_rng(14)
    x = inputs(15, lens=[L0] * 3)
    vx = bf(rng.standard_normal((3 * NV, cfg.hidden))).astype(np.float64)
    cx = bf(rng.standard_normal((3 * NC, cfg.hidden))).astype(np.float64)
    extra = {"vx": bf(vx), "vlens": np.full(3, NV, np.int64), "accept": np.asarray(acc, np.int64),
             "cx": bf(cx), "clens": np.full(3, NC, np.int64)}
    o = c.ok("verify, accept, continue", d, x, [L0] * 3, [L0], forms=[0], extra=extra)
    # the same calls, each batch staged once (dsp_kda_plan) and run by two handles of the layer (the driver
    # checks they agree), as a hybrid model's layers would share it
    op = c.ok("the same on a plan", d, x, [L0] * 3, [L0], forms=[0], extra=extra, plan=True)
    if o is not None and op is not None:
        for k in ("y", "vy", "cy"):
            same(c, "planned vs per-call metadata, %s" % k, op[k], o[k])
    rows = [np.concatenate([x[b * L0:(b + 1) * L0], vx[b * NV:b * NV + acc[b]], cx[b * NC:(b + 1) * NC]])
            for b in range(3)]
    lens = [len(r) for r in rows]
    f = c.ok("fresh over the accepted tokens", d, np.concatenate(rows), lens, [L0, 1], forms=[0, 1])
    # TP 2: two ranks under mpirun and two threads of one process (on CUDA, GPUs), each on a plan: the same bits
    sizes, env = harness.tp_sizes(c.backend, (2,))
    if sizes:
        om = c.ok("TP 2 under mpirun, on a plan", d, x, [L0] * 3, [L0], forms=[0], extra=extra, plan=True, np_=2,
                  env=env)
        o1 = c.ok("TP 2 in one process, on a plan", d, x, [L0] * 3, [L0], forms=[0], extra=extra, plan=True, tp=2,
                  env=env)
        o1c = c.ok("TP 2 in one process", d, x, [L0] * 3, [L0], forms=[0], extra=extra, tp=2, env=env)
        if om is not None and o1 is not None and o1c is not None:
            for k in ("y", "vy", "cy"):
                same(c, "TP 2: one process vs two under mpirun, %s" % k, o1[k], om[k])
                same(c, "TP 2 in one process: planned vs per-call, %s" % k, o1[k], o1c[k])
    if o is None or f is None:
        return
    at = np.cumsum([0] + lens)
    for b in range(3):
        fresh = f[at[b]:at[b + 1]]
        same(c, "sequence %d: the %d accepted drafts' outputs" % (b, acc[b]), o["vy"][b * NV:b * NV + acc[b]],
             fresh[L0:L0 + acc[b]])
        same(c, "sequence %d: the continuation after accepting %d of %d" % (b, acc[b], NV),
             o["cy"][b * NC:(b + 1) * NC], fresh[L0 + acc[b]:])


def case_tp(c):
    cfg = config()
    d = c.wd.file("tp")
    wt = make(d, cfg, 7)
    x = inputs(8)
    y1 = c.ok("TP 1", d, x, LENS, [64])
    y2 = c.ok("TP 2", d, x, LENS, [64], np_=2)
    if y2 is not None:
        against(c, "TP 2 (mpirun)", y2, x, wt, cfg, LENS)
    if y1 is not None and y2 is not None:
        c.tally.logits += y1.size
        gap = float(np.max(np.abs(y1 - y2)) / max(np.max(np.abs(y1)), 1e-300))
        print("  TP 1 vs TP 2: largest difference %.2e of the largest value (o_proj's partial sums)" % gap)
        if gap > TOL_MAX:
            c.tally.logit_bad += y1.size
            c.tally.fail("TP 1 vs TP 2 differ by %.2e of the largest value" % gap)


def case_bad(c):
    cfg = config()
    x = inputs(9, lens=[10])

    def refused(label, needles, edit_config=None, edit_tensors=None, np_=1, layer=LAYER):
        d = c.wd.file("bad%d" % c.n)
        make(d, cfg, 11, edit_config=edit_config, edit_tensors=edit_tensors)
        rc, _, se, = c.run(d, x, [10], [10], np_=np_, layer=layer)
        if rc == 0 or any(n not in se for n in needles) or "Segmentation" in se or "Abort" in se:
            c.tally.fail("%s: exit %s, message %r (want %s)" % (label, rc, se.strip()[-300:], needles))
        else:
            print("  refused, %s: %s" % (label, se.strip().splitlines()[-1][:160]))

    refused("a full-attention layer", ["kda_layers", "full-attention"], layer=1)
    refused("a layer past the end", ["layer 5"], layer=5)
    refused("another architecture", ["architectures"],
            edit_config=lambda k: k.update(architectures=["Qwen3ForCausalLM"]))
    refused("a full-rank gate", ["use_full_rank_gate"],
            edit_config=lambda k: k["linear_attn_config"].update(use_full_rank_gate=True))
    refused("quantized weights", ["quantization_config"],
            edit_config=lambda k: k.update(quantization_config={"quant_method": "fp8"}))
    refused("a positive gate bound", ["gate_lower_bound"],
            edit_config=lambda k: k["linear_attn_config"].update(gate_lower_bound=2.0))
    refused("no kda_layers", ["kda_layers"], edit_config=lambda k: k["linear_attn_config"].pop("kda_layers"))
    refused("a missing tensor", ["f_b_proj"], edit_tensors=lambda t, p: t.pop(p + "f_b_proj.weight"))
    refused("a misshapen o_norm", ["o_norm.weight", "shape"],
            edit_tensors=lambda t, p: t.update({p + "o_norm.weight": np.ones(cfg.K + 1, np.float32)}))
    refused("an F16 projection", ["q_proj.weight", "F16"],
            edit_tensors=lambda t, p: t.update({p + "q_proj.weight": t[p + "q_proj.weight"].astype(np.float16)}))
    # Kimi-Linear ships no bias in this layer: an extra one would be ignored
    # silently, so the loader refuses it by name.
    refused("an extra bias on g_b_proj", ["unexpected tensor", "self_attn.g_b_proj.bias"],
            edit_tensors=lambda t, p: t.update({p + "g_b_proj.bias": np.ones(cfg.H * cfg.K, np.float32)}))
    refused("an extra bias on q_conv1d", ["unexpected tensor", "self_attn.q_conv1d.bias"],
            edit_tensors=lambda t, p: t.update({p + "q_conv1d.bias": np.ones(cfg.H * cfg.K, np.float32)}))
    if c.backend != "cuda":  # one GPU: no multi-rank refusals
        refused("TP 3 for 4 heads", ["num_heads"], np_=3)


CASES = {"reference": case_reference, "invariance": case_invariance, "decode": case_decode_form,
         "rollback": case_rollback, "tp": case_tp,
         "bad": case_bad}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", required=True)
    ap.add_argument("--backend", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--only", choices=sorted(CASES), action="append")
    a = ap.parse_args()
    cases = dict(CASES)
    if a.backend == "cuda":
        harness.cuda_or_skip()
        del cases["tp"]  # one GPU: TP 2 needs two ranks
    with harness.Workdir() as wd:
        return harness.run_cases(Ctx(a.driver, a.backend, wd), cases, a.only, "test_kda_layer")


if __name__ == "__main__":
    sys.exit(main())
