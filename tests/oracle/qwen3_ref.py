"""A numpy reference of Qwen3ForCausalLM inference (the target model).

Written from the public architecture (transformers' Qwen3) and DESIGN.md
section 6, not from dspark's C code. It models transformers running the model
in bf16 eagerly: every tensor torch would hold in bf16 is rounded to bf16 here
(round to nearest even, ml_dtypes), and the fp32 islands are fp32 here:

  matmul    bf16 inputs, one sum, one rounding to bf16 (see mm())
  RMSNorm   x.float(); var = mean(x*x); x * (1/sqrt(var + eps)) -> bf16;
            then weight * that, the product rounded to bf16
  RoPE      cos/sin computed in fp32, held in bf16; x*cos and rot(x)*sin each
            rounded to bf16, their sum rounded to bf16
  softmax   of the bf16 scores in fp32, the probabilities cast to bf16
            (attention's fused variant, attn="fused", is described at
            attention())
  SiLU      in fp32 on the bf16 input, rounded to bf16
  residual  bf16 + bf16 computed in fp32, rounded to bf16
  logits    bf16 (returned widened to float32, exactly)

Sums (matmul, mean of squares, softmax denominator) are taken in float64 and
rounded to float32, and exp/cos/sin are taken in float64 and rounded to
float32: an order-free, length-free stand-in for fp32 arithmetic, so the
reference's results do not depend on array shapes (numpy's float32 pairwise
sums and SIMD transcendentals would). An fp32 implementation differs from
it by its own accumulation error only.

Per layer: h = norm(x); q/k/v projections (no bias); per-head RMSNorm of q
and k over head_dim; NeoX "rotate half" RoPE at absolute positions; causal
GQA attention (q head h reads kv head h // (n_q / n_kv)), scale
head_dim^-0.5; o projection; residual; post-attention norm; SwiGLU MLP
down(silu(gate(h)) * up(h)); residual. Then the final norm and the LM head
(the embedding matrix when tie_word_embeddings).

Every sequence is computed on its own, row by row, so a position's logits are
the same bits in a prefill, a decode step or a verify call and do not depend
on the other sequences (the batch invariance of DESIGN.md section 6 holds
here by construction).

Hidden-state taps follow DeepSpec: tap l (0 <= l < layers) is the raw output
of decoder layer l (before the final norm); tap -1 is the embedding output.
"""
import json
import os

import ml_dtypes
import numpy as np

import st

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32


def bf16(x):
    """Values -> bf16 via float32 (the value torch would hold), RNE."""
    return np.asarray(x, dtype=F32).astype(BF16)


def f32(x):
    """bf16 (or any float) -> float32; exact for bf16."""
    return np.asarray(x).astype(F32)


# ---------------------------------------------------------------- ops

