"""fp64 reference of Kimi Delta Attention (KDA) and the layer around it.

Written from the operation's definition (KDA_NOTES.md lists the facts and where
they were checked in flash-linear-attention and vLLM), not from our C code.
Every function computes in float64 with numpy; the layer forward can round to
bf16 (ml_dtypes, round to nearest even) at the points where the runtime holds
bf16 activations.

Layouts (one sequence unless said otherwise):
  q, k  [T, H, K]      query/key heads (H), key dim K
  v     [T, HV, V]     value heads HV (a multiple of H: grouped value attention)
  g     [T, HV, K]     post-gate log decay (<= 0), applied once per token
  beta  [T, HV]
  S     [HV, K, V]     recurrent state (K-major, as fla's default)
  conv state [W-1, D]  the last W-1 conv inputs, row 0 the oldest

Usage:
  python3 kda_ref.py --self-test     checks the reference against itself
  python3 kda_ref.py --emit FILE     writes the C test's fixture (see emit())
"""
import struct
import sys

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F64 = np.float64
CHUNK = 64
L2_EPS = 1e-6


# ---- elementwise pieces ------------------------------------------------------
def bf16(x):
    """Round to bf16 (nearest, ties to even) through float32, as the runtime's
    fp32 kernels do; returned as float64 values."""
    return np.asarray(x, dtype=F64).astype(np.float32).astype(BF16).astype(F64)


def sigmoid(x):
    x = np.asarray(x, dtype=F64)
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))),
                    np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


def silu(x):
    return np.asarray(x, dtype=F64) * sigmoid(x)


def softplus(x):
    """torch.nn.functional.softplus with beta 1 and threshold 20: x > 20 gives x."""
    x = np.asarray(x, dtype=F64)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def l2norm(x, eps=L2_EPS):
    """x / sqrt(sum(x^2) + eps) over the last axis (fla: l2norm_fwd, eps 1e-6)."""
    x = np.asarray(x, dtype=F64)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


# ---- gate and beta -----------------------------------------------------------
def gate(f, A_log, dt_bias, lower_bound=None):
    """The forget gate in log space, applied exactly once.
    f: [T, HV, K] raw f_b_proj output; A_log: [HV] or None (unit scale);
    dt_bias: [HV*K] or None.
    standard:    g = -exp(A_log) * softplus(f + dt_bias)
    lower bound: g = lower_bound * sigmoid(exp(A_log) * (f + dt_bias))"""
    f = np.asarray(f, dtype=F64)
    HV, K = f.shape[-2:]
    x = f if dt_bias is None else f + np.asarray(dt_bias, dtype=F64).reshape(HV, K)
    a = 1.0 if A_log is None else np.exp(np.asarray(A_log, dtype=F64)).reshape(HV, 1)
    if lower_bound is None:
        return -a * softplus(x)
    return lower_bound * sigmoid(a * x)


def beta_of(b):
    """beta = sigmoid(b_proj(x)), one scalar per token and value head."""
    return sigmoid(b)


# ---- short convolution -------------------------------------------------------
def conv_prefill(x, w, bias=None, state=None):
    """Depthwise causal conv + SiLU over one sequence.
    x: [T, D]; w: [D, W] (w[:, W-1] multiplies the current input);
    state: [W-1, D] previous inputs (oldest first) or None (zeros).
    Returns y [T, D] and the new state [W-1, D]."""
    x = np.asarray(x, dtype=F64)
    T, D = x.shape
    W = w.shape[1]
    st = np.zeros((W - 1, D)) if state is None else np.asarray(state, dtype=F64)
    xp = np.concatenate([st, x], axis=0)  # [W-1+T, D]
    y = np.zeros((T, D))
    for j in range(W):
        y += xp[j:j + T] * np.asarray(w, dtype=F64)[:, j]
    if bias is not None:
        y += np.asarray(bias, dtype=F64)
    return silu(y), xp[xp.shape[0] - (W - 1):].copy()


def conv_decode(x, w, bias, state):
    """One token: x [D], state [W-1, D] -> y [D], new state."""
    y, st = conv_prefill(np.asarray(x)[None, :], w, bias, state)
    return y[0], st


