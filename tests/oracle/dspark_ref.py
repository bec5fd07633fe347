"""A numpy reference of the DSpark draft model and of speculative decoding
with it, written from DESIGN.md sections 1, 2 and 6 and from the facts of
DeepSpec's public reference (see MODELS_NOTES.md for each fact and its file),
not from dspark's C code. Numerics as in qwen3_ref.py (bf16 between ops,
fp32 islands); the Markov head is ref.head(), the normative contracts 2-5.

One proposal for a sequence whose next token (the anchor) sits at position
`start`:
  1. context: for the positions the context cache lacks (cache.length ..
     start-1), ctx = hidden_norm(fc(concat of the target's taps, in
     target_layer_ids order)); per draft layer K = RoPE(k_norm(k_proj(ctx)))
     at those absolute positions and V = v_proj(ctx) are appended to that
     layer's cache. The same ctx feeds every layer (no input norm, no
     queries): only K/V of the context exist.
  2. block: rows [anchor, mask x (gamma-1)] at positions start..start+gamma-1,
     embedded; per layer input norm, q/k/v of the block (the same k_proj and
     v_proj as the context), q/k norm, RoPE, attention of every row over the
     whole context cache plus all block rows (no causal mask), o proj,
     residual, post-attention norm, SwiGLU, residual; final norm -> h.
     The block's K/V never enter the cache.
  3. Markov head: base = h @ lm_head^T; logits_k = base_k + W2 @ W1[prev_k],
     prev_0 = anchor, prev_{k+1} = token_k; slot k predicts start+k+1.
  4. confidence (optional): c_k = sigmoid(proj([h_k ; W1[prev_k]]) + b).
"""
import numpy as np

import qwen3_ref as q
import ref

BF16, F32 = q.BF16, q.F32


def read_draft_config(path_or_dict):
    """The draft's config (either transformers form); refuses what is not
    modelled, naming the field."""
    c = q.read_config(path_or_dict)
    for k in ("block_size", "mask_token_id", "target_layer_ids", "markov_rank"):
        if k not in c:
            raise ValueError("draft config lacks %s" % k)
    taps = [int(x) for x in c["target_layer_ids"]]
    if not taps or any(b <= a for a, b in zip(taps, taps[1:])) or min(taps) < -1:
        raise ValueError("target_layer_ids %s must be increasing ids >= -1" % taps)
    if int(c["markov_rank"]) > 0 and c.get("markov_head_type") != "vanilla":
        raise ValueError("markov_head_type %r is not modelled" % c.get("markov_head_type"))
    c.setdefault("enable_confidence_head", False)
    c.setdefault("confidence_head_with_markov", False)
    return c


class ContextCache:
    """Per draft layer, K (k_norm + RoPE applied) and V of the context,
    [n_kv, T, head_dim] bf16; entry t is absolute position t."""

    def __init__(self, n_layers, n_kv, head_dim):
        self.kv = q.KVCache(n_layers, n_kv, head_dim)

    @property
    def length(self):
        return self.kv.length

    def truncate(self, n):
        self.kv.truncate(n)