def mm(a, b):
    """a [..., n, K] @ b [..., K, m], bf16 -> bf16.

    The products of bf16 values are exact, and they are summed in float64,
    which here (K of a few thousand at most) is the exact sum to far below
    float32's precision: an order-free stand-in for an fp32 accumulator. The
    sum is rounded to float32 and then to bf16. A kernel with an fp32
    accumulator in some fixed order differs from this by its accumulation
    error only, so comparisons against it carry a tolerance."""
    s = np.matmul(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
    return bf16(s.astype(F32))


def linear(x, w):
    """nn.Linear without bias: x [..., K] bf16, w [N, K] bf16 -> [..., N] bf16."""
    return mm(x, np.asarray(w).T)


def fsum(x, axis=-1):
    """float32 values summed exactly enough (float64), rounded to float32."""
    return np.sum(np.asarray(x, np.float64), axis=axis, keepdims=True).astype(F32)


def fexp(x):
    """exp of float32 values, rounded to float32 (computed in float64)."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, np.float64)).astype(F32)


def rms_norm(x, w, eps):
    """Qwen3RMSNorm over the last axis; x bf16 [..., D], w bf16 [D]."""
    xf = f32(x)
    var = fsum(xf * xf) / F32(xf.shape[-1])
    xn = bf16(xf * (F32(1.0) / np.sqrt(var + F32(eps))))
    return bf16(f32(w) * f32(xn))


def silu(x):
    """SiLU of a bf16 tensor: x / (1 + exp(-x)) in float32, rounded to bf16."""
    xf = f32(x)
    return bf16(xf / (F32(1.0) + fexp(-xf)))


def add(a, b):
    """bf16 + bf16 -> bf16: the float32 sum rounded, as torch computes it."""
    return bf16(f32(a) + f32(b))


def mul(a, b):
    """bf16 * bf16 -> bf16 (the float32 product is exact)."""
    return bf16(f32(a) * f32(b))


def rope_tables(positions, head_dim, theta):
    """(cos, sin) [n, head_dim] bf16 for absolute positions, default RoPE.

    inv_freq = 1 / theta^(2i / d) in float32 as transformers builds it; the
    angle position * inv_freq in float32; cos/sin of that float32 angle
    (taken in float64, then rounded to float32 as a correctly rounded fp32
    cos would be), duplicated over both halves, held in bf16."""
    d = head_dim
    inv_freq = F32(1.0) / (F32(theta) ** (np.arange(0, d, 2, dtype=F32) / F32(d)))
    ang = np.asarray(positions, dtype=F32)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=-1).astype(np.float64)
    return bf16(np.cos(ang).astype(F32)), bf16(np.sin(ang).astype(F32))


def apply_rope(x, cos, sin):
    """NeoX rotate-half RoPE: x [..., n, D] bf16, cos/sin [n, D] bf16."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-f32(x[..., half:]), f32(x[..., :half])], axis=-1)
    return add(mul(x, cos), mul(rot, sin))


def attention(q, k, v, q_pos, k_pos, scale, causal=True, fused=False):
    """GQA attention. q [Hq, n, D], k/v [Hkv, T, D] bf16; q_pos [n] and
    k_pos [T] are absolute positions; with causal, query i sees keys whose
    position is <= q_pos[i], else it sees every key. Returns [n, Hq * D].

    Eager (transformers' eager_attention_forward): scores = bf16(q @ k^T)
    then bf16(scores * scale); masked scores are -inf (transformers adds the
    dtype's minimum, the same exact zero after exp unless a whole row is
    masked, which never happens here); softmax in float32 (x - max, exp,
    divide by the sum), cast to bf16; out = bf16(p @ v).
    fused=True models a fused kernel (flash-attention style, and torch's
    CPU SDPA): scores and their scaling stay float32, e = exp(s - max) in
    float32 is summed unrounded but enters the product with v as bf16, and
    out = bf16(f32(bf16(e) @ v) / sum) (one pass, no online rescaling)."""
    hq, n, d = q.shape
    hkv = k.shape[0]
    assert hq % hkv == 0, "query heads %d not a multiple of kv heads %d" % (hq, hkv)
    rep = hq // hkv
    k = np.repeat(k, rep, axis=0)  # repeat_kv: head h reads kv head h // rep
    v = np.repeat(v, rep, axis=0)
    s = np.matmul(f32(q).astype(np.float64), np.swapaxes(f32(k), -1, -2).astype(np.float64)).astype(F32)
    if fused:
        s = s * F32(scale)
    else:  # eager holds the scores in bf16 before and after the scaling
        s = f32(bf16(f32(bf16(s)) * F32(scale)))
    if causal:
        allowed = np.asarray(k_pos)[None, :] <= np.asarray(q_pos)[:, None]
        s = np.where(allowed[None], s, F32(-np.inf))
    e = fexp(s - s.max(axis=-1, keepdims=True))
    v64 = f32(v).astype(np.float64)
    if fused:
        pv = np.matmul(f32(bf16(e)).astype(np.float64), v64).astype(F32)
        out = bf16(pv / fsum(e))
    else:  # softmax(..., dtype=float32).to(bf16), then a bf16 matmul
        p = f32(bf16(e / fsum(e)))
        out = bf16(np.matmul(p.astype(np.float64), v64).astype(F32))  # [Hq, n, D]
    return np.ascontiguousarray(np.swapaxes(out, 0, 1)).reshape(n, hq * d)


def swiglu(h, gate, up, down):
    return linear(mul(silu(linear(h, gate)), linear(h, up)), down)


# ---------------------------------------------------------------- checkpoint

def read_config(path_or_dict):
    """A Qwen3 config (dict) from a directory, a config.json path or a dict;
    the transformers 4.x form (rope_theta at top level, torch_dtype) and the
    5.x form (rope_parameters, dtype) both read. Refuses what this reference
    does not model, naming the field."""
    c = path_or_dict
    if isinstance(c, str):
        p = os.path.join(c, "config.json") if os.path.isdir(c) else c
        with open(p) as f:
            c = json.load(f)
    out = dict(c)
    rp = c.get("rope_parameters")
    if rp is not None:
        if rp.get("rope_type", "default") != "default":
            raise ValueError("rope_parameters.rope_type %r is not modelled" % rp.get("rope_type"))
        out["rope_theta"] = rp["rope_theta"]
    elif c.get("rope_scaling") not in (None, {}):
        raise ValueError("rope_scaling %r is not modelled" % (c["rope_scaling"],))
    if "rope_theta" not in out:
        raise ValueError("config has neither rope_theta nor rope_parameters.rope_theta")
    if c.get("attention_bias", False):
        raise ValueError("attention_bias true is not modelled")
    if c.get("use_sliding_window", False):
        raise ValueError("use_sliding_window true is not modelled")
    if c.get("hidden_act", "silu") != "silu":
        raise ValueError("hidden_act %r is not modelled" % c["hidden_act"])
    out.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    out.setdefault("tie_word_embeddings", False)
    out.setdefault("rms_norm_eps", 1e-6)
    return out


def read_weights(path):
    """name -> array for a Hugging Face directory: model.safetensors, or the
    shards listed by model.safetensors.index.json."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        tensors, _ = st.load(os.path.join(path, name))
        for k, v in tensors.items():
            if k in out:
                raise ValueError("tensor %s appears in two shards" % k)
            out[k] = v
    return out


# ---------------------------------------------------------------- model

class KVCache:
    """One sequence's keys (after k_norm and RoPE) and values per layer,
    [n_kv_heads, T, head_dim] bf16; position t of the sequence is index t."""

    def __init__(self, n_layers, n_kv, head_dim):
        empty = np.zeros((n_kv, 0, head_dim), BF16)
        self.k = [empty] * n_layers
        self.v = [empty] * n_layers

    @property
    def length(self):
        return self.k[0].shape[1]

    def append(self, layer, k, v):
        self.k[layer] = np.concatenate([self.k[layer], k], axis=1)
        self.v[layer] = np.concatenate([self.v[layer], v], axis=1)

    def truncate(self, n):
        """Keep positions < n (rollback of rejected draft tokens)."""
        assert 0 <= n <= self.length, "truncate to %d of %d" % (n, self.length)
        self.k = [k[:, :n] for k in self.k]
        self.v = [v[:, :n] for v in self.v]


class Qwen3:
    """Qwen3ForCausalLM inference over explicit per-sequence KV caches."""

    def __init__(self, config, weights, attn="eager"):
        """attn: "eager" (transformers' eager numerics) or "fused" (see
        attention())."""
        if attn not in ("eager", "fused"):
            raise ValueError("attn must be eager or fused, not %r" % attn)
        self.fused = attn == "fused"
        c = read_config(config)
        self.cfg = c
        self.H = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.hq = c["num_attention_heads"]
        self.hkv = c["num_key_value_heads"]
        self.d = c["head_dim"]
        self.V = c["vocab_size"]
        self.eps = c["rms_norm_eps"]
        self.theta = c["rope_theta"]
        self.scale = self.d ** -0.5
        w = dict(weights)

        def take(name, shape):
            if name not in w:
                raise ValueError("missing tensor %s" % name)
            t = w.pop(name)
            if t.dtype != BF16:
                raise ValueError("tensor %s is %s, not bf16" % (name, t.dtype))
            if tuple(t.shape) != tuple(shape):
                raise ValueError("tensor %s has shape %s, want %s" % (name, t.shape, shape))
            return t

        H, I, d = self.H, c["intermediate_size"], self.d
        self.embed = take("model.embed_tokens.weight", (self.V, H))
        self.layers = []
        for i in range(self.L):
            p = "model.layers.%d." % i
            self.layers.append({
                "ln1": take(p + "input_layernorm.weight", (H,)),
                "q": take(p + "self_attn.q_proj.weight", (self.hq * d, H)),
                "k": take(p + "self_attn.k_proj.weight", (self.hkv * d, H)),
                "v": take(p + "self_attn.v_proj.weight", (self.hkv * d, H)),
                "o": take(p + "self_attn.o_proj.weight", (H, self.hq * d)),
                "qn": take(p + "self_attn.q_norm.weight", (d,)),
                "kn": take(p + "self_attn.k_norm.weight", (d,)),
                "ln2": take(p + "post_attention_layernorm.weight", (H,)),
                "gate": take(p + "mlp.gate_proj.weight", (I, H)),
                "up": take(p + "mlp.up_proj.weight", (I, H)),
                "down": take(p + "mlp.down_proj.weight", (H, I)),
            })
        self.norm = take("model.norm.weight", (H,))
        if c["tie_word_embeddings"]:
            # transformers ignores a stored lm_head.weight when tied.
            w.pop("lm_head.weight", None)
            self.lm_head = self.embed
        else:
            self.lm_head = take("lm_head.weight", (self.V, H))
        if w:
            raise ValueError("unexpected tensors: %s" % ", ".join(sorted(w)))

    @classmethod
    def from_dir(cls, path, attn="eager"):
        return cls(read_config(path), read_weights(path), attn)

    def new_cache(self):
        return KVCache(self.L, self.hkv, self.d)

    def forward(self, cache, tokens, taps=()):
        """Runs new tokens at positions cache.length.., causal among
        themselves and over the cache, appending their K/V to it.
        Returns (logits [n, V] float32, {tap: [n, H] bf16})."""
        tokens = np.asarray(tokens, np.int64)
        n = len(tokens)
        if n == 0:
            return np.zeros((0, self.V), F32), {t: np.zeros((0, self.H), BF16) for t in taps}
        if tokens.min() < 0 or tokens.max() >= self.V:
            raise ValueError("token id out of range [0, %d)" % self.V)
        for t in taps:
            if not -1 <= t < self.L:
                raise ValueError("tap %d out of range [-1, %d)" % (t, self.L))
        p0 = cache.length
        pos = np.arange(p0, p0 + n)
        cos, sin = rope_tables(pos, self.d, self.theta)
        out = {}
        x = self.embed[tokens]
        if -1 in taps:
            out[-1] = x
        for i in range(self.L):
            x = self.layer(i, x, cache, p0, cos, sin)
            if i in taps:
                out[i] = x
        return self.head(x), out

    def layer(self, i, x, cache, p0, cos=None, sin=None):
        """Decoder layer i on x [n, H] bf16 at positions p0.. (its K/V appended
        to cache layer i, which holds p0 positions). Returns its output."""
        n = x.shape[0]
        pos = np.arange(p0, p0 + n)
        if cos is None:
            cos, sin = rope_tables(pos, self.d, self.theta)
        ly = self.layers[i]
        h = rms_norm(x, ly["ln1"], self.eps)
        q = rms_norm(linear(h, ly["q"]).reshape(n, self.hq, self.d), ly["qn"], self.eps)
        k = rms_norm(linear(h, ly["k"]).reshape(n, self.hkv, self.d), ly["kn"], self.eps)
        v = linear(h, ly["v"]).reshape(n, self.hkv, self.d)
        q = apply_rope(q.transpose(1, 0, 2), cos, sin)
        k = apply_rope(k.transpose(1, 0, 2), cos, sin)
        cache.append(i, k, v.transpose(1, 0, 2))
        a = attention(q, cache.k[i], cache.v[i], pos, np.arange(p0 + n), self.scale,
                      fused=self.fused)
        x = add(x, linear(a, ly["o"]))
        return add(x, swiglu(rms_norm(x, ly["ln2"], self.eps), ly["gate"], ly["up"], ly["down"]))

    def head(self, x):
        """Final norm and LM head: logits [n, V] float32 of the last layer's x."""
        return f32(linear(rms_norm(x, self.norm, self.eps), self.lm_head))

    # The three calls an engine makes; each sequence has its own cache.
    def prefill(self, seqs, taps=()):
        """seqs: list of token lists. Returns (caches, [logits], [taps])."""
        caches = [self.new_cache() for _ in seqs]
        res = [self.forward(c, s, taps) for c, s in zip(caches, seqs)]
        return caches, [r[0] for r in res], [r[1] for r in res]

    def decode(self, caches, tokens, taps=()):
        """One new token per sequence. Returns (logits [B, V], [taps])."""
        res = [self.forward(c, [t], taps) for c, t in zip(caches, tokens)]
        return np.stack([r[0][0] for r in res]), [r[1] for r in res]

    def verify(self, caches, blocks, taps=()):
        """k+1 new tokens per sequence ([anchor, draft...]), causal among
        themselves over each cache. Returns ([logits [k+1, V]], [taps]); the
        caller truncates each cache to what it accepts."""
        res = [self.forward(c, b, taps) for c, b in zip(caches, blocks)]
        return [r[0] for r in res], [r[1] for r in res]

    def logits(self, tokens, taps=()):
        """Teacher-forced logits [n, V] (and taps) of one sequence."""
        return self.forward(self.new_cache(), tokens, taps)

    def greedy(self, prompt, n_new):
        """Plain greedy decoding: the prompt's prefill, then decode steps."""
        cache = self.new_cache()
        lg, _ = self.forward(cache, prompt)
        out = [argmax(lg[-1])]
        while len(out) < n_new:
            lg, _ = self.forward(cache, [out[-1]])
            out.append(argmax(lg[-1]))
        return out


def argmax(row):
    """torch.argmax on one row: first NaN, else lowest id of the maximum."""
    row = np.asarray(row)
    nan = np.isnan(row)
    if nan.any():
        return int(np.argmax(nan))
    return int(np.argmax(row == row.max()))