# ---- the recurrence ----------------------------------------------------------
def _expand(q, k, HV):
    H = q.shape[1]
    G = HV // H
    assert H * G == HV, "HV must be a multiple of H"
    return np.repeat(q, G, axis=1), np.repeat(k, G, axis=1)


def recurrent(q, k, v, g, beta, scale=None, S0=None, qk_l2norm=True, keep_states=False):
    """Sequence form. Per token t and value head:
        S = diag(exp(g_t)) S;  u = beta_t (v_t - S^T k_t);  S = S + k_t u^T;
        o_t = S^T (q_t * scale)   (the output reads the updated state)
    Returns o [T, HV, V], the final state [HV, K, V] and, with keep_states,
    every per-token state [T, HV, K, V] (the state after token t)."""
    q, k, v, g, beta = (np.asarray(a, dtype=F64) for a in (q, k, v, g, beta))
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    if scale is None:
        scale = K ** -0.5
    if qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q, k = _expand(q, k, HV)
    q = q * scale
    S = np.zeros((HV, K, V)) if S0 is None else np.array(S0, dtype=F64)
    o = np.zeros((T, HV, V))
    states = np.zeros((T, HV, K, V)) if keep_states else None
    for t in range(T):
        S = S * np.exp(g[t])[:, :, None]
        u = beta[t][:, None] * (v[t] - np.einsum("hk,hkv->hv", k[t], S))
        S = S + k[t][:, :, None] * u[:, None, :]
        o[t] = np.einsum("hk,hkv->hv", q[t], S)
        if keep_states:
            states[t] = S
    return o, S, states


def chunked(q, k, v, g, beta, scale=None, S0=None, qk_l2norm=True, chunk=CHUNK):
    """The chunked (WY / UT transform) form, chunk by chunk from the sequence start,
    equal to recurrent() up to rounding. Within a chunk of n tokens with
    G_i = sum_{s<=i} g_s (from the chunk start) and S the state before it:
      A_ij   = sum_d k_i k_j exp(G_i - G_j)    j <  i
      Aqk_ij = sum_d q_i k_j exp(G_i - G_j)    j <= i
      T      = (I + diag(beta) A)^-1           forward substitution (UT transform)
      w      = T diag(beta) (k * exp(G)),  u = T diag(beta) v      (WY representation)
      U      = u - w S                         the chunk's delta-rule updates
      o      = (q * exp(G)) S + Aqk U
      S'     = diag(exp(G_last)) S + (k * exp(G_last - G))^T U"""
    q, k, v, g, beta = (np.asarray(a, dtype=F64) for a in (q, k, v, g, beta))
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    if scale is None:
        scale = K ** -0.5
    if qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q, k = _expand(q, k, HV)
    q = q * scale
    S = np.zeros((HV, K, V)) if S0 is None else np.array(S0, dtype=F64)
    o = np.zeros((T, HV, V))
    for h in range(HV):
        Sh = S[h]
        for c0 in range(0, T, chunk):
            c1 = min(c0 + chunk, T)
            n = c1 - c0
            qc, kc, vc, bc = q[c0:c1, h], k[c0:c1, h], v[c0:c1, h], beta[c0:c1, h]
            G = np.cumsum(g[c0:c1, h], axis=0)                      # [n, K]
            low = np.tril(np.ones((n, n), dtype=bool))              # j <= i
            D = np.where(low[:, :, None], G[:, None, :] - G[None, :, :], -np.inf)
            E = np.exp(D)                                           # exp(G_i - G_j), 0 above
            A = np.einsum("id,jd,ijd->ij", kc, kc, E) * ~np.eye(n, dtype=bool)
            Aqk = np.einsum("id,jd,ijd->ij", qc, kc, E)
            L = bc[:, None] * A
            Tm = np.zeros((n, n))
            for i in range(n):                                      # T_i = e_i - sum_m L_im T_m
                row = -L[i, :i] @ Tm[:i] if i else np.zeros(n)
                row[i] = 1.0
                Tm[i] = row
            Tb = Tm * bc[None, :]
            w = Tb @ (kc * np.exp(G))
            u = Tb @ vc
            U = u - w @ Sh
            o[c0:c1, h] = (qc * np.exp(G)) @ Sh + Aqk @ U
            Sh = np.exp(G[-1])[:, None] * Sh + (kc * np.exp(G[-1][None, :] - G)).T @ U
        S[h] = Sh
    return o, S


