#!/usr/bin/env python3
"""Checks the oracle itself, without the program: Philox known answers, bf16
RNE, the product against exact fmaf (including the overflow and underflow
elements the fast path cannot do), torch.argmax semantics, the Gumbel map, a
two-step head worked by hand, the contract table against the oracle, and the
safetensors round trip."""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import harness  # noqa: E402
import philox  # noqa: E402
import ref  # noqa: E402
import st  # noqa: E402
import table  # noqa: E402

checks = 0
failures = []


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def bits(x):
    return int(np.asarray(x, ref.BF16).reshape(-1).view(np.uint16)[0])


def test_philox():
    try:
        philox.check_kat()
        check(True, "philox KAT")
    except AssertionError as e:
        check(False, str(e))
    # Vectorised words equal scalar calls, and the counter layout is (id, pos).
    ids = np.array([0, 1, 2**32 + 5], np.uint64)
    w = philox.word0_for_tokens(-1, 2**32 + 7, ids)
    for i, v in enumerate([0, 1, 2**32 + 5]):
        want = int(philox.philox4x32_10(v & 0xFFFFFFFF, v >> 32, 7, 1, 0xFFFFFFFF, 0xFFFFFFFF)[0])
        check(int(w[i]) == want, "philox word0 layout for id %d" % v)


def test_bf16():
    cases = [(1 + 2**-8, 0x3F80), (1 + 3 * 2**-8, 0x3F82), (-2.0**-134, 0x8000),
             (2.0**-134, 0x0000), (3 * 2.0**-134, 0x0002), (2.0**-133, 0x0001),
             (np.inf, 0x7F80), (-np.inf, 0xFF80), (3.4e38, 0x7F80), (-0.0, 0x8000)]
    for x, want in cases:
        got = bits(ref.bf16(np.array([x])))
        check(got == want, "bf16(%r) = %04x, want %04x" % (x, got, want))
    check(np.isnan(ref.f32(ref.bf16(np.array([np.nan])))[0]), "bf16(NaN) is NaN")


def fma_loop(a, w):
    """The product's definition, element by element with exact fmaf."""
    a32, w32 = ref.f32(a), ref.f32(w)
    out = np.zeros((a.shape[0], w.shape[0]), np.float32)
    for m in range(a.shape[0]):
        for n in range(w.shape[0]):
            acc = np.float32(0.0)
            for k in range(a.shape[1]):
                acc = ref._fma_f32(a32[m, k], w32[n, k], acc)
            out[m, n] = acc
    return ref.bf16(out)


def test_product():
    rng = np.random.default_rng(1)
    a = harness.rand_bf16(rng, (3, 24), 1.0)
    w = harness.rand_bf16(rng, (5, 24), 1 / math.sqrt(24))
    check(harness.same_bits(ref.product(a, w), fma_loop(a, w)).all(), "product == fmaf loop (random)")
    # Grid inputs: every partial sum is exact, so the result is bf16(exact sum).
    a = harness.grid_bf16(rng, (4, 40), -7, 7, 2.0**-3)
    w = harness.grid_bf16(rng, (6, 40), -7, 7, 2.0**-5)
    exact = ref.f32(a).astype(np.float64) @ ref.f32(w).astype(np.float64).T
    check(harness.same_bits(ref.product(a, w), ref.bf16(exact)).all(), "product == bf16(exact) on grid")
    # Underflow: (-2^-100)(2^-100) is -2^-200; fmaf(.., +0) rounds it to -0 while
    # the float32 multiply-then-add gives +0. Overflow that cancels: bf16max*1,
    # then -bf16max*2 (2^129-ish, past float32) added gives -bf16max, not -inf.
    bmax = table.BF16_MAX
    a = table.exact_bf16(np.array([[-2.0**-100]]))
    w = table.exact_bf16(np.array([[2.0**-100], [-2.0**-100]]))
    p = ref.f32(ref.product(a, w))
    check(p[0, 0] == 0 and np.signbit(p[0, 0]), "underflow to -0 like fmaf (got %r)" % p[0, 0])
    check(p[0, 1] == 0 and not np.signbit(p[0, 1]), "underflow to +0 like fmaf")
    a = table.exact_bf16(np.array([[bmax, -bmax], [-2.0**-100, 1.0]]))
    w = table.exact_bf16(np.array([[1.0, 2.0], [2.0**-100, 0.0]]))
    p = ref.f32(ref.product(a, w))
    check(p[0, 0] == -bmax, "overflow that cancels like fmaf (got %r)" % p[0, 0])
    check(harness.same_bits(ref.product(a, w), fma_loop(a, w)).all(), "product == fmaf loop (edges)")


