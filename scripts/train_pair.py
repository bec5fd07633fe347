#!/usr/bin/env python3
"""Trains the small target + DSpark draft pair dspark ships (models/), from
the King James Bible as Debian packages it (bible-kjv, bible-kjv-text: public
domain), with PyTorch. Not a runtime or test dependency: run it in a private
environment (python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch
tokenizers safetensors numpy) on the GPU machine or, slowly, on a CPU.

  train_pair.py OUTDIR [--target-steps N] [--draft-steps N] [--device cpu|cuda]
                [--target-layers N --taps A,B]
  train_pair.py OUTDIR --finetune DIR [--dspark BINARY] [--draft-steps N]
                [--lr L --decay D --tv W --bf16] [--fresh --draft-layers N --markov-rank R | --add-layers N]

The second form trains no target: it continues DIR/kjv-draft (with --fresh: a
new draft of --draft-layers layers and Markov rank --markov-rank; with
--add-layers N: N more layers after its own, starting as identities) against
DIR/kjv-target (copied to OUTDIR unchanged), with the target's continuations
made by `dspark generate` when --dspark names the binary (a CPU runs that far
faster than this script's loop without a KV cache).
The shipped pair (bench/RESULTS.md, fifty-seventh session): on one H100 the
first form with `--target-layers 14 --taps 3,9 --budget 420 --target-steps
1800 --draft-steps 60000 --batch 32 --pool 8192 --lr 2e-3 --decay 4 --tv 0.9
--blocks 3,7 --bf16 --seed 11` (target 1674 steps, draft 3184), then
`scripts/device_train.sh "C:2:64:DIR"` with BUDGET=780 and ARGS="--draft-steps
60000 --batch 64 --pool 8192 --lr 1e-3 --decay 4 --tv 0.9 --blocks 3,7 --bf16
--seed 12" (6586 more), then on a 2-core CPU `--finetune DIR --dspark
build/dspark --budget 6300 --batch 16 --pool 8192 --lr 6e-4` with the same
decay, tv, blocks and bf16 and seed 13 (9055 more; both budgets from when a
continued draft had 0.4 of the budget), then on an H100
`scripts/device_train.sh "F256:2:64:models"` with BUDGET=520 and ARGS="--draft-steps 60000 --batch 256
--pool 8192 --lr 2e-3 --decay 4 --tv 0.9 --blocks 3,7 --bf16 --seed 15" (6783 more). The 8-layer pair shipped
before it: the first form on one H200, then CPU and H100 fine-tuning
(bench/RESULTS.md, tenth, thirty-fourth and forty-fifth sessions).

Writes OUTDIR/kjv-target (a Qwen3ForCausalLM directory as transformers saves
one: config.json, generation_config.json, model.safetensors or, past 16 MiB,
its shards and model.safetensors.index.json, tokenizer.json)
and OUTDIR/kjv-draft (a Qwen3DSparkModel directory in DeepSpec's layout) and
OUTDIR/heldout.txt (the Revelation of John, never trained on).

What it does, from the public description of DSpark:
- the tokenizer: a byte-level BPE in Qwen's format (its split pattern, NFC),
  trained with Hugging Face tokenizers, special tokens <|endoftext|>,
  <|im_start|>, <|im_end|> and <|mask|> (the draft's mask token);
- the target: a Qwen3 decoder (q/k RMSNorm, rotate-half RoPE, GQA, SwiGLU,
  tied embeddings) trained as a causal language model on random windows;
- the draft: block-parallel drafting from anchors. Per window, random anchor
  positions a; the block [x_a, mask x (B-1)] at positions a .. a+B-1 attends
  to the context (keys and values of ctx = hidden_norm(fc(the frozen
  target's taps)) at positions < a, in every draft layer) and to its whole
  block; the final-normed states go through the target's (frozen) LM head
  plus the Markov bias W2 W1[prev_k] with prev_k = x_{a+k} (teacher
  forcing), cross-entropy against x_{a+k+1}; the confidence head
  (proj([h_k ; W1[prev_k]])) learns, by binary cross-entropy, whether the
  draft's choice at k equals the target's greedy choice there.
The draft trains on windows half from the corpus and half from the target's
own continuations of corpus prompts (greedy and sampled), its loss the
cross-entropy against the target's distribution at each slot (distillation).
--decay D weighs slot k's loss by exp(-k / D) and --tv W mixes in the L1
distance between the draft's and the target's distributions (weight W, the
cross-entropy 1 - W), as DSpark's public training configuration does (decay 4,
L1 0.9, CE 0.1); the defaults are uniform weights and cross-entropy alone.
Simplified against the paper's recipe: two draft layers, small sizes, 16
anchors a window."""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
TARGET = dict(hidden=256, layers=8, heads=8, kv_heads=4, head_dim=32, intermediate=768, vocab=2048, theta=10000.0)
DRAFT = dict(layers=2, taps=[2, 5], block=7, rank=64)