# ---- output norm -------------------------------------------------------------
def gated_rmsnorm(o, z, weight, eps):
    """Per (token, head) row of V values: o * rsqrt(mean(o^2) + eps) * weight * sigmoid(z);
    one weight [V] shared by all heads (fla FusedRMSNormGated, activation sigmoid)."""
    o = np.asarray(o, dtype=F64)
    r = 1.0 / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + eps)
    return o * r * np.asarray(weight, dtype=F64) * sigmoid(z)


# ---- the layer ---------------------------------------------------------------
class Config:
    def __init__(self, hidden, H, K, V=None, HV=None, W=4, lower_bound=None, norm_eps=1e-5):
        self.hidden, self.H, self.K = hidden, H, K
        self.V = K if V is None else V
        self.HV = H if HV is None else HV
        self.W, self.lower_bound, self.norm_eps = W, lower_bound, norm_eps


def random_weights(cfg, rng):
    """Kimi-Linear's tensor names and shapes ([out, in] for linear layers)."""
    h, H, HV, K, V, W = cfg.hidden, cfg.H, cfg.HV, cfg.K, cfg.V, cfg.W
    r = lambda *s, sc=1.0: bf16(rng.standard_normal(s) * sc)
    return {
        "q_proj": r(H * K, h, sc=h ** -0.5), "k_proj": r(H * K, h, sc=h ** -0.5),
        "v_proj": r(HV * V, h, sc=h ** -0.5),
        "q_conv1d": r(H * K, W, sc=0.5), "k_conv1d": r(H * K, W, sc=0.5),
        "v_conv1d": r(HV * V, W, sc=0.5),
        "f_a_proj": r(K, h, sc=h ** -0.5), "f_b_proj": r(HV * K, K, sc=K ** -0.5),
        "b_proj": r(HV, h, sc=h ** -0.5),
        "g_a_proj": r(V, h, sc=h ** -0.5), "g_b_proj": r(HV * V, V, sc=V ** -0.5),
        "A_log": np.log(rng.uniform(1, 16, HV)).astype(np.float32).astype(F64),
        "dt_bias": (rng.standard_normal(HV * K) * 0.5).astype(np.float32).astype(F64),
        "o_norm": (1.0 + 0.1 * rng.standard_normal(V)).astype(np.float32).astype(F64),
        "o_proj": r(h, HV * V, sc=(HV * V) ** -0.5),
    }


def layer_projections(x, Wt, cfg, round_bf16=True):
    """The layer's linear maps of x [T, hidden]: q, k, v (pre-conv), f (f_b(f_a)),
    b, z (g_b(g_a)); each rounded to bf16 when round_bf16 (bf16 activations)."""
    rnd = bf16 if round_bf16 else (lambda a: a)
    lin = lambda a, w: rnd(a @ w.T)
    return {"q": lin(x, Wt["q_proj"]), "k": lin(x, Wt["k_proj"]), "v": lin(x, Wt["v_proj"]),
            "f": lin(lin(x, Wt["f_a_proj"]), Wt["f_b_proj"]), "b": lin(x, Wt["b_proj"]),
            "z": lin(lin(x, Wt["g_a_proj"]), Wt["g_b_proj"])}


