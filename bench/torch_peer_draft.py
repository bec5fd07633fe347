"""PyTorch peer of one DSpark proposal, written from the public description
(issue "The DSpark draft"), eager and captured in a CUDA graph, at a draft's
shapes with random bf16 weights:

  context: ctx = hidden_norm(fc(taps of the new rows)); per layer K = rope(k_norm(k_proj(ctx))),
           V = v_proj(ctx) appended to a static KV-only context cache;
  block:   [anchor, mask x (B - 1)] embedded; per layer one fused q/k/v projection, q/k norm,
           RoPE, attention of every block row over the context cache and the whole block
           (non-causal, GQA), o projection, residual, SwiGLU MLP, residual; final norm;
  head:    base = h @ lm_head^T for the block's rows; then gamma sequential greedy steps
           logits_k = base_k + W2 @ W1[prev_k], prev_{k+1} = argmax(logits_k).

Timed with CUDA events (median of replays); the card's copy bandwidth measured
in the same process gives the floor (weights + context cache bytes).

usage: python3 bench/torch_peer_draft.py [--hidden 4096 --heads 32 --kv-heads 8 --head-dim 128
       --intermediate 12288 --layers 5 --taps 5 --vocab 151936 --rank 256 --block 7
       --context 1024 --new-rows 4 --batch 1,32 --reps 30] [--device cpu]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_graph import capture  # noqa: E402


def rms(x, w, eps=1e-6):
    xf = x.float()
    return (w.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype).float()).to(x.dtype)


def rope(x, cos, sin):
    """x [..., n, heads, d]; cos/sin [n, d/2] (rotate-half)."""
    h = x.shape[-1] // 2
    c, s = cos[:, None, :], sin[:, None, :]
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * c - b * s, b * c + a * s], -1)


class Proposal:
    def __init__(self, a, B, dev):
        g = torch.Generator(device=dev).manual_seed(1)
        bf = torch.bfloat16
        H, hq, hkv, d, I, L = a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate, a.layers

        def w(*shape, std=None):
            return (torch.randn(*shape, generator=g, device=dev) * (std or shape[-1] ** -0.5)).to(bf)

        self.a, self.B, self.dev = a, B, dev
        self.qkv = [w((hq + 2 * hkv) * d, H) for _ in range(L)]
        self.o = [w(H, hq * d) for _ in range(L)]
        self.gu = [w(2 * I, H) for _ in range(L)]
        self.down = [w(H, I) for _ in range(L)]
        one = lambda n: torch.ones(n, device=dev, dtype=bf)  # noqa: E731
        self.n1, self.n2, self.qn, self.kn = [one(H)] * L, [one(H)] * L, [one(d)] * L, [one(d)] * L
        self.fc, self.hn, self.norm = w(H, a.taps * H), one(H), one(H)
        self.embed, self.lm = w(a.vocab, H, std=0.02), w(a.vocab, H)
        self.w1, self.w2 = w(a.vocab, a.rank, std=1.0), w(a.vocab, a.rank)
        cap = a.context + a.new_rows + a.block
        self.kc = torch.zeros(L, B, cap, hkv, d, device=dev, dtype=bf)
        self.vc = torch.zeros_like(self.kc)
        self.kc.normal_(generator=g)
        self.vc.normal_(generator=g)
        inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        ang = torch.arange(cap + 8, device=dev, dtype=torch.float32)[:, None] * inv[None]
        self.cos, self.sin = ang.cos().to(bf), ang.sin().to(bf)
        # static inputs, staged before each replay
        self.taps = torch.randn(B, a.new_rows, a.taps * H, generator=g, device=dev).to(bf)
        self.anchor = torch.randint(0, a.vocab - 1, (B,), generator=g, device=dev)
        self.start = a.context  # the context's length before this proposal's new rows

    def __call__(self):
        a, B = self.a, self.B
        hq, hkv, d, K, n = a.heads, a.kv_heads, a.head_dim, a.block, a.new_rows
        c0, c1 = self.start, self.start + n
        ctx = rms(self.taps @ self.fc.T, self.hn)  # [B, n, H]
        pc, ps = self.cos[c0:c1], self.sin[c0:c1]
        for layer in range(a.layers):
            kv = ctx @ self.qkv[layer][hq * d:].T
            k = rope(rms(kv[..., :hkv * d].view(B, n, hkv, d), self.kn[layer]), pc, ps)
            self.kc[layer, :, c0:c1] = k
            self.vc[layer, :, c0:c1] = kv[..., hkv * d:].view(B, n, hkv, d)
        ids = torch.full((B, K), a.vocab - 1, device=self.dev, dtype=torch.long)
        ids[:, 0] = self.anchor
        x = self.embed[ids]  # [B, K, H]
        bc, bs = self.cos[c1:c1 + K], self.sin[c1:c1 + K]
        for layer in range(a.layers):
            h = rms(x, self.n1[layer])
            qkv = h @ self.qkv[layer].T
            q = rope(rms(qkv[..., :hq * d].view(B, K, hq, d), self.qn[layer]), bc, bs)
            k = rope(rms(qkv[..., hq * d:(hq + hkv) * d].view(B, K, hkv, d), self.kn[layer]), bc, bs)
            v = qkv[..., (hq + hkv) * d:].view(B, K, hkv, d)
            kk = torch.cat([self.kc[layer, :, :c1], k], 1).transpose(1, 2)  # [B, hkv, c1 + K, d]
            vv = torch.cat([self.vc[layer, :, :c1], v], 1).transpose(1, 2)
            att = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, enable_gqa=True)
            x = x + att.transpose(1, 2).reshape(B, K, hq * d) @ self.o[layer].T
            gu = rms(x, self.n2[layer]) @ self.gu[layer].T
            x = x + (F.silu(gu[..., :a.intermediate]) * gu[..., a.intermediate:]) @ self.down[layer].T
        base = rms(x, self.norm) @ self.lm.T  # [B, K, V]
        prev, out = self.anchor, []
        for i in range(a.gamma):
            nxt = (base[:, i] + self.w1[prev] @ self.w2.T).argmax(-1)
            out.append(nxt)
            prev = nxt
        return torch.stack(out, 1)


def copy_gbps(dev):
    a = torch.empty(1 << 29, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    best = 1e9
    for _ in range(5):
        sync(dev)
        t0 = time.perf_counter()
        b.copy_(a)
        sync(dev)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.numel() / best / 1e9


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev, reps):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    for k, v in (("hidden", 4096), ("heads", 32), ("kv-heads", 8), ("head-dim", 128), ("intermediate", 12288),
                 ("layers", 5), ("taps", 5), ("vocab", 151936), ("rank", 256), ("block", 7), ("gamma", 7),
                 ("context", 1024), ("new-rows", 4), ("reps", 30)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    dev = a.device
    bw = copy_gbps(dev)
    H, d = a.hidden, a.head_dim
    per_layer = H * (a.heads + 2 * a.kv_heads) * d + a.heads * d * H + 3 * H * a.intermediate
    wbytes = 2 * (a.layers * per_layer + a.taps * H * H + a.vocab * H + a.gamma * a.vocab * a.rank)
    print("# torch_peer_draft: torch %s on %s, copy %.0f GB/s; %d layers, hidden %d, vocabulary %d, rank %d, "
          "block %d, context %d + %d new rows" % (torch.__version__, dev, bw, a.layers, H, a.vocab, a.rank, a.block,
                                                  a.context, a.new_rows))
    print("| batch | eager ms | graph ms | floor ms |\n|---|---|---|---|")
    with torch.inference_mode():
        for B in [int(x) for x in a.batch.split(",")]:
            p = Proposal(a, B, dev)
            kvbytes = 2 * 2 * a.layers * B * (a.context + a.new_rows) * a.kv_heads * d
            floor = (wbytes + kvbytes) / (bw * 1e9) * 1e3
            eager = timed(p, dev, a.reps)
            gms = float("nan")
            if dev == "cuda":
                g, out = capture(p, warmups=2)
                gms = timed(g.replay, dev, a.reps)
                if not torch.equal(out, p()):  # the graph and the eager path draft the same tokens
                    print("graph tokens differ from eager", file=sys.stderr)
                    return 1
                del g, out
            print("| %d | %.3f | %.3f | %.3f |" % (B, eager, gms, floor))
            sys.stdout.flush()
            del p
            if dev == "cuda":
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
