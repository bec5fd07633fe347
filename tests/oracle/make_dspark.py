#!/usr/bin/env python3
"""Writes a tiny random DSpark draft checkpoint in DeepSpec's layout, sized to
match a given (tiny) Qwen3 target directory.

  make_dspark.py TARGET_DIR OUTDIR [--layers 2] [--block-size 7]
                 [--taps 0,1,2] [--mask-token-id ID] [--markov-rank 16]
                 [--confidence markov|plain|none] [--form 4|5] [--sharded M]
                 [--fresh-embeddings] [--bigram-markov [--bigram-scale 3]]
                 [--seed S]

DeepSpec saves the draft with save_pretrained: config.json is the target's
config (deep-copied) with the draft's fields set (architectures
["Qwen3DSparkModel"], num_hidden_layers, num_target_layers, block_size,
tie_word_embeddings false, layer_types, mask_token_id, target_layer_ids,
num_anchors, enable_confidence_head, confidence_head_with_markov,
markov_rank, markov_head_type); tensors carry no "model." prefix:
embed_tokens, layers.N.*, norm, fc [H, taps*H], hidden_norm, lm_head,
markov_head.markov_w1 [V, R], markov_head.markov_w2 [V, R],
confidence_head.proj.{weight [1, H(+R)], bias [1]}, all BF16.

DeepSpec trains with embed_tokens and lm_head copied from the target and
frozen, so they are copied here too (the target's embedding when it is
tied); --fresh-embeddings writes random ones instead, for tests that must
tell which copy an engine reads.

--bigram-markov makes a draft that a near-bigram target (make_qwen3.py
--residual-scale 0.05) accepts often, so decoding tests see long accepted
runs, rejections and bonus tokens: markov_rank = hidden, W2 = the target's
LM head and W1[t] = s * final_norm(embed[t]), so the Markov bias is s times
the target's logits after token t without its layers."""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import make_qwen3  # noqa: E402
import qwen3_ref  # noqa: E402

CONFIDENCE = ("markov", "plain", "none")


def default_taps(n_target_layers):
    """Up to 5 increasing layer ids spread over 0..L-2 (DeepSpec never taps
    the last layer: transformers reports that one after the final norm)."""
    last = n_target_layers - 2
    if last < 0:
        return [-1]
    k = min(5, last + 1)
    return sorted(set(int(round(x)) for x in np.linspace(0, last, k)))


def config(target_cfg, layers=2, block_size=7, taps=None, mask_token_id=None,
           markov_rank=16, markov_head_type="vanilla", confidence="markov",
           num_anchors=512, form=5):
    """The draft's config.json from the target's (a dict, either form)."""
    t = qwen3_ref.read_config(target_cfg)
    L, V = t["num_hidden_layers"], t["vocab_size"]
    taps = default_taps(L) if taps is None else [int(x) for x in taps]
    if not taps or any(b <= a for a, b in zip(taps, taps[1:])):
        raise ValueError("target_layer_ids must be non-empty and strictly increasing: %s" % taps)
    if any(not (x == -1 or 0 <= x < L) for x in taps):
        raise ValueError("target_layer_ids %s out of {-1} U [0, %d]" % (taps, L - 1))
    if confidence not in CONFIDENCE:
        raise ValueError("confidence must be one of %s" % (CONFIDENCE,))
    if confidence == "markov" and markov_rank == 0:
        raise ValueError("a confidence head with markov features needs markov_rank > 0")
    c = make_qwen3.config(
        hidden=t["hidden_size"], intermediate=t["intermediate_size"], layers=layers,
        heads=t["num_attention_heads"], kv_heads=t["num_key_value_heads"], head_dim=t["head_dim"],
        vocab=V, tied=False, eps=t["rms_norm_eps"], theta=t["rope_theta"],
        max_pos=t.get("max_position_embeddings", 4096), bos=t.get("bos_token_id"),
        eos=t.get("eos_token_id"), form=form)
    c["max_window_layers"] = t.get("max_window_layers", L)  # copied, as deepcopy keeps it
    c.update({
        "architectures": ["Qwen3DSparkModel"],
        "num_target_layers": L,
        "block_size": int(block_size),
        "layer_types": ["full_attention"] * layers,
        "mask_token_id": int(V - 3 if mask_token_id is None else mask_token_id),
        "target_layer_ids": taps,
        "num_anchors": int(num_anchors),
        "enable_confidence_head": confidence != "none",
        "markov_rank": int(markov_rank),
    })
    if confidence != "none":
        c["confidence_head_with_markov"] = confidence == "markov"
    if markov_rank > 0:
        c["markov_head_type"] = markov_head_type
    return dict(sorted(c.items()))