def layer_core(P, Wt, cfg, cache=None, mode="chunk", round_bf16=True, keep=None):
    """From the projections P of one sequence to the o_proj input.
    cache: None or {"conv": [W-1, Dqkv] (q|k|v inputs), "S": [HV, K, V]}; returns
    (normed [T, HV*V], new cache). keep (a dict) receives the intermediates."""
    rnd = bf16 if round_bf16 else (lambda a: a)
    H, HV, K, V = cfg.H, cfg.HV, cfg.K, cfg.V
    T = P["q"].shape[0]
    xqkv = np.concatenate([P["q"], P["k"], P["v"]], axis=1)
    wqkv = np.concatenate([Wt["q_conv1d"], Wt["k_conv1d"], Wt["v_conv1d"]], axis=0)
    y, conv_state = conv_prefill(xqkv, wqkv, None, None if cache is None else cache["conv"])
    y = rnd(y)
    q = y[:, :H * K].reshape(T, H, K)
    k = y[:, H * K:2 * H * K].reshape(T, H, K)
    v = y[:, 2 * H * K:].reshape(T, HV, V)
    g = gate(P["f"].reshape(T, HV, K), Wt["A_log"], Wt["dt_bias"], cfg.lower_bound)
    beta = beta_of(P["b"])
    if round_bf16:  # the runtime keeps g and beta in fp32
        g, beta = g.astype(np.float32).astype(F64), beta.astype(np.float32).astype(F64)
    S0 = None if cache is None else cache["S"]
    fn = chunked if mode == "chunk" else recurrent
    o, S = fn(q, k, v, g, beta, S0=S0)[:2]
    o = rnd(o)
    normed = gated_rmsnorm(o, P["z"].reshape(T, HV, V), Wt["o_norm"], cfg.norm_eps)
    if keep is not None:
        keep.update(conv=y, g=g, beta=beta, o=o, q=q, k=k, v=v)
    return normed.reshape(T, HV * V), {"conv": conv_state, "S": S}


def layer_forward(x, Wt, cfg, cu_seqlens=None, caches=None, mode="chunk", round_bf16=True):
    """A whole KDA layer from its weights: x [T, hidden] -> [T, hidden]; varlen
    through cu_seqlens (None: one sequence), one cache per sequence."""
    rnd = bf16 if round_bf16 else (lambda a: a)
    T = x.shape[0]
    cu = [0, T] if cu_seqlens is None else list(cu_seqlens)
    P = layer_projections(x, Wt, cfg, round_bf16)
    out = np.zeros((T, cfg.hidden))
    new = []
    for n in range(len(cu) - 1):
        sl = slice(cu[n], cu[n + 1])
        Pn = {key: val[sl] for key, val in P.items()}
        normed, c = layer_core(Pn, Wt, cfg, None if caches is None else caches[n], mode, round_bf16)
        out[sl] = rnd(rnd(normed) @ Wt["o_proj"].T)
        new.append(c)
    return out, new


# ---- self-test ---------------------------------------------------------------
def _rel(a, b):
    return float(np.sqrt(np.sum((a - b) ** 2) / max(np.sum(b * b), 1e-300)))


def _inputs(rng, T, H, HV, K, V, decay):
    q = rng.standard_normal((T, H, K))
    k = rng.standard_normal((T, H, K))
    v = rng.standard_normal((T, HV, V))
    f = rng.standard_normal((T, HV, K)) * 2.0
    if decay == "mild":
        g = gate(f - 4.0, np.full(HV, np.log(0.5)), None)
    elif decay == "strong":
        g = gate(f + 3.0, np.full(HV, np.log(8.0)), None)
    else:
        g = gate(f, np.log(rng.uniform(1, 16, HV)), None, lower_bound=-5.0)
    beta = sigmoid(rng.standard_normal((T, HV)))
    S0 = rng.standard_normal((HV, K, V)) * 0.3
    return q, k, v, g, beta, S0