class DSparkDraft:
    """The draft backbone, Markov head and confidence head.

    embed / lm_head: DeepSpec's evaluator reads the draft checkpoint's own
    embed_tokens and lm_head (trained as frozen copies of the target's);
    engines read the target's. Pass the target's to model an engine."""

    def __init__(self, config, weights, embed=None, lm_head=None, attn="eager"):
        c = read_draft_config(config)
        self.cfg = c
        self.H, self.V = c["hidden_size"], c["vocab_size"]
        self.L = c["num_hidden_layers"]
        self.hq, self.hkv, self.d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.eps, self.theta, self.scale = c["rms_norm_eps"], c["rope_theta"], c["head_dim"] ** -0.5
        self.gamma = int(c["block_size"])
        self.mask = int(c["mask_token_id"])
        self.taps = tuple(int(x) for x in c["target_layer_ids"])
        self.R = int(c["markov_rank"])
        # The draft's decoder layers are Qwen3 layers under DeepSpec's names
        # (no "model." prefix); borrow qwen3_ref's loader for them.
        w = dict(weights)
        for k in ("embed_tokens.weight", "norm.weight"):
            if k not in w:
                raise ValueError("missing tensor %s" % k)
        body = {"model." + k: w.pop(k) for k in list(w)
                if k.startswith("layers.") or k in ("embed_tokens.weight", "norm.weight")}
        H, V = self.H, self.V
        lm = w.pop("lm_head.weight", None)
        t = q.Qwen3(dict(c, tie_word_embeddings=True), body, attn)
        self.fused = t.fused
        self.layers, self.norm = t.layers, t.norm
        self.embed = t.embed if embed is None else embed
        if lm is None and lm_head is None:
            raise ValueError("missing tensor lm_head.weight")
        self.lm_head = lm if lm_head is None else lm_head

        def take(name, shape):
            if name not in w:
                raise ValueError("missing tensor %s" % name)
            x = w.pop(name)
            if x.dtype != BF16 or tuple(x.shape) != tuple(shape):
                raise ValueError("tensor %s is %s %s, want bf16 %s" % (name, x.dtype, x.shape, shape))
            return x

        self.fc = take("fc.weight", (H, len(self.taps) * H))
        self.hidden_norm = take("hidden_norm.weight", (H,))
        self.w1 = self.w2 = None
        if self.R > 0:
            self.w1 = take("markov_head.markov_w1.weight", (V, self.R))
            self.w2 = take("markov_head.markov_w2.weight", (V, self.R))
        self.conf_w = self.conf_b = None
        self.conf_markov = bool(c["enable_confidence_head"] and c["confidence_head_with_markov"])
        if c["enable_confidence_head"]:
            fin = H + (self.R if self.conf_markov else 0)
            self.conf_w = take("confidence_head.proj.weight", (1, fin))
            self.conf_b = take("confidence_head.proj.bias", (1,))
        if w:
            raise ValueError("unexpected tensors: %s" % ", ".join(sorted(w)))

    @classmethod
    def from_dir(cls, path, target=None, attn="eager"):
        """target: a qwen3_ref.Qwen3 whose embedding and LM head to use."""
        kw = {} if target is None else {"embed": target.embed, "lm_head": target.lm_head}
        return cls(read_draft_config(path), q.read_weights(path), attn=attn, **kw)

    def new_context(self):
        return ContextCache(self.L, self.hkv, self.d)

    def features(self, taps):
        """The target's taps of some positions ({layer id: [n, H]}) in
        target_layer_ids order, concatenated: [n, len(taps) * H] bf16."""
        return np.concatenate([np.asarray(taps[t], BF16) for t in self.taps], axis=-1)

    # ------------------------------------------------------------ backbone

    def extend_context(self, cache, feats):
        """Appends the K/V of positions cache.length.. for features
        [n, taps*H] (see features())."""
        n = len(feats)
        if n == 0:
            return
        ctx = q.rms_norm(q.linear(feats, self.fc), self.hidden_norm, self.eps)
        pos = np.arange(cache.length, cache.length + n)
        cos, sin = q.rope_tables(pos, self.d, self.theta)
        for i, ly in enumerate(self.layers):
            k = q.rms_norm(q.linear(ctx, ly["k"]).reshape(n, self.hkv, self.d), ly["kn"], self.eps)
            v = q.linear(ctx, ly["v"]).reshape(n, self.hkv, self.d)
            cache.kv.append(i, q.apply_rope(k.transpose(1, 0, 2), cos, sin), v.transpose(1, 0, 2))

    def block_hidden(self, cache, anchor, start):
        """h [gamma, H] bf16 for the block [anchor, mask...] at positions
        start..start+gamma-1 over the context cache (which must end at
        start - 1: the anchor's own target state is not yet known)."""
        if cache.length != start:
            raise ValueError("context cache holds %d positions, the block starts at %d" % (cache.length, start))
        g = self.gamma
        ids = np.array([anchor] + [self.mask] * (g - 1), np.int64)
        if not 0 <= anchor < self.V:
            raise ValueError("anchor %d out of range" % anchor)
        x = self.embed[ids]
        pos = np.arange(start, start + g)
        cos, sin = q.rope_tables(pos, self.d, self.theta)
        for i, ly in enumerate(self.layers):
            h = q.rms_norm(x, ly["ln1"], self.eps)
            qq = q.rms_norm(q.linear(h, ly["q"]).reshape(g, self.hq, self.d), ly["qn"], self.eps)
            kk = q.rms_norm(q.linear(h, ly["k"]).reshape(g, self.hkv, self.d), ly["kn"], self.eps)
            vv = q.linear(h, ly["v"]).reshape(g, self.hkv, self.d)
            qq = q.apply_rope(qq.transpose(1, 0, 2), cos, sin)
            kk = q.apply_rope(kk.transpose(1, 0, 2), cos, sin)
            k_all = np.concatenate([cache.kv.k[i], kk], axis=1)
            v_all = np.concatenate([cache.kv.v[i], vv.transpose(1, 0, 2)], axis=1)
            a = q.attention(qq, k_all, v_all, pos, np.arange(start + g), self.scale, causal=False,
                            fused=self.fused)
            x = q.add(x, q.linear(a, ly["o"]))
            x = q.add(x, q.swiglu(q.rms_norm(x, ly["ln2"], self.eps), ly["gate"], ly["up"], ly["down"]))
        return q.rms_norm(x, self.norm, self.eps)

    # ------------------------------------------------------------ heads

    def confidence(self, h, prev):
        """Confidence logits [gamma] float32 and sigmoids: features
        [h_k ; W1[prev_k]] (or h_k alone), proj with bias, the sum rounded
        once to bf16 (as a bf16 addmm), sigmoid in float32."""
        if self.conf_w is None:
            return None, None
        feat = h if not self.conf_markov else np.concatenate([h, self.w1[np.asarray(prev)]], axis=-1)
        acc = np.matmul(q.f32(feat).astype(np.float64), q.f32(self.conf_w[0]).astype(np.float64))
        logit = q.f32(q.bf16(acc.astype(F32) + q.f32(self.conf_b[0])))
        sig = (1.0 / (1.0 + np.exp(-logit.astype(np.float64)))).astype(F32)
        return logit, sig

    def propose(self, caches, feats, anchors, starts, temperature=None, seed=None, contract="bf16"):
        """One proposal for each sequence b: extend caches[b] with feats[b]
        (the new positions' features), run the block at starts[b].
        Returns dict of tokens [B, gamma] int64, logits [B, gamma, V] (the
        head's corrected logits), hidden [B, gamma, H] bf16 and, with a
        confidence head, conf_logit / conf [B, gamma] float32."""
        hs = []
        for c, f, a, s in zip(caches, feats, anchors, starts):
            self.extend_context(c, f)
            hs.append(self.block_hidden(c, int(a), int(s)))
        h = np.stack(hs)
        anchors = np.asarray(anchors, np.int64)
        if self.R > 0:
            tokens, logits = ref.head(self.lm_head, self.w1, self.w2, self.V, h, anchors,
                                      temperature=temperature, seed=seed, position=starts,
                                      contract=contract)
        else:
            # markov_rank 0 (DFlash): the base logits choose directly
            zero = np.zeros((self.V, 1), BF16)
            tokens, logits = ref.head(self.lm_head, zero, zero, self.V, h, anchors,
                                      temperature=temperature, seed=seed, position=starts)
        out = {"tokens": tokens, "logits": logits, "hidden": h}
        if self.conf_w is not None:
            prev = np.concatenate([anchors[:, None], tokens[:, :-1]], axis=1)
            cl, cs = zip(*(self.confidence(hb, pb) for hb, pb in zip(h, prev)))
            out["conf_logit"], out["conf"] = np.stack(cl), np.stack(cs)
        return out


