"""Peers of bench_target on the same Qwen3 directory and the same synthetic
ids (prompt b, position i: (i * 7919 + b * 104729 + 13) % vocab):

  --mode calls  transformers' Qwen3ForCausalLM forward over a DynamicCache
                holding a context of C positions: a decode call (1 new token
                per sequence) and a verify call (8), the cache cropped back
                to C after each, ms per call (CUDA-synchronized wall time,
                medians), as a user of transformers would run them;
  --mode graph  a hand-written PyTorch Qwen3 step over a static cache
                ([layers, B, kv heads, C + 8, D]), the new tokens' K/V written
                in place and a masked SDPA over the whole cache, captured in
                one CUDA graph per call shape and replayed (CUDA events);
  --mode generate  model.generate, greedy (ids of batch 1 with --ids).

Also writes a random Qwen3 checkpoint of a published shape (--make), with
torch on the GPU: the layout transformers saves (config.json,
generation_config.json, sharded safetensors with an index).

usage: python3 bench/hf_peer_target.py --model DIR --mode calls|graph [--context 1024]
       [--batch 1,32] [--attn eager|sdpa]
       python3 bench/hf_peer_target.py --model DIR --mode generate [--prompt 128 --new 128]
       [--batch 1,4,16] [--attn eager|sdpa] [--ids]
       python3 bench/hf_peer_target.py --make DIR --shape qwen3-1.7b|qwen3-8b
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

SHAPES = {  # the published configs' sizes
    "qwen3-0.6b": dict(hidden=1024, intermediate=3072, layers=28, heads=16, kv_heads=8, tied=True),
    "qwen3-1.7b": dict(hidden=2048, intermediate=6144, layers=28, heads=16, kv_heads=8, tied=True),
    "qwen3-8b": dict(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, tied=False),
}


def layer(p, H, I, hq, hkv, d, normal, norm):
    """One Qwen3 decoder layer's random tensors under prefix p."""
    return {p + "input_layernorm.weight": norm(H),
            p + "self_attn.q_proj.weight": normal((hq * d, H), 1 / math.sqrt(H)),
            p + "self_attn.k_proj.weight": normal((hkv * d, H), 1 / math.sqrt(H)),
            p + "self_attn.v_proj.weight": normal((hkv * d, H), 1 / math.sqrt(H)),
            p + "self_attn.o_proj.weight": normal((H, hq * d), 1 / math.sqrt(hq * d)),
            p + "self_attn.q_norm.weight": norm(d), p + "self_attn.k_norm.weight": norm(d),
            p + "post_attention_layernorm.weight": norm(H),
            p + "mlp.gate_proj.weight": normal((I, H), 1 / math.sqrt(H)),
            p + "mlp.up_proj.weight": normal((I, H), 1 / math.sqrt(H)),
            p + "mlp.down_proj.weight": normal((H, I), 1 / math.sqrt(I))}