def test_argmax():
    nan, inf = np.nan, np.inf
    rows = [([1, 3, 3, 2], 1), ([1, nan, inf, nan], 1), ([inf, 2, nan], 2), ([-0.0, 0.0], 0),
            ([0.0, -0.0], 0), ([-1, -0.0, 0.0], 1), ([-inf, -inf, -inf], 0), ([-inf, 5, 5], 1),
            ([inf, inf], 0), ([-inf, nan], 1)]
    for x, want in rows:
        got = ref.argmax(np.array(x, np.float32))
        check(got == want, "argmax(%s) = %d, want %d" % (x, got, want))


def test_gumbel():
    g = ref.gumbel(12345, 7, 64)
    check(g.dtype == np.float32 and np.isfinite(g).all(), "gumbel finite float32")
    w0 = philox.word0_for_tokens(12345, 7, np.arange(64, dtype=np.uint64))
    u = (int(w0[5]) + 0.5) / 2.0**32
    check(g[5] == np.float32(-math.log(-math.log(u))), "gumbel element 5 by hand")
    # w0 = 0 gives u = 2^-33 and g = -log(33 ln 2) = -3.12999...; the largest
    # word gives u = 1 - 2^-33 and g = 33 ln 2 + ... = 22.87...
    check(abs(-math.log(-math.log(0.5 / 2.0**32)) + 3.1299946) < 1e-6, "gumbel of w0 = 0")
    check(abs(-math.log(-math.log((2.0**32 - 0.5) / 2.0**32)) - 22.873) < 1e-3, "gumbel of w0 max")
    # Sampling picks argmax(logit / T + g): with equal logits that is argmax(g).
    logit = np.zeros(64, np.float32)
    check(ref.select(logit, 64, 0.7, 12345, 7) == int(np.argmax(g)), "sampling with flat logits")


def test_head_by_hand():
    # V = 4, H = 2, R = 1, gamma = 2. lm rows (1,0),(0,1),(1,1),(0,0);
    # hidden step 0 = (1, 2): base = 1, 2, 3, 0; step 1 = (2, 0): base = 2, 0, 2, 0.
    # W1 = (1, -1, 2, 0); W2 = (0, 1, -2, 0.5). Anchor 0: e = 1 -> bias 0, 1, -2, .5:
    # logits 1, 3, 1, .5 -> 1. Then e = -1 -> bias -0.., -1, 2, -.5:
    # logits 2, -1, 4, -.5 -> 2.
    lm = table.exact_bf16([[1, 0], [0, 1], [1, 1], [0, 0]])
    w1 = table.exact_bf16([[1], [-1], [2], [0]])
    w2 = table.exact_bf16([[0], [1], [-2], [0.5]])
    hidden = table.exact_bf16([[[1, 2], [2, 0]]])
    tok, lg = ref.head(lm, w1, w2, 4, hidden, [0])
    check(tok.tolist() == [[1, 2]], "hand head tokens %s" % tok.tolist())
    check(ref.f32(lg).tolist() == [[[1, 3, 1, 0.5], [2, -1, 4, -0.5]]], "hand head logits")
    tok, _ = ref.head(lm, w1, w2, 1, hidden, [0])
    check(tok.tolist() == [[0, 0]], "V = 1 always picks 0")


def test_table():
    lm, w1, w2 = table.weights()
    hidden, anchor, cases = table.inputs()
    for contract, col in (("bf16", 4), ("fp32-add", 5)):
        tok, _ = ref.head(lm, w1, w2, table.V, hidden, anchor, contract=contract)
        for i, c in enumerate(cases):
            check(tok[i, 0] == c[col], "table case '%s' (%s): oracle %d, table %d" % (
                c[0], contract, tok[i, 0], c[col]))


def test_st():
    fd, path = tempfile.mkstemp(suffix=".safetensors")
    os.close(fd)
    try:
        t = {"a": table.exact_bf16([[1, -2], [0.5, 3]]), "b": np.arange(3, dtype=np.int64),
             "c": np.array([1.5], np.float32)}
        st.save(path, t, {"vocab_size": "7"})
        with open(path, "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        check(n % 8 == 0, "header padded to 8")
        back, meta = st.load(path)
        check(meta == {"vocab_size": "7"}, "metadata round trip")
        for k in t:
            same = harness.same_bits(back[k], t[k]).all() if k == "a" else np.array_equal(back[k], t[k])
            check(back[k].dtype == t[k].dtype and same, "tensor %s round trip" % k)
    finally:
        os.remove(path)


def main():
    for f in (test_philox, test_bf16, test_product, test_argmax, test_gumbel,
              test_head_by_hand, test_table, test_st):
        f()
    print("oracle self-test: checks: %d, failures: %d" % (checks, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