def weights(cfg, target_weights, seed=0, fresh_embeddings=False, bigram_scale=None):
    """name -> bf16 array, DeepSpec's names (no "model." prefix)."""
    rng = np.random.default_rng(seed)
    n = make_qwen3._normal
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    # The draft's layers are Qwen3 layers: reuse the target writer's shapes
    # and scales, then drop the prefix.
    body = make_qwen3.weights(dict(cfg, tie_word_embeddings=True), seed=int(rng.integers(1 << 31)))
    w = {k[len("model."):]: v for k, v in body.items()
         if k.startswith("model.layers.") or k == "model.norm.weight"}
    nt = len(cfg["target_layer_ids"])
    w["fc.weight"] = n(rng, (H, nt * H), 1 / math.sqrt(nt * H))
    w["hidden_norm.weight"] = make_qwen3._norm_weight(rng, H)
    if fresh_embeddings:
        w["embed_tokens.weight"] = n(rng, (V, H), 2 / math.sqrt(H))
        w["lm_head.weight"] = n(rng, (V, H), 2 / math.sqrt(H))
    else:
        emb = target_weights["model.embed_tokens.weight"]
        w["embed_tokens.weight"] = emb.copy()
        w["lm_head.weight"] = target_weights.get("lm_head.weight", emb).copy()
    R = cfg["markov_rank"]
    if bigram_scale is not None:
        if R != H:
            raise ValueError("--bigram-markov needs markov_rank == hidden_size (%d)" % H)
        emb = qwen3_ref.f32(target_weights["model.embed_tokens.weight"])
        lm = target_weights.get("lm_head.weight", target_weights["model.embed_tokens.weight"])
        eps = cfg["rms_norm_eps"]
        xn = emb / np.sqrt((emb * emb).mean(-1, keepdims=True) + eps)
        xn = xn * qwen3_ref.f32(target_weights["model.norm.weight"])
        w["markov_head.markov_w1.weight"] = qwen3_ref.bf16(bigram_scale * xn)
        w["markov_head.markov_w2.weight"] = lm.copy()
    elif R > 0:
        if cfg.get("markov_head_type") != "vanilla":
            raise ValueError("only markov_head_type 'vanilla' is written")
        # bias = W2 @ W1[prev] has a spread of about 1, like the base logits
        w["markov_head.markov_w1.weight"] = n(rng, (V, R), 1.0)
        w["markov_head.markov_w2.weight"] = n(rng, (V, R), 1 / math.sqrt(R))
    if cfg["enable_confidence_head"]:
        fin = H + (R if cfg["confidence_head_with_markov"] else 0)
        w["confidence_head.proj.weight"] = n(rng, (1, fin), 1 / math.sqrt(fin))
        w["confidence_head.proj.bias"] = n(rng, (1,), 0.5)
    return w


def make(target_dir, outdir, seed=0, shards=0, fresh_embeddings=False, bigram_scale=None, **kw):
    """Writes the draft directory; kw as for config(); bigram_scale set
    makes the --bigram-markov draft (markov_rank = hidden).
    Returns (config, weights)."""
    os.makedirs(outdir, exist_ok=True)
    tcfg = qwen3_ref.read_config(target_dir)
    if bigram_scale is not None:
        kw["markov_rank"] = tcfg["hidden_size"]
    cfg = config(tcfg, **kw)
    w = weights(cfg, qwen3_ref.read_weights(target_dir), seed, fresh_embeddings, bigram_scale)
    make_qwen3.write_json(os.path.join(outdir, "config.json"), cfg)
    make_qwen3.write_weights(outdir, w, shards)
    return cfg, w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target_dir")
    ap.add_argument("outdir")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=7)
    ap.add_argument("--taps", default=None, help="comma list of target layer ids")
    ap.add_argument("--mask-token-id", type=int, default=None)
    ap.add_argument("--markov-rank", type=int, default=16)
    ap.add_argument("--confidence", choices=CONFIDENCE, default="markov")
    ap.add_argument("--num-anchors", type=int, default=512)
    ap.add_argument("--form", type=int, choices=(4, 5), default=5)
    ap.add_argument("--sharded", type=int, default=0, metavar="M")
    ap.add_argument("--fresh-embeddings", action="store_true")
    ap.add_argument("--bigram-markov", action="store_true")
    ap.add_argument("--bigram-scale", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    taps = None if a.taps is None else [int(x) for x in a.taps.split(",") if x]
    make(a.target_dir, a.outdir, seed=a.seed, shards=a.sharded, fresh_embeddings=a.fresh_embeddings,
         bigram_scale=a.bigram_scale if a.bigram_markov else None,
         layers=a.layers, block_size=a.block_size, taps=taps, mask_token_id=a.mask_token_id,
         markov_rank=a.markov_rank, confidence=a.confidence, num_anchors=a.num_anchors, form=a.form)
    print(a.outdir)


if __name__ == "__main__":
    main()