def confident_prefix(conf, threshold):
    """DeepSpec's cut: the number of leading slots before the first whose
    sigmoid confidence is below threshold (all of them when threshold <= 0)."""
    if threshold <= 0 or conf is None:
        return len(conf) if conf is not None else None
    below = np.nonzero(np.asarray(conf) < threshold)[0]
    return int(below[0]) if len(below) else len(conf)


# ---------------------------------------------------------------- verification

def accept_greedy(draft, target_logits):
    """draft [n] tokens; target_logits [n+1, V] for [anchor, draft...].
    Accept the longest prefix with draft[i] == argmax(target row i); the
    bonus is the argmax of the row after it. Returns (accepted, bonus)."""
    a = 0
    while a < len(draft) and int(draft[a]) == q.argmax(target_logits[a]):
        a += 1
    return a, q.argmax(target_logits[a])


def softmax(logits, temperature):
    """float32 softmax(logits / T) along the last axis (in float64 inside)."""
    z = np.asarray(logits, np.float64) / float(temperature)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return (z / z.sum(axis=-1, keepdims=True)).astype(F32)


def accept_sampling(draft, p, qd, u, draw):
    """Speculative sampling as DeepSpec's verifier does it: p [n+1, V] the
    target's softmax(logits/T), qd [n, V] the draft's softmax of the head's
    corrected logits over T, u [n] uniforms in [0, 1), draw(probs) -> token.
    Token i is accepted when u[i] < min(1, p_i(x) / max(q_i(x), 1e-8)), and
    only a run of accepts from the start counts; on a rejection at i the
    bonus is drawn from normalize(max(p_i - q_i, 0)) (p_i itself when that
    mass is <= 1e-8); after a full accept it is drawn from p_n."""
    a = 0
    for i, x in enumerate(draft):
        ratio = min(1.0, float(p[i, x]) / max(float(qd[i, x]), 1e-8))
        if not u[i] < ratio:
            break
        a += 1
    if a < len(draft):
        r = np.maximum(p[a].astype(np.float64) - qd[a].astype(np.float64), 0.0)
        if r.sum() <= 1e-8:
            r = p[a].astype(np.float64)
        return a, draw(r / r.sum())
    return a, draw(p[a])