# ------------------------------------------------------------------ data

def verses(path=None):
    """(book, text) per verse from the bible program (bible-kjv), or from a file
    holding that program's output (for a machine without the package)."""
    if path:
        out = open(path, encoding="utf-8").read()
    else:
        out = subprocess.run(["bible", "-m", "8192", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                             check=True).stdout
    book, cur, res = None, None, []
    for line in out.splitlines():
        m = re.match(r"^(\S.*\S) \d+$", line)
        if m and not line.startswith(" "):
            book = m.group(1)
            continue
        v = re.match(r"^\s+\d+ (.*)$", line)
        if v:
            if cur:
                res.append(cur)
            cur = [book, v.group(1)]
        elif line.strip() and cur:
            cur[1] += " " + line.strip()
    if cur:
        res.append(cur)
    return res


def corpus(path=None):
    vs = verses(path)
    train = "\n".join(t for b, t in vs if b != "Revelation") + "\n"
    held = "\n".join(t for b, t in vs if b == "Revelation") + "\n"
    return train, held


def train_tokenizer(text, vocab):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=vocab - len(SPECIALS), min_frequency=2, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(keepends=True), tr)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


# ------------------------------------------------------------------ models

def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta, d):
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    h = d // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H, d = c["hidden"], c["head_dim"]
        self.c = c
        lin = lambda i, o: torch.nn.Parameter(torch.randn(o, i) / math.sqrt(i))  # noqa: E731
        self.q, self.k, self.v = lin(H, c["heads"] * d), lin(H, c["kv_heads"] * d), lin(H, c["kv_heads"] * d)
        self.o = torch.nn.Parameter(torch.randn(H, c["heads"] * d) / math.sqrt(c["heads"] * d) / math.sqrt(2 * c["layers"]))
        self.gate, self.up = lin(H, c["intermediate"]), lin(H, c["intermediate"])
        self.down = torch.nn.Parameter(torch.randn(H, c["intermediate"]) / math.sqrt(c["intermediate"]) /
                                       math.sqrt(2 * c["layers"]))
        one = lambda n: torch.nn.Parameter(torch.ones(n))  # noqa: E731
        self.ln1, self.ln2, self.qn, self.kn = one(H), one(H), one(d), one(d)

    def kv(self, h, pos):
        c, d = self.c, self.c["head_dim"]
        k = rms((h @ self.k.T).view(*h.shape[:-1], c["kv_heads"], d), self.kn).transpose(-2, -3)
        v = (h @ self.v.T).view(*h.shape[:-1], c["kv_heads"], d).transpose(-2, -3)
        return rope(k, pos, c["theta"], d), v

    def forward(self, x, pos, mask, ctx_kv=None):
        """x [B, n, H]; mask [n, keys] bool; ctx_kv: (k, v) [B, hkv, m, d] placed before the rows' keys."""
        c, d = self.c, self.c["head_dim"]
        h = rms(x, self.ln1)
        q = rope(rms((h @ self.q.T).view(*h.shape[:-1], c["heads"], d), self.qn).transpose(1, 2), pos, c["theta"], d)
        k, v = self.kv(h, pos)
        if ctx_kv is not None:
            k, v = torch.cat([ctx_kv[0], k], 2), torch.cat([ctx_kv[1], v], 2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(*x.shape[:-1], -1) @ self.o.T
        h = rms(x, self.ln2)
        return x + (F.silu(h @ self.gate.T) * (h @ self.up.T)) @ self.down.T


class Target(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = torch.nn.Parameter(torch.randn(c["vocab"], c["hidden"]) * 0.02)
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["layers"]))
        self.norm = torch.nn.Parameter(torch.ones(c["hidden"]))

    def forward(self, ids, taps=()):
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device)
        mask = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
        x, out = self.embed[ids], []
        for i, ly in enumerate(self.layers):
            x = ly(x, pos, mask)
            if i in taps:
                out.append(x)
        return rms(x, self.norm) @ self.embed.T, out