def self_test():
    rng = np.random.default_rng(7)
    checks = 0
    # chunked == recurrent, lengths around the chunk, all gate strengths, GVA
    for (T, H, HV, K, V, decay) in [(1, 1, 1, 16, 8, "mild"), (63, 2, 2, 32, 16, "strong"),
                                     (64, 1, 2, 16, 24, "lb"), (130, 2, 2, 32, 32, "mild"),
                                     (97, 1, 1, 64, 64, "strong"), (200, 1, 1, 16, 16, "lb")]:
        q, k, v, g, beta, S0 = _inputs(rng, T, H, HV, K, V, decay)
        o_r, S_r, _ = recurrent(q, k, v, g, beta, S0=S0)
        o_c, S_c = chunked(q, k, v, g, beta, S0=S0)
        assert _rel(o_c, o_r) < 1e-11 and _rel(S_c, S_r) < 1e-11, (T, decay, _rel(o_c, o_r))
        checks += 1
        # prefill then decode == one longer prefill; per-token states == fresh runs
        m = min(5, T)
        o_a, S_a = chunked(q[:T - m], k[:T - m], v[:T - m], g[:T - m], beta[:T - m], S0=S0)
        o_b, S_b, st = recurrent(q[T - m:], k[T - m:], v[T - m:], g[T - m:], beta[T - m:], S0=S_a,
                                 keep_states=True)
        assert _rel(np.concatenate([o_a, o_b]), o_r) < 1e-11 and _rel(S_b, S_r) < 1e-11
        for a in range(1, m + 1):
            _, S_f, _ = recurrent(q[T - m:T - m + a], k[T - m:T - m + a], v[T - m:T - m + a],
                                  g[T - m:T - m + a], beta[T - m:T - m + a], S0=S_a)
            assert _rel(st[a - 1], S_f) < 1e-13
        checks += 2
    # the recurrence against a literal per-head loop of the formulas
    q, k, v, g, beta, S0 = _inputs(rng, 9, 1, 2, 8, 4, "mild")
    o_r, S_r, _ = recurrent(q, k, v, g, beta, S0=S0)
    for hv in range(2):
        S = S0[hv].copy()
        for t in range(9):
            qt, kt = l2norm(q[t, 0]) * 8 ** -0.5, l2norm(k[t, 0])
            S = np.diag(np.exp(g[t, hv])) @ S
            u = beta[t, hv] * (v[t, hv] - S.T @ kt)
            S = S + np.outer(kt, u)
            assert np.allclose(S.T @ qt, o_r[t, hv], rtol=1e-13, atol=1e-13)
        assert np.allclose(S, S_r[hv], rtol=1e-13, atol=1e-13)
    checks += 1
    # conv: prefill then decode == one longer prefill
    x = rng.standard_normal((11, 6))
    w = rng.standard_normal((6, 4))
    b = rng.standard_normal(6)
    y, st = conv_prefill(x, w, b)
    y1, s1 = conv_prefill(x[:2], w, b)  # shorter than W-1: the state keeps zeros
    outs = [y1]
    for t in range(2, 11):
        yt, s1 = conv_decode(x[t], w, b, s1)
        outs.append(yt[None])
    assert np.allclose(np.concatenate(outs), y, rtol=1e-14, atol=1e-14) and np.array_equal(s1, st)
    assert np.array_equal(st, x[-3:])
    checks += 1
    # gate: threshold, forms distinct, lower bound range
    f = np.array([[[25.0, 0.0, -30.0]]])
    assert gate(f, np.array([0.0]), None)[0, 0, 0] == -25.0
    assert gate(f, None, None)[0, 0, 1] == -np.log(2.0)
    gl = gate(rng.standard_normal((50, 2, 8)) * 10, np.zeros(2), None, lower_bound=-5.0)
    assert np.all(gl >= -5.0) and np.all(gl <= 0.0)
    checks += 1
    # varlen layer == each sequence alone; chunk == recurrent mode
    cfg = Config(hidden=24, H=2, K=16, lower_bound=-5.0)
    Wt = random_weights(cfg, rng)
    xs = bf16(rng.standard_normal((70, 24)))
    out, _ = layer_forward(xs, Wt, cfg, cu_seqlens=[0, 3, 70], round_bf16=False)
    o1, _ = layer_forward(xs[:3], Wt, cfg, round_bf16=False)
    o2, _ = layer_forward(xs[3:], Wt, cfg, round_bf16=False, mode="recurrent")
    assert _rel(out, np.concatenate([o1, o2])) < 1e-11
    checks += 1
    print("kda_ref self-test: %d checks passed" % checks)


# ---- the C test's fixture ----------------------------------------------------
# Little-endian records after the magic b"KDAF" and a u32 count: u16 name length,
# the name, u8 dtype (0 f64, 1 f32, 2 bf16, 3 i32), u8 ndim, i64 shape[ndim], data.
_CODES = {0: "<f8", 1: "<f4", 2: BF16, 3: "<i4"}


def _rec(name, arr, code):
    a = np.ascontiguousarray(np.asarray(arr).astype(_CODES[code]))
    nb = name.encode()
    head = struct.pack("<H", len(nb)) + nb + struct.pack("<BB", code, a.ndim)
    head += b"".join(struct.pack("<q", s) for s in a.shape)
    return head + a.tobytes()