# ---------------------------------------------------------------- decoding

def speculative_generate(target, draft, prompt, n_new, temperature=0.0, rng=None,
                         threshold=0.0, seed=0, stop=()):
    """DeepSpec's decoding loop for one sequence. Greedy (T == 0) must equal
    target.greedy(prompt, n_new). Sampling draws the draft with the Gumbel
    race of contract 5 (request seed `seed`) and verifies with rng's
    uniforms. Returns (tokens, accepted counts per proposal)."""
    rng = np.random.default_rng(0) if rng is None else rng

    def draw(pr):
        pr = np.asarray(pr, np.float64)
        return int(rng.choice(len(pr), p=pr / pr.sum()))

    tcache = target.new_cache()
    lg, taps = target.forward(tcache, prompt, draft.taps)
    first = q.argmax(lg[-1]) if temperature == 0 else draw(softmax(lg[-1], temperature))
    out = list(prompt) + [first]
    ctx = draft.new_context()
    feats = draft.features(taps)  # the positions the draft context lacks
    start = len(prompt)
    accepted = []
    while len(out) - len(prompt) < n_new and out[-1] not in stop:
        prop = draft.propose([ctx], [feats], [out[start]], [start],
                             temperature=[temperature], seed=[seed])
        n = draft.gamma
        if "conf" in prop:
            n = confident_prefix(prop["conf"][0], threshold)
        toks = [int(t) for t in prop["tokens"][0, :n]]
        lg, taps = target.forward(tcache, [out[start]] + toks, draft.taps)
        if temperature == 0:
            a, bonus = accept_greedy(toks, lg)
        else:
            p = softmax(lg, temperature)
            qd = softmax(q.f32(prop["logits"][0, :n]), temperature)
            a, bonus = accept_sampling(toks, p, qd, rng.random(n), draw)
        committed = toks[:a] + [bonus]
        for i, t in enumerate(toks[:a]):
            if t in stop:  # an accepted stop token ends decoding, no bonus
                committed = toks[:i + 1]
                break
        out = out[:start + 1] + committed
        tcache.truncate(start + a + 1)
        feats = draft.features(taps)[:a + 1]
        start += a + 1
        accepted.append(a)
    return out[len(prompt):len(prompt) + n_new], accepted


def _selfcheck():
    """Speculative greedy equals plain greedy on a tiny random pair."""
    import tempfile
    import make_dspark
    import make_qwen3
    with tempfile.TemporaryDirectory() as wd:
        # a near-bigram target and a draft that knows its bigrams: long
        # accepted runs, rejections and bonus tokens all occur
        make_qwen3.make(wd + "/t", seed=1, layers=3, residual_scale=0.02)
        make_dspark.make(wd + "/t", wd + "/d", seed=2, layers=2, bigram_scale=4.0)
        t = q.Qwen3.from_dir(wd + "/t")
        d = DSparkDraft.from_dir(wd + "/d", target=t)
        prompt = list(np.random.default_rng(3).integers(0, t.V, 12))
        plain = t.greedy(prompt, 48)
        spec, acc = speculative_generate(t, d, prompt, 48)
        print("speculative greedy == plain greedy: %s (%d proposals, accepted %s)"
              % (spec == plain, len(acc), acc))
        return 0 if spec == plain else 1


if __name__ == "__main__":
    raise SystemExit(_selfcheck())