class Draft(torch.nn.Module):
    def __init__(self, c, dc):
        super().__init__()
        self.c, self.dc = c, dc
        cl = dict(c, layers=dc["layers"])
        self.layers = torch.nn.ModuleList(Layer(cl) for _ in range(dc["layers"]))
        H = c["hidden"]
        self.fc = torch.nn.Parameter(torch.randn(H, len(dc["taps"]) * H) / math.sqrt(len(dc["taps"]) * H))
        self.hidden_norm = torch.nn.Parameter(torch.ones(H))
        self.norm = torch.nn.Parameter(torch.ones(H))
        self.w1 = torch.nn.Parameter(torch.randn(c["vocab"], dc["rank"]) * 0.02)
        self.w2 = torch.nn.Parameter(torch.zeros(c["vocab"], dc["rank"]))
        self.conf_w = torch.nn.Parameter(torch.zeros(1, H + dc["rank"]))
        self.conf_b = torch.nn.Parameter(torch.zeros(1))

    def forward(self, target, ids, taps, anchors, K=None):
        """ids [B, S]; taps: list of [B, S, H]; anchors [A] positions (shared by the batch); K: the block's rows
        (default the checkpoint's block size). Returns (markov logits, h, prev) over the A blocks' rows:
        [B, A*K, V], [B, A*K, H], [B, A*K]."""
        B, S = ids.shape
        K, dev = K or self.dc["block"], ids.device
        ctx = rms(torch.cat(taps, -1) @ self.fc.T, self.hidden_norm)
        A = anchors.shape[0]
        bpos = (anchors[:, None] + torch.arange(K, device=dev)[None]).reshape(-1)  # [A*K]
        mask_id = self.c["vocab"] - 1  # <|mask|> is the last id
        bids = torch.full((B, A, K), mask_id, dtype=torch.long, device=dev)
        bids[:, :, 0] = ids[:, anchors]
        x = target.embed.detach()[bids.view(B, -1)]
        cpos = torch.arange(S, device=dev)
        # row of anchor a sees context positions < a and its own block
        owner = torch.arange(A, device=dev).repeat_interleave(K)
        mask = torch.cat([cpos[None, :] < anchors[owner][:, None], owner[:, None] == owner[None, :]], 1)
        for ly in self.layers:
            ckv = ly.kv(ctx, cpos)
            x = ly(x, bpos, mask, ctx_kv=ckv)
        h = rms(x, self.norm)
        prev = ids[:, bpos.clamp(max=S - 1)]  # x_{a+k}
        logits = h @ target.embed.detach().T + (self.w1[prev]) @ self.w2.T
        return logits, h, prev, bpos


def bf16(t):
    return t.detach().to(torch.bfloat16).contiguous().cpu()


def layer_tensors(prefix, ly):
    """A decoder layer's tensors under Qwen3's names."""
    return {prefix + n + ".weight": bf16(t) for n, t in (
        ("self_attn.q_proj", ly.q), ("self_attn.k_proj", ly.k), ("self_attn.v_proj", ly.v), ("self_attn.o_proj", ly.o),
        ("mlp.gate_proj", ly.gate), ("mlp.up_proj", ly.up), ("mlp.down_proj", ly.down), ("input_layernorm", ly.ln1),
        ("post_attention_layernorm", ly.ln2), ("self_attn.q_norm", ly.qn), ("self_attn.k_norm", ly.kn))}


SHARD_BYTES = 16 << 20  # the repository's largest file