def make(outdir, shape, seed=0, layers=None):
    from safetensors.torch import save_file
    s = SHAPES[shape]
    L = layers or s["layers"]  # fewer layers: one layer's kernels at the shape, for profiling
    cfg = {  # as transformers 4.51 saves a Qwen3 model
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": s["hidden"], "initializer_range": 0.02, "intermediate_size": s["intermediate"],
        "max_position_embeddings": 40960, "max_window_layers": L, "model_type": "qwen3",
        "num_attention_heads": s["heads"], "num_hidden_layers": L, "num_key_value_heads": s["kv_heads"],
        "rms_norm_eps": 1e-6, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
        "tie_word_embeddings": s["tied"], "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
    os.makedirs(outdir, exist_ok=True)
    g = torch.Generator(device="cuda").manual_seed(seed)
    H, I, L, hq, hkv, d, V = (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"],
                              cfg["num_attention_heads"], cfg["num_key_value_heads"], 128, cfg["vocab_size"])

    def normal(shape_, std):
        return (torch.randn(shape_, generator=g, device="cuda") * std).to(torch.bfloat16).cpu()

    def norm(n):
        return (0.8 + 0.4 * torch.rand(n, generator=g, device="cuda")).to(torch.bfloat16).cpu()

    shards, cur, weight_map = [], {}, {}
    cur["model.embed_tokens.weight"] = normal((V, H), 2 / math.sqrt(H))
    for i in range(L):
        cur.update(layer("model.layers.%d." % i, H, I, hq, hkv, d, normal, norm))
        if i % 8 == 7:
            shards.append(cur)
            cur = {}
    cur["model.norm.weight"] = norm(H)
    if not cfg["tie_word_embeddings"]:
        cur["lm_head.weight"] = normal((V, H), 2 / math.sqrt(H))
    shards.append(cur)
    total = 0
    for k, t in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        save_file(t, os.path.join(outdir, name), metadata={"format": "pt"})
        weight_map.update({n: name for n in t})
        total += sum(x.numel() * 2 for x in t.values())
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": [151645, 151643]}, f, indent=1)
    print("wrote %s: %s, %.2f GB" % (outdir, shape, total / 1e9))


def make_draft(target, outdir, layers=5, block=7, rank=256, seed=1):
    """A random DSpark draft for a target directory, in DeepSpec's layout and
    the public checkpoints' shape (5 layers, block 7, Markov rank 256, taps
    spread over the target, a confidence head with Markov features); its
    embed_tokens and lm_head are copies of the target's, as those ship."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    t = json.load(open(os.path.join(target, "config.json")))
    L, H, V = t["num_hidden_layers"], t["hidden_size"], t["vocab_size"]
    hq, hkv, d, I = t["num_attention_heads"], t["num_key_value_heads"], t.get("head_dim", 128), t["intermediate_size"]
    taps = [1 + i * (L - 3) // 4 for i in range(5)]  # [1, 9, 17, 25, 33] for 36 layers
    cfg = dict(t, architectures=["Qwen3DSparkModel"], num_hidden_layers=layers, num_target_layers=L,
               block_size=block, mask_token_id=V - 1, target_layer_ids=taps, num_anchors=512,
               enable_confidence_head=True, confidence_head_with_markov=True, markov_rank=rank,
               markov_head_type="vanilla", tie_word_embeddings=False, max_window_layers=layers)
    os.makedirs(outdir, exist_ok=True)
    g = torch.Generator(device="cuda").manual_seed(seed)

    def normal(shape_, std):
        return (torch.randn(shape_, generator=g, device="cuda") * std).to(torch.bfloat16).cpu()

    def norm(n):
        return (0.8 + 0.4 * torch.rand(n, generator=g, device="cuda")).to(torch.bfloat16).cpu()

    w = {}
    for i in range(layers):
        w.update(layer("layers.%d." % i, H, I, hq, hkv, d, normal, norm))
    w["norm.weight"], w["hidden_norm.weight"] = norm(H), norm(H)
    w["fc.weight"] = normal((H, len(taps) * H), 1 / math.sqrt(len(taps) * H))
    w["markov_head.markov_w1.weight"] = normal((V, rank), 1.0)
    w["markov_head.markov_w2.weight"] = normal((V, rank), 1 / math.sqrt(rank))
    w["confidence_head.proj.weight"] = normal((1, H + rank), 1 / math.sqrt(H + rank))
    w["confidence_head.proj.bias"] = normal((1,), 0.5)
    idx = os.path.join(target, "model.safetensors.index.json")
    where = json.load(open(idx))["weight_map"] if os.path.exists(idx) else None
    for mine, theirs in (("embed_tokens.weight", "model.embed_tokens.weight"),
                         ("lm_head.weight", "model.embed_tokens.weight" if t.get("tie_word_embeddings") else
                          "lm_head.weight")):
        f = os.path.join(target, where[theirs] if where else "model.safetensors")
        with safe_open(f, "pt") as fh:
            w[mine] = fh.get_tensor(theirs)
    save_file(w, os.path.join(outdir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print("wrote %s: draft of %d layers for %s, %.2f GB" % (outdir, layers, target,
                                                            sum(x.numel() * 2 for x in w.values()) / 1e9))


def prompts(B, P, V):
    return torch.tensor([[(i * 7919 + b * 104729 + 13) % V for i in range(P)] for b in range(B)], device="cuda")


def run(model, ids, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out[:, ids.shape[1]:]


def ids_for(B, lo, hi, V):
    return torch.tensor([[(i * 7919 + b * 104729 + 13) % V for i in range(lo, hi)] for b in range(B)], device="cuda")


def calls(model, C, batches, reps):
    from transformers import DynamicCache
    V = model.config.vocab_size
    print("| call | batch | context | ms per call |\n|---|---|---|---|")
    for B in batches:
        cache = DynamicCache()
        model(ids_for(B, 0, C, V), past_key_values=cache, use_cache=True)
        for name, n in (("decode", 1), ("verify 8", 8)):
            x = ids_for(B, C, C + n, V)
            pos = torch.arange(C, C + n, device="cuda")
            times = []
            for r in range(reps + 2):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(x, past_key_values=cache, use_cache=True, cache_position=pos,
                      position_ids=pos[None].expand(B, n))
                torch.cuda.synchronize()
                if r >= 2:
                    times.append((time.perf_counter() - t0) * 1e3)
                cache.crop(C)
            print("| %s | %d | %d | %.3f |" % (name, B, C, statistics.median(times)))
            sys.stdout.flush()
        del cache
        torch.cuda.empty_cache()


class GraphStep:
    """Qwen3 over a static cache, written with torch ops from the architecture."""

    def __init__(self, model, B, cap):
        c = model.config
        self.c, self.B, self.cap = c, B, cap
        self.L, self.hq, self.hkv, self.d = c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        sd = {k: v for k, v in model.state_dict().items()}
        self.w = sd
        self.kc = torch.zeros(self.L, B, self.hkv, cap, self.d, device="cuda", dtype=torch.bfloat16)
        self.vc = torch.zeros_like(self.kc)
        theta = getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"]
        inv = 1.0 / (theta ** (torch.arange(0, self.d, 2, device="cuda", dtype=torch.float32) / self.d))
        ang = torch.arange(cap, device="cuda", dtype=torch.float32)[:, None] * inv[None]
        emb = torch.cat([ang, ang], dim=-1)
        self.cos, self.sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
        self.eps = c.rms_norm_eps
        self.lm = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])

    def norm(self, x, w):
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(torch.bfloat16)

    def rope(self, x, pos):
        c, s = self.cos[pos][None, None], self.sin[pos][None, None]
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
        return x * c + rot * s

    def __call__(self, ids, pos):
        B, n = ids.shape
        W = self.w
        x = W["model.embed_tokens.weight"][ids]
        keys = torch.arange(self.cap, device="cuda")
        mask = keys[None, :] <= pos[:, None]  # [n, cap]
        for i in range(self.L):
            p = "model.layers.%d." % i
            h = self.norm(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].T).view(B, n, self.hq, self.d)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).view(B, n, self.hkv, self.d)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).view(B, n, self.hkv, self.d)
            q = self.rope(self.norm(q, W[p + "self_attn.q_norm.weight"]).transpose(1, 2), pos)
            k = self.rope(self.norm(k, W[p + "self_attn.k_norm.weight"]).transpose(1, 2), pos)
            self.kc[i].index_copy_(2, pos, k)
            self.vc[i].index_copy_(2, pos, v.transpose(1, 2))
            a = torch.nn.functional.scaled_dot_product_attention(q, self.kc[i], self.vc[i], attn_mask=mask,
                                                                 enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(B, n, -1) @ W[p + "self_attn.o_proj.weight"].T
            h = self.norm(x, W[p + "post_attention_layernorm.weight"])
            g = h @ W[p + "mlp.gate_proj.weight"].T
            u = h @ W[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
        return (self.norm(x, W["model.norm.weight"]) @ self.lm.T).argmax(-1)


def graph(model, C, batches, reps):
    V = model.config.vocab_size
    print("| call | batch | context | ms per call |\n|---|---|---|---|")
    for B in batches:
        st = GraphStep(model, B, C + 8)
        st(ids_for(B, 0, C, V), torch.arange(0, C, device="cuda"))  # the context, eagerly
        for name, n in (("decode", 1), ("verify 8", 8)):
            ids = ids_for(B, C, C + n, V)
            pos = torch.arange(C, C + n, device="cuda")
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    st(ids, pos)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = st(ids, pos)
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            g.replay()
            for a_, b_ in ev:
                a_.record()
                g.replay()
                b_.record()
            torch.cuda.synchronize()
            print("| %s | %d | %d | %.3f |" % (name, B, C, statistics.median(a_.elapsed_time(b_) for a_, b_ in ev)))
            sys.stdout.flush()
            del g, out
        del st
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--make")
    ap.add_argument("--make-draft", nargs=2, metavar=("TARGET", "OUTDIR"),
                    help="write a random DSpark draft of the public checkpoints' shape for TARGET")
    ap.add_argument("--shape", default="qwen3-1.7b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="with --make: this many layers, not the shape's")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--batch", default="1,4,16")
    ap.add_argument("--attn", default="eager", choices=("eager", "sdpa"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ids", action="store_true")
    ap.add_argument("--mode", default="generate", choices=("generate", "calls", "graph"))
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    if a.make:
        make(a.make, a.shape, layers=a.layers)
        return 0
    if a.make_draft:
        make_draft(*a.make_draft)
        return 0
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation=a.attn).cuda().eval()
    if a.mode != "generate":
        print("# %s peer: transformers %s, %s attention, context %d" % (
            a.mode, __import__("transformers").__version__, a.attn, a.context))
        with torch.inference_mode():
            (calls if a.mode == "calls" else graph)(model, a.context, [int(x) for x in a.batch.split(",")], a.reps)
        return 0
    V = model.config.vocab_size
    print("# transformers %s peer (%s attention, dynamic cache): prompt %d, new %d" % (
        __import__("transformers").__version__, a.attn, a.prompt, a.new))
    print("| batch | prefill ms | prefill tok/s | decode ms/step | decode tok/s |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for B in [int(x) for x in a.batch.split(",")]:
            ids = prompts(B, a.prompt, V)
            run(model, ids, 2)  # warm-up
            t1 = statistics.median(run(model, ids, 1)[0] for _ in range(a.rounds))
            tn, out = zip(*[run(model, ids, a.new) for _ in range(a.rounds)])
            step = (statistics.median(tn) - t1) / (a.new - 1)
            print("| %d | %.2f | %.0f | %.3f | %.1f |" % (B, t1 * 1e3, B * a.prompt / t1, step * 1e3, B / step))
            if a.ids and B == 1:
                print("ids: " + " ".join(str(int(x)) for x in out[0][0]))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