def emit_case(prefix, cfg, seqlens, has_state, seed, decay=None):
    """One layer case: the merged projection output (bf16) the C side reads
    through strided views, the layer's parameters and caches, and the expected
    values of every stage computed here in float64.
    decay (None: random_weights' A_log and dt_bias) sets the gate's strength
    through its parameters, drawn from their own stream seeded seed + 1000:
    (a_lo, a_hi, dt_mean, dt_sd) gives exp(A_log) uniform in [a_lo, a_hi) per
    value head and dt_bias normal(dt_mean, dt_sd) per (head, key dim)."""
    rng = np.random.default_rng(seed)
    Wt = random_weights(cfg, rng)
    if decay is not None:
        a_lo, a_hi, dt_mean, dt_sd = decay
        rg = np.random.default_rng(seed + 1000)
        Wt["A_log"] = np.log(rg.uniform(a_lo, a_hi, cfg.HV)).astype(np.float32).astype(F64)
        Wt["dt_bias"] = (dt_mean + dt_sd * rg.standard_normal(cfg.HV * cfg.K)).astype(np.float32).astype(F64)
    H, HV, K, V, W = cfg.H, cfg.HV, cfg.K, cfg.V, cfg.W
    cu = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int64)
    T = int(cu[-1])
    x = bf16(rng.standard_normal((T, cfg.hidden)))
    P = layer_projections(x, Wt, cfg)
    Dqkv = 2 * H * K + HV * V
    # one merged projection row per token: q | k | v | f | b | z
    proj = np.concatenate([P["q"], P["k"], P["v"], P["f"], P["b"], P["z"]], axis=1)
    conv_w = np.concatenate([Wt["q_conv1d"], Wt["k_conv1d"], Wt["v_conv1d"]], axis=0)
    N = len(seqlens)
    conv0 = bf16(rng.standard_normal((N, W - 1, Dqkv)))
    S0 = (rng.standard_normal((N, HV, K, V)) * 0.3).astype(np.float32).astype(F64)
    rec = []
    out = {"conv64": np.zeros((T, Dqkv)), "conv": np.zeros((T, Dqkv)), "g64": np.zeros((T, HV, K)),
           "beta64": np.zeros((T, HV)), "o64": np.zeros((T, HV, V)), "norm64": np.zeros((T, HV, V)),
           "e2e64": np.zeros((T, HV, V)), "S64": np.zeros((N, HV, K, V)),
           "convst": np.zeros((N, W - 1, Dqkv))}
    xqkv = proj[:, :Dqkv]
    for n in range(N):
        sl = slice(cu[n], cu[n + 1])
        Tn = int(cu[n + 1] - cu[n])
        st = conv0[n] if has_state[n] else None
        y, cst = conv_prefill(xqkv[sl], conv_w, None, st)
        out["conv64"][sl], out["conv"][sl], out["convst"][n] = y, bf16(y), cst
        g64 = gate(P["f"][sl].reshape(Tn, HV, K), Wt["A_log"], Wt["dt_bias"], cfg.lower_bound)
        b64 = beta_of(P["b"][sl])
        out["g64"][sl], out["beta64"][sl] = g64, b64
        # the recurrence from exactly the inputs the C kernels see: bf16 conv
        # output, g and beta rounded to fp32
        yq = bf16(y)
        q = yq[:, :H * K].reshape(Tn, H, K)
        k = yq[:, H * K:2 * H * K].reshape(Tn, H, K)
        v = yq[:, 2 * H * K:].reshape(Tn, HV, V)
        g32 = g64.astype(np.float32).astype(F64)
        b32 = b64.astype(np.float32).astype(F64)
        o, S = recurrent(q, k, v, g32, b32, S0=S0[n] if has_state[n] else None)[:2]
        out["o64"][sl], out["S64"][n] = o, S
        out["norm64"][sl] = gated_rmsnorm(bf16(o), P["z"][sl].reshape(Tn, HV, V), Wt["o_norm"],
                                          cfg.norm_eps)
        # the whole chain as the layer runs it (bf16 activations), from the projections
        cache = {"conv": conv0[n], "S": S0[n]} if has_state[n] else None
        Pn = {key: val[sl] for key, val in P.items()}
        normed, _ = layer_core(Pn, Wt, cfg, cache, mode="chunk")
        out["e2e64"][sl] = normed.reshape(Tn, HV, V)
    dims = np.array([H, HV, K, V, W, N, T, proj.shape[1], 0 if cfg.lower_bound is None else 1],
                    dtype=np.int32)
    rec.append(_rec(prefix + "dims", dims, 3))
    rec.append(_rec(prefix + "cu", cu, 3))
    rec.append(_rec(prefix + "has_state", np.array(has_state), 3))
    rec.append(_rec(prefix + "lower_bound", np.array([cfg.lower_bound or 0.0]), 1))
    rec.append(_rec(prefix + "norm_eps", np.array([cfg.norm_eps]), 1))
    rec.append(_rec(prefix + "proj", proj, 2))
    rec.append(_rec(prefix + "conv_w", conv_w, 1))
    rec.append(_rec(prefix + "conv0", conv0, 2))
    rec.append(_rec(prefix + "S0", S0, 1))
    for name in ("A_log", "dt_bias", "o_norm"):
        rec.append(_rec(prefix + name, Wt[name], 1))
    rec.append(_rec(prefix + "g32", out["g64"], 1))
    rec.append(_rec(prefix + "beta32", out["beta64"], 1))
    rec.append(_rec(prefix + "conv", out["conv"], 2))
    rec.append(_rec(prefix + "convst", out["convst"], 2))
    for name in ("conv64", "g64", "beta64", "o64", "S64", "norm64", "e2e64"):
        rec.append(_rec(prefix + name, out[name], 0))
    return rec