def save_sharded(w, out):
    """model.safetensors, or, past SHARD_BYTES, model-0000i-of-0000n.safetensors files of at most that size (in
    the tensors' order) with model.safetensors.index.json, as transformers writes a sharded checkpoint."""
    from safetensors.torch import save_file
    shards, cur, size = [], {}, 0
    for name, t in w.items():
        b = t.numel() * t.element_size()
        if cur and size + b > SHARD_BYTES - (1 << 16):  # room for the header
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = t
        size += b
    shards.append(cur)
    if len(shards) == 1:
        save_file(w, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        return
    wmap = {}
    for i, sh in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        save_file(sh, os.path.join(out, fn), metadata={"format": "pt"})
        wmap.update({n: fn for n in sh})
    total = sum(t.numel() * t.element_size() for t in w.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": wmap},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)


def load_dir(d):
    """A directory's tensors: model.safetensors or the shards its index names."""
    from safetensors.torch import load_file
    idx = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(idx):
        return load_file(os.path.join(d, "model.safetensors"))
    w = {}
    for fn in sorted(set(json.load(open(idx))["weight_map"].values())):
        w.update(load_file(os.path.join(d, fn)))
    return w


def save_target(model, tok, out):
    from safetensors.torch import save_file
    c = model.c
    os.makedirs(out, exist_ok=True)
    w = {"model.embed_tokens.weight": bf16(model.embed), "model.norm.weight": bf16(model.norm)}
    for i, ly in enumerate(model.layers):
        w.update(layer_tensors("model.layers.%d." % i, ly))
    save_sharded(w, out)
    eos, bos = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|endoftext|>")
    cfg = config(c, eos, bos)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": bos, "eos_token_id": [eos], "transformers_version": "5.0.0"},
              open(os.path.join(out, "generation_config.json"), "w"), indent=2)
    tok.save(os.path.join(out, "tokenizer.json"))
    return cfg


def config(c, eos, bos):
    return dict(sorted({
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": bos, "eos_token_id": eos, "head_dim": c["head_dim"], "hidden_act": "silu",
        "hidden_size": c["hidden"], "initializer_range": 0.02, "intermediate_size": c["intermediate"],
        "max_position_embeddings": 4096, "max_window_layers": c["layers"], "model_type": "qwen3",
        "num_attention_heads": c["heads"], "num_hidden_layers": c["layers"], "num_key_value_heads": c["kv_heads"],
        "rms_norm_eps": 1e-6, "sliding_window": None, "tie_word_embeddings": True, "use_cache": True,
        "use_sliding_window": False, "vocab_size": c["vocab"], "dtype": "bfloat16",
        "layer_types": ["full_attention"] * c["layers"], "pad_token_id": None,
        "rope_parameters": {"rope_theta": c["theta"], "rope_type": "default"}, "transformers_version": "5.0.0"}.items()))


def save_draft(draft, target, tcfg, tok, out):
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    dc = draft.dc
    w = {"embed_tokens.weight": bf16(target.embed), "lm_head.weight": bf16(target.embed),
         "norm.weight": bf16(draft.norm), "hidden_norm.weight": bf16(draft.hidden_norm), "fc.weight": bf16(draft.fc),
         "markov_head.markov_w1.weight": bf16(draft.w1), "markov_head.markov_w2.weight": bf16(draft.w2),
         "confidence_head.proj.weight": bf16(draft.conf_w), "confidence_head.proj.bias": bf16(draft.conf_b)}
    for i, ly in enumerate(draft.layers):
        w.update(layer_tensors("layers.%d." % i, ly))
    save_file(w, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = dict(tcfg)
    cfg.update({"architectures": ["Qwen3DSparkModel"], "num_hidden_layers": dc["layers"],
                "num_target_layers": tcfg["num_hidden_layers"], "block_size": dc["block"],
                "layer_types": ["full_attention"] * dc["layers"], "max_window_layers": dc["layers"],
                "mask_token_id": tok.token_to_id("<|mask|>"), "target_layer_ids": dc["taps"], "num_anchors": 16,
                "enable_confidence_head": True, "confidence_head_with_markov": True, "markov_rank": dc["rank"],
                "markov_head_type": "vanilla", "tie_word_embeddings": False})
    json.dump(dict(sorted(cfg.items())), open(os.path.join(out, "config.json"), "w"), indent=2)
    tok.save(os.path.join(out, "tokenizer.json"))


def batches(stream, S, B, gen):
    n = stream.shape[0]
    while True:
        starts = torch.randint(0, n - S - 1, (B,), generator=gen)
        yield torch.stack([stream[s:s + S] for s in starts])


def generate(target, stream, n, prompt, seq, gen, dev, budget):
    """The target's own continuations of random corpus windows (prompt tokens, then
    seq - prompt new ones), half greedy and half sampled at T = 1: the text the
    draft will see at run time. Stops early at its time budget."""
    out, t0 = [], time.time()
    for b in range(0, n, 512):
        starts = torch.randint(0, stream.shape[0] - prompt - 1, (512,), generator=gen)
        x = torch.stack([stream[s:s + prompt] for s in starts]).to(dev)
        with torch.no_grad():
            for _ in range(seq - prompt):
                lg = target(x)[0][:, -1].float()
                greedy = lg.argmax(-1)
                drawn = torch.multinomial(F.softmax(lg, -1), 1).squeeze(-1)
                x = torch.cat([x, torch.where(torch.arange(512, device=dev) % 2 == 0, greedy, drawn)[:, None]], 1)
        out.append(x.cpu())
        if time.time() - t0 > budget:
            break
    print("generated %d target continuations (%.0f s)" % (len(out) * 512, time.time() - t0), flush=True)
    return torch.cat(out)


def mixed(stream, pool, S, B, gen):
    """Half corpus windows, half the target's continuations."""
    for x in batches(stream, S, B - B // 2, gen):
        yield torch.cat([x, pool[torch.randint(0, pool.shape[0], (B // 2,), generator=gen)][:, :S]])


def fit(steps, done, spent, budget):
    """The step count that fits a phase's budget, from the time of its first steps."""
    fits = int(budget / (spent / done))
    if fits < steps:
        print("budget: %d steps instead of %d" % (fits, steps), flush=True)
    return min(steps, fits)


def run_steps(data, steps, budget, dev):
    """(step, step count, batch on dev) over data; with a budget, the count shrinks at step 20 to fit it, and is
    fitted again at step 300 from the steps since 20 (the first ones carry the device's warm-up)."""
    t0, t20, asked = time.time(), 0.0, steps
    for step, x in enumerate(data):
        if step >= steps:
            return
        if step == 20 and budget:
            t20 = time.time() - t0
            steps = fit(steps, step, t20, budget)
        if step == 300 and budget and steps > 300:
            steps = 20 + fit(asked - 20, 280, time.time() - t0 - t20, budget - t20)
        yield step, steps, x.to(dev)


def cosine(step, total, lr, warm=100):
    if step < warm:
        return lr * (step + 1) / warm
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm))))


def load_pair(src, target, draft):
    """The weights of src/kjv-target and, unless draft is None, src/kjv-draft (as save_target and save_draft write
    them) into the modules."""
    def put(param, t):
        assert tuple(param.shape) == tuple(t.shape), (tuple(param.shape), tuple(t.shape))
        param.data.copy_(t.float())

    def layers(prefix, mods, w, have=None):
        for i, ly in enumerate(mods):
            if have is not None and i >= have:  # a layer --add-layers appended: o and down zero, so the grown
                ly.o.data.zero_(), ly.down.data.zero_()  # draft starts as the same function
                continue
            for n, t in layer_tensors(prefix + "%d." % i, ly).items():
                a = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
                     "down_proj": "down", "input_layernorm": "ln1", "post_attention_layernorm": "ln2",
                     "q_norm": "qn", "k_norm": "kn"}[n.split(".")[-2]]
                put(getattr(ly, a), w[n])

    w = load_dir(os.path.join(src, "kjv-target"))
    put(target.embed, w["model.embed_tokens.weight"])
    put(target.norm, w["model.norm.weight"])
    layers("model.layers.", target.layers, w)
    if draft is None:
        return
    w = load_dir(os.path.join(src, "kjv-draft"))
    for name, param in (("norm", draft.norm), ("hidden_norm", draft.hidden_norm), ("fc", draft.fc),
                        ("markov_head.markov_w1", draft.w1), ("markov_head.markov_w2", draft.w2),
                        ("confidence_head.proj", draft.conf_w)):
        put(param, w[name + ".weight"])
    put(draft.conf_b, w["confidence_head.proj.bias"])
    have = json.load(open(os.path.join(src, "kjv-draft", "config.json")))["num_hidden_layers"]
    layers("layers.", draft.layers, w, have)


def dspark_pool(binary, target_dir, stream, n, prompt, seq, gen):
    """The target's continuations made by `dspark generate` (greedy for even rows, T = 1 for odd ones, as
    generate() makes them): on a CPU far faster than generate()'s loop without a KV cache."""
    import tempfile
    starts = torch.randint(0, stream.shape[0] - prompt - 1, (n,), generator=gen)
    prompts = [stream[s:s + prompt].tolist() for s in starts]
    rows, t0 = [None] * n, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for c0 in range(0, n, 8192):  # calls of at most 4096 prompts each (dspark's limit)
            for temp, part in (("0", range(c0, min(n, c0 + 8192), 2)), ("1", range(c0 + 1, min(n, c0 + 8192), 2))):
                f = os.path.join(tmp, "prompts.json")
                json.dump([prompts[i] for i in part], open(f, "w"))
                run = subprocess.run([binary, "generate", "--model", target_dir, "--prompts", f, "--max-new",
                                      str(seq - prompt), "--ignore-eos", "--temperature", temp, "--seed",
                                      str(17 + c0), "--json"], capture_output=True, text=True)
                if run.returncode != 0:
                    sys.exit("dspark generate failed: " + run.stderr.strip())
                res = json.loads(run.stdout.strip().splitlines()[-1])["results"]
                for i, r in zip(part, res):
                    rows[i] = prompts[i] + r["tokens"]
    print("generated %d target continuations with dspark (%.0f s)" % (n, time.time() - t0), flush=True)
    return torch.tensor(rows, dtype=torch.long)


def slot_weights(K, decay, dev):
    """Per block slot: exp(-k / decay) (DSpark's public training config decays its losses with gamma 4), or
    uniform for decay 0; normalized to mean 1."""
    w = torch.ones(K, device=dev) if decay <= 0 else torch.exp(-torch.arange(K, device=dev, dtype=torch.float32) / decay)
    return w * (K / w.sum())


def train_draft(a, target, draft, stream, pool, hx, gen, dev):
    """Block-parallel drafting from anchors against the frozen target; returns the held-out agreement per slot."""
    opt = torch.optim.AdamW(draft.parameters(), lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    blocks = [int(b) for b in a.blocks.split(",")]
    amp = lambda: torch.autocast(dev if dev == "cpu" else "cuda", dtype=torch.bfloat16, enabled=a.bf16)  # noqa: E731
    t0 = time.time()
    # a new pair's draft gets 0.4 of the budget (the target had 0.35, the pool 0.15); a continued draft what is left
    # of 0.9 of it after loading and the pool (a tenth kept for the held-out check and the save)
    budget = 0.4 * a.budget if not a.finetune else max(60.0, 0.9 * a.budget - (time.time() - a.t_start))
    for step, steps, x in run_steps(mixed(stream, pool, a.seq, a.batch, gen), a.draft_steps,
                                    budget if a.budget else 0, dev):
        for g in opt.param_groups:
            g["lr"] = cosine(step, steps, a.lr, warm=max(100, steps // 25) if a.finetune else 100)
        with torch.no_grad(), amp():
            tlog, taps = target(x, taps=set(DRAFT["taps"]))
        K = blocks[step % len(blocks)]
        anchors = torch.randperm(a.seq - K - 1, generator=gen)[:16].sort().values.to(dev) + 1
        with amp():
            logits, h, prev, bpos = draft(target, x, taps, anchors, K)
        logits = logits.float()
        w = slot_weights(K, a.decay, dev).repeat(anchors.shape[0])  # [A*K]: slot k of every block
        # distilled: the target's distribution at each slot (what verification accepts against)
        soft = F.softmax(tlog[:, bpos].float(), -1)
        ce = -(soft * F.log_softmax(logits, -1)).sum(-1)
        loss = (ce * w).mean()
        if a.tv > 0:  # the L1 distance of the two distributions: sampled acceptance is 1 - half of it
            l1 = (F.softmax(logits, -1) - soft).abs().sum(-1)
            loss = (1 - a.tv) * loss + a.tv * (l1 * w).mean()
        # confidence: does the draft's choice at each slot match the target's greedy choice there
        agree = (logits.argmax(-1) == tlog[:, bpos].argmax(-1)).float()
        feat = torch.cat([h.float(), draft.w1[prev]], -1).detach()
        closs = F.binary_cross_entropy_with_logits((feat @ draft.conf_w.T).squeeze(-1) + draft.conf_b, agree)
        opt.zero_grad()
        (loss + 0.1 * closs).backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print("draft step %d loss %.3f confidence %.3f agreement %.3f (%.0f s)" % (
                step, loss.item(), closs.item(), agree.mean().item(), time.time() - t0), flush=True)
    return heldout_agreement(a, target, draft, hx, dev)


def heldout_agreement(a, target, draft, hx, dev):
    K = DRAFT["block"]
    with torch.no_grad():
        h = hx[:, :-1]
        tlog, taps = target(h, taps=set(DRAFT["taps"]))
        anchors = torch.arange(1, a.seq - K - 1, K + 1, device=dev)
        logits, _, _, bpos = draft(target, h, taps, anchors)
        agree = (logits.argmax(-1) == tlog[:, bpos].argmax(-1)).float().view(h.shape[0], -1, K).mean((0, 1))
    print("draft held-out agreement per slot " + " ".join("%.3f" % v for v in agree.tolist()), flush=True)
    return agree


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--target-steps", type=int, default=3000)
    ap.add_argument("--draft-steps", type=int, default=2000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds for the whole run (0: no limit); step counts shrink to fit, decided at step 20 "
                         "and again at step 300")
    ap.add_argument("--verses", help="a file with the output of `bible -m 8192 Gen1:1-Rev22:21`")
    ap.add_argument("--finetune", metavar="DIR",
                    help="no target training: continue DIR/kjv-draft against DIR/kjv-target (copied unchanged)")
    ap.add_argument("--dspark", metavar="BINARY", help="make the target's continuations with `dspark generate`")
    ap.add_argument("--pool", type=int, default=16384, help="target continuations to make")
    ap.add_argument("--lr", type=float, default=2e-3, help="the draft's peak learning rate")
    ap.add_argument("--decay", type=float, default=0, help="slot k's loss weight exp(-k / decay); 0: uniform")
    ap.add_argument("--tv", type=float, default=0, help="weight of the L1 distribution loss (the rest: soft CE)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast for the forward passes")
    ap.add_argument("--fresh", action="store_true",
                    help="with --finetune: a new draft against DIR's target instead of DIR's draft")
    ap.add_argument("--target-layers", type=int, default=TARGET["layers"], help="a new target's decoder layers")
    ap.add_argument("--taps", default=",".join(map(str, DRAFT["taps"])),
                    help="a new draft's target_layer_ids (comma list)")
    ap.add_argument("--draft-layers", type=int, default=DRAFT["layers"], help="a new draft's decoder layers")
    ap.add_argument("--markov-rank", type=int, default=DRAFT["rank"], help="a new draft's Markov rank")
    ap.add_argument("--add-layers", type=int, default=0,
                    help="with --finetune: decoder layers added after the draft's own, their o and down projections "
                         "zero (the grown draft starts as the same function)")
    ap.add_argument("--blocks", default=str(DRAFT["block"]),
                    help="the draft's block rows in training, steps taking these in turn (e.g. 3,7: also blocks of "
                         "3 rows, what `--draft-block gamma` runs at gamma 3)")
    a = ap.parse_args()
    a.t_start = time.time()
    if a.fresh and not a.finetune:
        sys.exit("--fresh needs --finetune DIR (the target to draft for)")
    if a.add_layers and (not a.finetune or a.fresh):
        sys.exit("--add-layers grows a continued draft: it needs --finetune DIR without --fresh")
    DRAFT.update(layers=a.draft_layers, rank=a.markov_rank, taps=[int(t) for t in a.taps.split(",")])
    TARGET.update(layers=a.target_layers)
    if a.finetune:  # the sizes of the pair being continued
        tc = json.load(open(os.path.join(a.finetune, "kjv-target", "config.json")))
        TARGET.update(layers=tc["num_hidden_layers"])
        if not a.fresh:
            dc = json.load(open(os.path.join(a.finetune, "kjv-draft", "config.json")))
            DRAFT.update(layers=dc["num_hidden_layers"] + a.add_layers, rank=dc["markov_rank"],
                         taps=dc["target_layer_ids"])
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    dev = a.device
    train, held = corpus(a.verses)
    os.makedirs(a.outdir, exist_ok=True)
    open(os.path.join(a.outdir, "heldout.txt"), "w").write(held)
    target = Target(TARGET).to(dev)
    draft = Draft(TARGET, DRAFT).to(dev) if a.finetune else None
    if a.finetune:
        import shutil
        from tokenizers import Tokenizer
        tdir = os.path.join(a.outdir, "kjv-target")
        if os.path.abspath(tdir) != os.path.abspath(os.path.join(a.finetune, "kjv-target")):
            shutil.copytree(os.path.join(a.finetune, "kjv-target"), tdir, dirs_exist_ok=True)
        tok = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
        tcfg = json.load(open(os.path.join(tdir, "config.json")))
        load_pair(a.finetune, target, None if a.fresh else draft)
    else:
        tok = train_tokenizer(train, TARGET["vocab"])
    assert tok.get_vocab_size() == TARGET["vocab"] and tok.token_to_id("<|mask|>") == TARGET["vocab"] - 1
    stream = torch.tensor(tok.encode(train).ids, dtype=torch.long)
    print("corpus: %d training tokens, %d held-out characters" % (stream.shape[0], len(held)), flush=True)
    gen = torch.Generator().manual_seed(a.seed)
    if not a.finetune:
        opt = torch.optim.AdamW(target.parameters(), lr=2e-3, weight_decay=0.1, betas=(0.9, 0.95))
        t0 = time.time()
        for step, steps, x in run_steps(batches(stream, a.seq + 1, a.batch, gen), a.target_steps, 0.35 * a.budget,
                                        dev):
            for g in opt.param_groups:
                g["lr"] = cosine(step, steps, 2e-3)
            logits, _ = target(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
            opt.step()
            if step % 100 == 0 or step == steps - 1:
                print("target step %d loss %.3f (%.0f s)" % (step, loss.item(), time.time() - t0), flush=True)
    hstream = torch.tensor(tok.encode(held).ids, dtype=torch.long)
    with torch.no_grad():
        hx = torch.stack([hstream[i:i + a.seq + 1] for i in range(0, hstream.shape[0] - a.seq - 1, a.seq)][:64]).to(dev)
        hl, _ = target(hx[:, :-1])
        print("target held-out loss %.3f" % F.cross_entropy(hl.reshape(-1, hl.shape[-1]), hx[:, 1:].reshape(-1)).item(),
              flush=True)
    if not a.finetune:
        tcfg = save_target(target, tok, os.path.join(a.outdir, "kjv-target"))
    target.requires_grad_(False)
    if a.finetune:
        heldout_agreement(a, target, draft, hx, dev)
    else:
        draft = Draft(TARGET, DRAFT).to(dev)  # made here, as before, so a seed's run is unchanged
    if a.dspark:
        pool = dspark_pool(a.dspark, os.path.join(a.outdir, "kjv-target"), stream, a.pool, 32, a.seq, gen)
    else:
        pool = generate(target, stream, a.pool, 32, a.seq, gen, dev, 0.15 * a.budget if a.budget else 1e9)
    train_draft(a, target, draft, stream, pool, hx, gen, dev)
    save_draft(draft, target, tcfg, tok, os.path.join(a.outdir, "kjv-draft"))
    print("wrote %s" % a.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
