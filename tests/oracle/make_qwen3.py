#!/usr/bin/env python3
"""Writes a tiny random Qwen3ForCausalLM checkpoint in the Hugging Face
directory layout: config.json (transformers 4.x or 5.x form),
generation_config.json, and BF16 weights as one model.safetensors or as
model-0000N-of-0000M.safetensors shards with model.safetensors.index.json.

  make_qwen3.py OUTDIR [--hidden 64] [--intermediate 128] [--layers 2]
                [--heads 4] [--kv-heads 2] [--head-dim 16] [--vocab 512]
                [--tied] [--sharded M] [--form 4|5] [--seed S]
                [--eos 511 | --eos 511,509] [--bos 510] [--theta 1e6]
                [--residual-scale 1.0]

Weights are random but give non-degenerate logits: projections ~ N(0,
1/fan_in), embeddings and an untied LM head ~ N(0, 1/hidden) * 2 (logits of
a few units), norm weights uniform in [0.8, 1.2]. --residual-scale s < 1
shrinks o_proj and down_proj, so the layers add little to the residual
stream and the model is close to a bigram model (next token a function of
the current one): a target that make_dspark.py --bigram-markov drafts well."""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import qwen3_ref  # noqa: E402
import st  # noqa: E402

BF16 = qwen3_ref.BF16


def config(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16,
           vocab=512, tied=False, eps=1e-6, theta=1000000.0, max_pos=4096,
           bos=None, eos=None, form=5):
    """config.json as transformers saves a Qwen3 model, in the 4.x or 5.x form."""
    bos = vocab - 2 if bos is None else bos
    eos = vocab - 1 if eos is None else eos
    c = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "max_position_embeddings": max_pos,
        "max_window_layers": layers,
        "model_type": "qwen3",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": eps,
        "sliding_window": None,
        "tie_word_embeddings": bool(tied),
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }
    theta = int(theta) if float(theta).is_integer() else float(theta)
    if int(form) == 4:
        c.update({"rope_scaling": None, "rope_theta": theta, "torch_dtype": "bfloat16",
                  "transformers_version": "4.51.0"})
    elif int(form) == 5:
        c.update({"dtype": "bfloat16", "layer_types": ["full_attention"] * layers,
                  "pad_token_id": None,
                  "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
                  "transformers_version": "5.0.0"})
    else:
        raise ValueError("form must be 4 or 5, not %r" % form)
    return dict(sorted(c.items()))


def _normal(rng, shape, std):
    return qwen3_ref.bf16(rng.standard_normal(shape) * std)


def _norm_weight(rng, n):
    return qwen3_ref.bf16(rng.uniform(0.8, 1.2, n))


def weights(cfg, seed=0, residual_scale=1.0):
    """name -> bf16 array, names exactly as transformers saves Qwen3ForCausalLM."""
    rng = np.random.default_rng(seed)
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hq, hkv, d, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["vocab_size"]
    w = {"model.embed_tokens.weight": _normal(rng, (V, H), 2 / math.sqrt(H))}
    for i in range(L):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = _norm_weight(rng, H)
        w[p + "self_attn.q_proj.weight"] = _normal(rng, (hq * d, H), 1 / math.sqrt(H))
        w[p + "self_attn.k_proj.weight"] = _normal(rng, (hkv * d, H), 1 / math.sqrt(H))
        w[p + "self_attn.v_proj.weight"] = _normal(rng, (hkv * d, H), 1 / math.sqrt(H))
        w[p + "self_attn.o_proj.weight"] = _normal(rng, (H, hq * d), residual_scale / math.sqrt(hq * d))
        w[p + "self_attn.q_norm.weight"] = _norm_weight(rng, d)
        w[p + "self_attn.k_norm.weight"] = _norm_weight(rng, d)
        w[p + "post_attention_layernorm.weight"] = _norm_weight(rng, H)
        w[p + "mlp.gate_proj.weight"] = _normal(rng, (I, H), 1 / math.sqrt(H))
        w[p + "mlp.up_proj.weight"] = _normal(rng, (I, H), 1 / math.sqrt(H))
        w[p + "mlp.down_proj.weight"] = _normal(rng, (H, I), residual_scale / math.sqrt(I))
    w["model.norm.weight"] = _norm_weight(rng, H)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = _normal(rng, (V, H), 2 / math.sqrt(H))
    return w


def write_weights(outdir, tensors, shards=0):
    """One model.safetensors (shards <= 1) or `shards` files plus the index,
    split in name order into runs of roughly equal bytes. Returns file names."""
    names = sorted(tensors)
    meta = {"format": "pt"}
    if shards <= 1:
        st.save(os.path.join(outdir, "model.safetensors"), {n: tensors[n] for n in names}, meta)
        return ["model.safetensors"]
    total = sum(tensors[n].nbytes for n in names)
    groups = [[] for _ in range(shards)]
    done = 0
    for n in names:
        # a tensor goes to the shard its starting byte falls in
        groups[min(shards - 1, done * shards // total)].append(n)
        done += tensors[n].nbytes
    if any(not g for g in groups):
        raise ValueError("%d shards for %d tensors leaves a shard empty" % (shards, len(names)))
    files, weight_map = [], {}
    for i, g in enumerate(groups):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        st.save(os.path.join(outdir, fname), {n: tensors[n] for n in g}, meta)
        files.append(fname)
        weight_map.update({n: fname for n in g})
    index = {"metadata": {"total_parameters": int(sum(tensors[n].size for n in names)),
                          "total_size": int(total)},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return files


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def make(outdir, seed=0, shards=0, residual_scale=1.0, **kw):
    """Writes the checkpoint; kw as for config(). Returns (config, weights)."""
    os.makedirs(outdir, exist_ok=True)
    # As Qwen3 ships: config.json names one eos id, generation_config.json
    # may list several (the first is config.json's).
    eos = kw.pop("eos", None)
    eos_list = eos if isinstance(eos, list) else None
    cfg = config(eos=eos_list[0] if eos_list else eos, **kw)
    w = weights(cfg, seed, residual_scale)
    write_json(os.path.join(outdir, "config.json"), cfg)
    gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": eos_list or cfg["eos_token_id"],
           "transformers_version": cfg["transformers_version"]}
    write_json(os.path.join(outdir, "generation_config.json"), gen)
    write_weights(outdir, w, shards)
    return cfg, w


def _ids(text):
    v = [int(x) for x in text.split(",") if x]
    return v[0] if len(v) == 1 else v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--theta", type=float, default=1000000.0)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--bos", type=int, default=None)
    ap.add_argument("--eos", type=_ids, default=None, help="an id or a comma list")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--sharded", type=int, default=0, metavar="M")
    ap.add_argument("--form", type=int, choices=(4, 5), default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--residual-scale", type=float, default=1.0)
    a = ap.parse_args(argv)
    make(a.outdir, seed=a.seed, shards=a.sharded, residual_scale=a.residual_scale, hidden=a.hidden, intermediate=a.intermediate,
         layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
         vocab=a.vocab, tied=a.tied, eps=a.eps, theta=a.theta, max_pos=a.max_pos,
         bos=a.bos, eos=a.eos, form=a.form)
    print(a.outdir)


if __name__ == "__main__":
    main()