def emit(path):
    recs = []
    # Kimi-Linear's standard gate; head dim 64, a sequence without state, one with
    recs += emit_case("A.", Config(hidden=64, H=2, K=64, norm_eps=1e-5), [37, 70], [0, 1], 11)
    # Kimi-K3's lower-bound gate; head dim 128, a one-token sequence, GVA (HV = 2 H)
    recs += emit_case("B.", Config(hidden=96, H=1, HV=2, K=128, lower_bound=-5.0, norm_eps=1e-6),
                      [1, 66, 5], [1, 1, 0], 12)
    # gates from mild to strongly decaying (f from the projections is about N(0, 1);
    # A's random_weights gate is already strong: median g -6.1, 61% at -4.9 or below)
    # C: mild softplus gate, exp(A_log) in [0.05, 0.2), dt_bias ~ N(-3.5, 0.3): g median
    #    -3.1e-3, 99% above -0.05 (the f tail reaches -0.28), so the initial state and the
    #    carry across chunks still show in the outputs; head dim 128, 2 heads, 3 chunks
    recs += emit_case("C.", Config(hidden=64, H=2, K=128, norm_eps=1e-5), [150, 45], [1, 1], 13,
                      decay=(0.05, 0.2, -3.5, 0.3))
    # D: strong lower-bound gate (-5), exp(A_log) in [8, 16), dt_bias ~ N(1.5, 0.5): 85% of
    #    g at -4.9 or below, 5% above -0.05; head dim 64, 2 q/k heads, 4 value heads, 3 chunks
    recs += emit_case("D.", Config(hidden=64, H=2, HV=4, K=64, lower_bound=-5.0, norm_eps=1e-6),
                      [133, 20, 71], [1, 0, 1], 14, decay=(8.0, 16.0, 1.5, 0.5))
    # E: strong softplus gate, exp(A_log) in [8, 16), dt_bias ~ N(1, 0.5): g median -16,
    #    down to -72; head dim 64, 3 heads, 4 chunks
    recs += emit_case("E.", Config(hidden=64, H=3, K=64, norm_eps=1e-5), [200, 3], [1, 1], 15,
                      decay=(8.0, 16.0, 1.0, 0.5))
    with open(path, "wb") as fh:
        fh.write(b"KDAF" + struct.pack("<I", len(recs)))
        for r in recs:
            fh.write(r)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        self_test()
    elif len(sys.argv) == 3 and sys.argv[1] == "--emit":
        emit(sys.argv[2])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)
