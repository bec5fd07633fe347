"""The CPU peer: llama.cpp (through llama-cpp-python, built from source for
this CPU) on the same Qwen3 directory dspark runs, the program a CPU user
would run instead. scripts/cpu_peer.sh installs it and runs it beside
bench_target and `dspark generate` in one call.

The directory's BF16 safetensors become a BF16 GGUF (--gguf PATH) with
llama.cpp's Qwen3 tensor names; norms are widened to F32 (exact), as
llama.cpp's own converter stores them. The GGUF has no tokenizer
(tokenizer.ggml.model "none"): ids go in and ids come out, so both programs
see the same ids.

  --mode calls     ms per call at each --batch B over a context of C
                   synthetic ids per sequence (bench_target's: sequence b,
                   position i, (i * 7919 + b * 104729 + 13) % vocab), all B
                   sequences in one llama_decode:
                   decode (1 new token, its logits) and verify (8 new tokens,
                   logits of each), the cache cut back to C after each call
                   (median of R); at batch 1 also the prefill of P ids (one
                   call, logits of the last).
  --mode generate  greedy decoding from --prompt-ids (or --prompt TEXT with the
                   directory's tokenizer.json, through the tokenizers package;
                   or --prompts FILE, a JSON array of either, as one batch:
                   one prefill call, then one call per step for the sequences
                   still running): one JSON line with tokens (and every
                   sequence's in results), ttft_ms and tok_per_s (the rate
                   after the first token, as dspark generate reports it).
                   Stops at --new tokens or an end-of-sequence id of the config.
                   --teacher IDS: also how many of another program's greedy ids
                   are llama.cpp's argmax given the prompt and the ids before
                   them, in one forward (its decode steps round differently from
                   its longer calls, so free-running tokens part at near-ties).

usage: python3 bench/llama_peer.py --model DIR --gguf PATH --mode calls [--context 1024] [--batch 1,4]
                                   [--prefill 512] [--reps 20] [--threads N] [--flash-attn on|off]
                                   [--type bf16|q8_0]
       python3 bench/llama_peer.py --model DIR --gguf PATH --mode generate
                                   (--prompt-ids 1,2,3 | --prompt TEXT | --prompts FILE) [--new 128]
                                   [--teacher IDS]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import qwen3_ref  # noqa: E402  (reads config.json and the safetensors files)


def write_gguf(model, path, wtype="bf16"):
    """A GGUF of a Hugging Face Qwen3 directory in llama.cpp's names: the
    matrices BF16 as they are, or Q8_0 (llama.cpp's 8-bit blocks, what its
    CPU users often run: about half the bytes, not dspark's numbers)."""
    import gguf
    c = qwen3_ref.read_config(model)
    w = qwen3_ref.read_weights(model)
    L = c["num_hidden_layers"]
    wr = gguf.GGUFWriter(path, "qwen3")
    wr.add_context_length(c.get("max_position_embeddings", 4096))
    wr.add_embedding_length(c["hidden_size"])
    wr.add_block_count(L)
    wr.add_feed_forward_length(c["intermediate_size"])
    wr.add_head_count(c["num_attention_heads"])
    wr.add_head_count_kv(c["num_key_value_heads"])
    wr.add_key_length(c["head_dim"])
    wr.add_value_length(c["head_dim"])
    wr.add_rope_freq_base(float(c["rope_theta"]))
    wr.add_layer_norm_rms_eps(float(c["rms_norm_eps"]))
    wr.add_vocab_size(c["vocab_size"])
    wr.add_tokenizer_model("none")
    q8 = wtype == "q8_0"
    wr.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.MOSTLY_BF16)

    def put(name, a):
        if a.ndim == 1:
            wr.add_tensor(name, a.astype(np.float32))
        elif q8:
            t = gguf.GGMLQuantizationType.Q8_0
            wr.add_tensor(name, gguf.quants.quantize(a.astype(np.float32), t), raw_dtype=t)
        else:
            wr.add_tensor(name, np.ascontiguousarray(a).view(np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)

    put("token_embd.weight", w["model.embed_tokens.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(L):
        for hf, gg in names.items():
            put("blk.%d.%s.weight" % (i, gg), w["model.layers.%d.%s.weight" % (i, hf)])
    put("output_norm.weight", w["model.norm.weight"])
    if not c["tie_word_embeddings"]:
        put("output.weight", w["lm_head.weight"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return c


class Peer:
    """One llama.cpp context over the GGUF for `seqs` sequences of up to n_ctx
    positions each, driven through llama-cpp-python's thin wrappers of
    llama_decode, with the logits read in place."""

    def __init__(self, gguf_path, vocab, n_ctx, n_batch, threads, flash, seqs=1):
        import llama_cpp
        from llama_cpp import _internals, _logger
        _logger.set_verbose(False)  # errors still print
        self.V = vocab
        self._rm = llama_cpp.llama_memory_seq_rm
        self.model = _internals.LlamaModel(path_model=gguf_path, params=llama_cpp.llama_model_default_params(),
                                           verbose=False)
        cp = llama_cpp.llama_context_default_params()
        n_ctx = -(-n_ctx // 256) * 256  # llama.cpp pads each sequence's share to 256
        cp.n_ctx, cp.n_seq_max = n_ctx * seqs, seqs
        cp.n_batch, cp.n_ubatch = n_batch, min(n_batch, 512)
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = _internals.LlamaContext(model=self.model, params=cp, verbose=False)
        self.batch = _internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)

    def forward_seqs(self, rows, all_logits):
        """rows: (sequence, ids, n_past) each; appends every sequence's ids at
        its positions n_past.. in one llama_decode and returns the argmax of
        each row with logits (every id's, or each sequence's last), in order."""
        b = self.batch.batch
        n = 0
        for seq, ids, n_past in rows:
            for i, t in enumerate(ids):
                b.token[n], b.pos[n], b.n_seq_id[n] = t, n_past + i, 1
                b.seq_id[n][0] = seq
                b.logits[n] = all_logits or i == len(ids) - 1
                n += 1
        b.n_tokens = n
        self.ctx.decode(self.batch)
        k = n if all_logits else len(rows)
        return np.ctypeslib.as_array(self.ctx.get_logits(), shape=(k * self.V,)).reshape(k, self.V).argmax(1)

    def forward(self, ids, n_past, all_logits):
        return self.forward_seqs([(0, list(ids), n_past)], all_logits)

    def cut(self, n):
        """Drops every sequence's positions from n on (the wrapper's own call
        would take -1, every sequence, for sequence 0)."""
        self._rm(self.ctx.memory, -1, n, -1)


def synth(lo, hi, V, b=0):
    return [(i * 7919 + b * 104729 + 13) % V for i in range(lo, hi)]


def median_ms(fn, reps):
    fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def mode_calls(a, c):
    V, C, P = c["vocab_size"], a.context, a.prefill
    fa = a.flash_attn == "on" and "flash-attn" or "no flash-attn"
    for B in [int(x) for x in a.batch.split(",")]:
        p = Peer(a.gguf, V, max(C + 8, P) + 8, max(8 * B, 512, P), a.threads, a.flash_attn == "on", seqs=B)
        for b in range(B):  # the contexts, in llama.cpp's ubatch-sized calls
            for i in range(0, C, 512):
                p.forward_seqs([(b, synth(i, min(C, i + 512), V, b), i)], False)
        out = {"batch": B}

        def call(n):
            p.forward_seqs([(b, synth(C, C + n, V, b), C) for b in range(B)], n > 1)
            p.cut(C)

        out["decode_ms"] = median_ms(lambda: call(1), a.reps)
        out["verify8_ms"] = median_ms(lambda: call(8), a.reps)
        line = "| llama.cpp %s %s, batch %d, context %d | decode %.3f ms | verify 8 %.3f ms |" % (
            a.type, fa, B, C, out["decode_ms"], out["verify8_ms"])
        if B == 1:
            p.cut(0)

            def prefill():
                p.forward(synth(0, P, V), 0, False)
                p.cut(0)

            out["prefill_ms"] = median_ms(prefill, max(3, a.reps // 5))
            line += " prefill %d %.1f ms |" % (P, out["prefill_ms"])
        out.update(context=C, prefill=P, threads=a.threads, flash_attn=a.flash_attn, type=a.type)
        print(line)
        print(json.dumps(out), flush=True)


def mode_generate(a, c):
    V = c["vocab_size"]
    if a.prompt_ids:
        prompts = [[int(x) for x in a.prompt_ids.split(",")]]
    else:
        from tokenizers import Tokenizer
        tk = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
        texts = json.load(open(a.prompts, encoding="utf-8")) if a.prompts else [a.prompt]
        prompts = [t if isinstance(t, list) else tk.encode(t).ids for t in texts]
    eos = c.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    gc = os.path.join(a.model, "generation_config.json")
    if os.path.exists(gc):
        g = json.load(open(gc)).get("eos_token_id")
        eos |= set(g if isinstance(g, list) else [g] if g is not None else [])
    B = len(prompts)
    want = [int(x) for x in a.teacher.split(",")] if a.teacher else []
    n_ctx = max(len(x) for x in prompts) + max(a.new, len(want)) + 8
    p = Peer(a.gguf, V, n_ctx, max(sum(len(x) for x in prompts), n_ctx, 8), a.threads, a.flash_attn == "on", seqs=B)

    def run():
        p.cut(0)
        t0 = time.perf_counter()
        toks = [[int(t)] for t in p.forward_seqs([(b, x, 0) for b, x in enumerate(prompts)], False)]
        t1 = time.perf_counter()
        live = [b for b in range(B) if a.new > 1 and toks[b][-1] not in eos]
        while live:
            am = p.forward_seqs([(b, [toks[b][-1]], len(prompts[b]) + len(toks[b]) - 1) for b in live], False)
            for b, t in zip(live, am):
                toks[b].append(int(t))
            live = [b for b in live if len(toks[b]) < a.new and toks[b][-1] not in eos]
        return toks, (t1 - t0) * 1e3, time.perf_counter() - t1

    run()  # untimed, as dspark generate --compare warms up
    toks, ttft, dt = run()
    rate = sum(len(t) - 1 for t in toks) / dt if dt > 0 else 0.0
    out = {"tokens": toks[0], "results": [{"tokens": t} for t in toks], "prompt_tokens": len(prompts[0]),
           "ttft_ms": ttft, "tok_per_s": rate, "threads": a.threads, "flash_attn": a.flash_attn}
    if want:  # another program's tokens, each checked against llama.cpp's argmax after its prefix
        p.cut(0)
        got = p.forward(prompts[0] + want[:-1], 0, True)[len(prompts[0]) - 1:]
        out["teacher_forced_agree"] = int(sum(int(g) == w for g, w in zip(got, want)))
        out["teacher_forced_of"] = len(want)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--mode", choices=("calls", "generate"), required=True)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", default="1", help="sequences per call, a comma list (calls mode)")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--flash-attn", choices=("on", "off"), default="on")
    ap.add_argument("--type", choices=("bf16", "q8_0"), default="bf16", help="the GGUF's matrices")
    ap.add_argument("--prompt-ids")
    ap.add_argument("--prompt")
    ap.add_argument("--prompts", help="a JSON array of prompts (strings or id lists), decoded as one batch")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--teacher", help="ids another program generated: report how many are llama.cpp's argmax "
                                      "given the prompt and the ids before them (one forward)")
    a = ap.parse_args()
    if a.mode == "generate" and (a.prompt_ids is not None) + (a.prompt is not None) + (a.prompts is not None) != 1:
        ap.error("--mode generate needs one of --prompt-ids, --prompt and --prompts")
    if a.teacher and a.prompts:
        ap.error("--teacher checks one prompt's tokens")
    c = write_gguf(a.model, a.gguf, a.type)
    (mode_calls if a.mode == "calls" else mode_generate)(a, c)


if __name__ == "__main__":
    main()
