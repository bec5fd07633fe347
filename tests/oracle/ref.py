"""The reference Markov head, written from DESIGN.md section 2 (contracts 1-5).

All arithmetic follows the contract literally: bf16 values widened exactly to
float32, float32 accumulation in a fixed order, one RNE rounding to bf16.
"""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np

import philox

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32


def bf16(x):
    """float32 (or wider) values -> bf16, round to nearest, ties to even."""
    return np.asarray(x, dtype=F32).astype(BF16)


def f32(x):
    return np.asarray(x).astype(F32)


def _round_f32(x):
    """An exact rational -> nearest float32, ties to even (gradual underflow,
    overflow to infinity)."""
    if x == 0:
        return F32(0.0)
    neg = x < 0
    m = -x if neg else x
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1
    q = Fraction(2) ** max(e - 23, -149)
    v = round(m / q) * q  # Fraction.__round__ rounds half to even
    if v >= Fraction(2) ** 128:
        r = math.inf
    else:
        r = float(v)
    return F32(-r if neg else r)


def _fma_f32(a, b, c):
    """fmaf(a, b, c) for finite a*b, exactly: one rounding of a*b + c."""
    if not math.isfinite(c):
        return F32(c)
    s = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    return _round_f32(s)


def product(a, w):
    """Contract 2 on the CPU backend: out[m, n] = bf16(acc), acc = +0.0f then
    acc = fmaf(a[m, k], w[n, k], acc) for k = 0..K-1 in order.
    a: [M, K] bf16, w: [N, K] bf16 -> [M, N] bf16.

    A bf16 x bf16 product has at most 16 significant bits, so float32 holds it
    exactly unless it overflows or underflows; then fmaf == round(acc + a*w)
    and the numpy float32 ops reproduce it. Elements whose product is not
    exact in float32 (compared with the always-exact float64 product) take the
    exact rational path instead."""
    a32 = f32(a)
    w32 = f32(w)
    M, K = a32.shape
    N, K2 = w32.shape
    assert K == K2, "product: inner sizes %d and %d differ" % (K, K2)
    acc = np.zeros((M, N), dtype=F32)
    with np.errstate(all="ignore"):
        for k in range(K):
            ak = a32[:, k:k + 1]
            wk = w32[None, :, k]
            p = ak * wk
            p64 = ak.astype(np.float64) * wk.astype(np.float64)
            odd = np.isfinite(p64) & (p.astype(np.float64) != p64)
            nxt = acc + p
            if odd.any():
                for m, n in zip(*np.nonzero(odd)):
                    nxt[m, n] = _fma_f32(a32[m, k], w32[n, k], acc[m, n])
            acc = nxt
    return bf16(acc)


def argmax(x):
    """torch.argmax over a 1-D float array: the first NaN if any, else the
    first index of the maximum (-0 == +0; an all -inf row gives 0)."""
    x = np.asarray(x)
    nan = np.isnan(x)
    if nan.any():
        return int(np.argmax(nan))
    return int(np.argmax(x == x.max()))


def gumbel(seed, pos, V):
    """float32 Gumbel noise for token ids 0..V-1 at absolute position pos:
    g = float32(-log(-log(u))) in float64, u = (w0 + 0.5) / 2^32."""
    w0 = philox.word0_for_tokens(int(seed), int(pos), np.arange(V, dtype=np.uint64))
    u = (w0.astype(np.float64) + 0.5) / 4294967296.0
    # libm's log, one element at a time, so no vector log can differ.
    return np.array([-math.log(-math.log(x)) for x in u.tolist()], dtype=np.float64).astype(F32)


def select(logit, V, temperature, seed, pos):
    """Contract 4/5 on one row: logit float32 [>= V]; greedy when T == 0."""
    lv = f32(logit)[:V]
    T = F32(temperature)
    if T == 0:
        return argmax(lv)
    with np.errstate(all="ignore"):
        score = (lv / T).astype(F32) + gumbel(seed, pos, V)
    return argmax(score.astype(F32))


def head(lm, w1, w2, V, hidden, anchor, temperature=None, seed=None, position=None,
         contract="bf16"):
    """tokens [B, gamma] int64 and logits [B, gamma, V] (bf16, or float32 for
    the fp32-add contract) of the Markov head (DESIGN section 1-2).
    lm, w1, w2: [Vp, H], [Vp, R], [Vp, R] bf16; hidden [B, gamma, H] bf16;
    anchor [B]; temperature [B] (None: greedy); seed, position [B] (None: 0)."""
    assert contract in ("bf16", "fp32-add")
    B, G, H = hidden.shape
    Vp = lm.shape[0]
    assert V <= Vp
    temperature = np.zeros(B, F32) if temperature is None else f32(temperature)
    seed = np.zeros(B, np.int64) if seed is None else np.asarray(seed, np.int64)
    position = np.zeros(B, np.int64) if position is None else np.asarray(position, np.int64)
    base = f32(product(np.asarray(hidden).reshape(B * G, H), lm)).reshape(B, G, Vp)
    tokens = np.zeros((B, G), np.int64)
    out = np.zeros((B, G, V), BF16 if contract == "bf16" else F32)
    prev = np.asarray(anchor, np.int64).copy()
    for k in range(G):
        e = np.asarray(w1)[prev]
        bias = f32(product(e, w2))
        with np.errstate(all="ignore"):
            s = base[:, k, :] + bias
        logit = f32(bf16(s)) if contract == "bf16" else s
        out[:, k, :] = logit[:, :V].astype(out.dtype)
        for b in range(B):
            tokens[b, k] = select(logit[b], V, temperature[b], seed[b],
                                  int(position[b]) + 1 + k)
        prev = tokens[:, k].copy()
    return tokens, out


def softmax(logits, T):
    """float64 softmax(logit / T) over a 1-D float array (the draft q)."""
    z = np.asarray(logits, np.float64) / float(T)
    z = z - z.max()
    p = np.exp(z)
    return p / p.sum()
