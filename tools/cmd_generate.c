/* dspark generate: text from a Qwen3 checkpoint directory, alone or under
 * mpirun (TP size = ranks) or over several GPUs of one process (--tp). Every
 * process tokenizes and runs the same loop; rank 0 prints. One prompt streams
 * its text as the tokens come; several prompts (--prompts) and --json print
 * when done. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "dspark.h"
#include "tool_common.h"

typedef struct {
  const char *model, *prompt, *prompt_ids, *prompts, *draft;
  int64_t max_new, max_tokens, seed, gamma, max_batch;
  float temperature, p_min;
  int ignore_eos, ids, json, chat, no_think, compare, trace, verify, block_gamma;
  dsp_tool_backend backend;
} gen_args;

static void gen_usage(FILE *f) {
  fprintf(f,
          "usage: dspark generate --model DIR (--prompt TEXT | --prompt-ids ID,ID,... | --prompts FILE)\n"
          "                       [--max-new N] [--temperature T] [--seed S] [--ignore-eos]\n"
          "                       [--chat [--no-think]] [--max-tokens N] [--max-batch N] [--ids] [--json]\n"
          "                       [--draft DIR [--gamma N|auto] [--draft-block full|gamma] [--draft-p-min P]\n"
          "                                    [--verify rejection|exact] [--compare] [--trace]]\n"
          "                       [--backend cpu|cuda [--tp N]]\n"
          "  DIR: a Hugging Face Qwen3 directory (config.json, safetensors, tokenizer.json)\n"
          "  --prompts FILE: a JSON array of prompts, each a string or an array of token ids\n"
          "  --chat: wrap each prompt in Qwen3's chat turn (<|im_start|>user ... assistant);\n"
          "          --no-think adds the empty thinking block Qwen3 uses when thinking is off\n"
          "  --max-new N: new tokens per prompt (default 128); stops early at an end-of-sequence id\n"
          "  --temperature T: 0 (default) greedy, else Gumbel-max sampling keyed by (seed, position, id);\n"
          "         prompt q of --prompts draws with seed + q\n"
          "  --max-tokens N: most prompt tokens in one prefill call (default 2048)\n"
          "  --max-batch N: most sequences decoded at once (default: all of them; with --draft on CUDA\n"
          "         128, the CUDA Markov head's largest batch); with --draft a finished sequence's\n"
          "         slot takes the next prompt, plainly the prompts run in waves of N\n"
          "  --ids: print token ids instead of text; --json: one JSON object on one line: tokens, text,\n"
          "         finish (eos|length), ttft_ms, tok_per_s (decode rate after the first token), and\n"
          "         results (every prompt's tokens, text, finish) with --prompts\n"
          "  --draft DIR: speculative decoding with a DSpark draft (DeepSpec's layout); --gamma N drafted\n"
          "         tokens per round (default: the draft's block size; auto, greedy or --verify exact: as many\n"
          "         of the block's as pay, from the acceptance so far and the verify's measured cost per token);\n"
          "         --verify, when sampling: rejection (default) accepts a draft with probability min(1, p/q),\n"
          "         exact where it equals the target's own draw at its position, so the tokens are those of\n"
          "         plain sampled decoding with the same seed;\n"
          "         --draft-block: the draft's block has the checkpoint's block_size rows (full, the default,\n"
          "         as in training) or only gamma rows, [anchor, mask x (gamma-1)] (gamma: fewer rows to run,\n"
          "         a little less acceptance; it pays where drafting costs in proportion to its rows, as on CPUs;\n"
          "         with --gamma auto each round's block has as many rows as the drafts it verifies);\n"
          "         --draft-p-min P cuts a proposal\n"
          "         before its first slot whose confidence is below P; --compare also decodes the prompts\n"
          "         plainly and reports the speedup (and, greedy or exact, whether the tokens are the same), both\n"
          "         timed runs after an untimed one of each over 16 tokens;\n"
          "         --trace adds every round to the JSON\n"
          "  Run under `mpirun -np N` for tensor parallelism over N ranks, or give --tp N for N TP ranks\n"
          "  in this one process (N GPUs with cuda; N threads' ranks with cpu).\n");
}

static int parse_gen_args(int argc, char **argv, gen_args *a) {
  *a = (gen_args){.max_new = 128, .max_tokens = 2048};
  dsp_tool_backend_init(&a->backend);
  int br;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 1;
    if (!strcmp(o, "--model") && v) a->model = v;
    else if (!strcmp(o, "--prompt") && v) a->prompt = v;
    else if (!strcmp(o, "--prompt-ids") && v) a->prompt_ids = v;
    else if (!strcmp(o, "--prompts") && v) a->prompts = v;
    else if (!strcmp(o, "--max-new") && v) { if (dsp_tool_parse_i64(o, v, 1, 1 << 24, &a->max_new)) return -1; }
    else if (!strcmp(o, "--max-tokens") && v) { if (dsp_tool_parse_i64(o, v, 1, 1 << 24, &a->max_tokens)) return -1; }
    else if (!strcmp(o, "--max-batch") && v) { if (dsp_tool_parse_i64(o, v, 1, 1 << 20, &a->max_batch)) return -1; }
    else if (!strcmp(o, "--seed") && v) { if (dsp_tool_parse_i64(o, v, INT64_MIN, INT64_MAX, &a->seed)) return -1; }
    else if (!strcmp(o, "--temperature") && v) {
      char *end;
      a->temperature = strtof(v, &end);
      if (end == v || *end || !(a->temperature >= 0.0f) || a->temperature > 1e30f) {
        fprintf(stderr, "dspark generate: --temperature wants a finite number >= 0, got '%s'\n", v);
        return -1;
      }
    }
    else if (!strcmp(o, "--draft") && v) a->draft = v;
    else if (!strcmp(o, "--gamma") && v) {
      if (!strcmp(v, "auto")) a->gamma = DSP_GAMMA_AUTO;
      else if (dsp_tool_parse_i64(o, v, 1, 64, &a->gamma)) return -1;
    }
    else if (!strcmp(o, "--draft-block") && v) {
      if (!strcmp(v, "full") || !strcmp(v, "gamma")) a->block_gamma = !strcmp(v, "gamma");
      else {
        fprintf(stderr, "dspark generate: --draft-block wants full or gamma, got '%s'\n", v);
        return -1;
      }
    }
    else if (!strcmp(o, "--draft-p-min") && v) {
      char *end;
      a->p_min = strtof(v, &end);
      if (end == v || *end || !(a->p_min >= 0.0f && a->p_min < 1.0f)) {
        fprintf(stderr, "dspark generate: --draft-p-min wants a number in [0, 1), got '%s'\n", v);
        return -1;
      }
    }
    else if (!strcmp(o, "--verify") && v) {
      if (!strcmp(v, "rejection")) a->verify = DSP_VERIFY_REJECTION;
      else if (!strcmp(v, "exact")) a->verify = DSP_VERIFY_EXACT;
      else {
        fprintf(stderr, "dspark generate: --verify wants rejection or exact, got '%s'\n", v);
        return -1;
      }
    }
    else if (!strcmp(o, "--compare")) { a->compare = 1; used = 0; }
    else if (!strcmp(o, "--trace")) { a->trace = 1; used = 0; }
    else if (!strcmp(o, "--ignore-eos")) { a->ignore_eos = 1; used = 0; }
    else if (!strcmp(o, "--ids")) { a->ids = 1; used = 0; }
    else if (!strcmp(o, "--json")) { a->json = 1; used = 0; }
    else if (!strcmp(o, "--chat")) { a->chat = 1; used = 0; }
    else if (!strcmp(o, "--no-think")) { a->no_think = 1; used = 0; }
    else if ((used = 0, br = dsp_tool_backend_option(&a->backend, o, v, &used)) != 1) { if (br < 0) return -1; }
    else if (!strcmp(o, "-h") || !strcmp(o, "--help")) { gen_usage(stdout); exit(0); }
    else {
      fprintf(stderr, "dspark generate: unknown or incomplete option '%s'\n", o);
      return -1;
    }
    i += used;
  }
  if (!a->model) {
    fprintf(stderr, "dspark generate: --model is required\n");
    return -1;
  }
  if (!!a->prompt + !!a->prompt_ids + !!a->prompts != 1) {
    fprintf(stderr, "dspark generate: give exactly one of --prompt, --prompt-ids and --prompts\n");
    return -1;
  }
  if (a->chat && a->prompt_ids) {
    fprintf(stderr, "dspark generate: --chat wraps text prompts, not --prompt-ids\n");
    return -1;
  }
  if (!a->draft && (a->gamma || a->p_min > 0.0f || a->compare || a->trace || a->verify || a->block_gamma)) {
    fprintf(stderr, "dspark generate: --gamma, --draft-block, --draft-p-min, --verify, --compare and --trace go with "
                    "--draft\n");
    return -1;
  }
  if (a->block_gamma && a->gamma == 0) {
    fprintf(stderr, "dspark generate: --draft-block gamma needs --gamma: a number (the block's rows) or auto (each "
                    "round's block as many rows as it drafts)\n");
    return -1;
  }
  if (a->gamma == DSP_GAMMA_AUTO && a->temperature >= 1e-5f && a->verify != DSP_VERIFY_EXACT) {
    fprintf(stderr, "dspark generate: --gamma auto is for greedy decoding (--temperature 0) or --verify exact: a "
                    "sampled run's tokens under rejection would depend on its timings\n");
    return -1;
  }
  if (a->no_think && !a->chat) {
    fprintf(stderr, "dspark generate: --no-think goes with --chat\n");
    return -1;
  }
  return 0;
}

/* The prompts as token ids. */
typedef struct {
  int32_t n;
  int32_t **ids;
  int32_t *len;
} prompt_set;

static void prompts_free(prompt_set *p) {
  for (int32_t i = 0; p->ids && i < p->n; i++) free(p->ids[i]);
  free(p->ids);
  free(p->len);
  *p = (prompt_set){0};
}

static dsp_status encode_text(const dsp_tokenizer *tk, const gen_args *a, const char *text, int32_t **ids,
                              int32_t *n) {
  if (!tk) return dsp_fail(DSP_ERR_ARG, "a text prompt needs %s/tokenizer.json", a->model);
  static const char *pre = "<|im_start|>user\n", *mid = "<|im_end|>\n<|im_start|>assistant\n",
                    *think = "<think>\n\n</think>\n\n";
  const size_t cap = strlen(pre) + strlen(text) + strlen(mid) + strlen(think) + 1;
  char *buf = malloc(cap);
  if (!buf) return dsp_fail(DSP_ERR_NOMEM, "out of memory for a prompt");
  snprintf(buf, cap, "%s%s%s%s", a->chat ? pre : "", text, a->chat ? mid : "", a->no_think ? think : "");
  size_t len = strlen(buf), got = 0, icap = len + 8;
  *ids = malloc(icap * 4);
  dsp_status s = *ids ? dsp_tokenizer_encode(tk, buf, len, *ids, icap, &got) : dsp_fail(DSP_ERR_NOMEM, "out of memory");
  free(buf);
  if (s == DSP_OK && got == 0) s = dsp_fail(DSP_ERR_ARG, "a prompt encodes to no tokens");
  *n = (int32_t)got;
  return s;
}

static dsp_status parse_ids(const char *text, int32_t **ids, int32_t *n) {
  size_t cap = strlen(text) / 2 + 2;
  *ids = malloc(cap * 4);
  *n = 0;
  if (!*ids) return dsp_fail(DSP_ERR_NOMEM, "out of memory");
  for (const char *p = text; *p;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ','))
      return dsp_fail(DSP_ERR_ARG, "--prompt-ids wants comma-separated ids >= 0, got '%s'", text);
    (*ids)[(*n)++] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  if (*n == 0) return dsp_fail(DSP_ERR_ARG, "--prompt-ids is empty");
  return DSP_OK;
}

static dsp_status load_prompts(const gen_args *a, const dsp_tokenizer *tk, prompt_set *p) {
  if (!a->prompts) {
    p->n = 1;
    p->ids = calloc(1, sizeof *p->ids);
    p->len = calloc(1, sizeof *p->len);
    if (!p->ids || !p->len) return dsp_fail(DSP_ERR_NOMEM, "out of memory");
    return a->prompt ? encode_text(tk, a, a->prompt, &p->ids[0], &p->len[0]) : parse_ids(a->prompt_ids, &p->ids[0], &p->len[0]);
  }
  json_error_t e;
  json_t *root = json_load_file(a->prompts, 0, &e);
  if (!root) return dsp_fail(DSP_ERR_FORMAT, "%s: %s (line %d)", a->prompts, e.text, e.line);
  dsp_status s = DSP_OK;
  if (!json_is_array(root) || json_array_size(root) == 0 || json_array_size(root) > 4096)
    s = dsp_fail(DSP_ERR_FORMAT, "%s: want a JSON array of 1 .. 4096 prompts", a->prompts);
  if (s == DSP_OK) {
    p->n = (int32_t)json_array_size(root);
    p->ids = calloc((size_t)p->n, sizeof *p->ids);
    p->len = calloc((size_t)p->n, sizeof *p->len);
    if (!p->ids || !p->len) s = dsp_fail(DSP_ERR_NOMEM, "out of memory");
  }
  for (int32_t i = 0; s == DSP_OK && i < p->n; i++) {
    json_t *x = json_array_get(root, (size_t)i);
    if (json_is_string(x)) {
      s = encode_text(tk, a, json_string_value(x), &p->ids[i], &p->len[i]);
    } else if (json_is_array(x) && json_array_size(x) > 0 && json_array_size(x) < (1u << 24)) {
      p->len[i] = (int32_t)json_array_size(x);
      p->ids[i] = malloc((size_t)p->len[i] * 4);
      if (!p->ids[i]) s = dsp_fail(DSP_ERR_NOMEM, "out of memory");
      for (int32_t j = 0; s == DSP_OK && j < p->len[i]; j++) {
        json_t *v = json_array_get(x, (size_t)j);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
          s = dsp_fail(DSP_ERR_FORMAT, "%s: prompt %d, entry %d is not a token id", a->prompts, i, j);
        else p->ids[i][j] = (int32_t)json_integer_value(v);
      }
    } else {
      s = dsp_fail(DSP_ERR_FORMAT, "%s: prompt %d is neither a string nor a non-empty array of ids", a->prompts, i);
    }
  }
  json_decref(root);
  return s;
}

/* What the loop hands back, kept per sequence (rank 0 prints). */
typedef struct {
  const gen_args *a;
  const dsp_tokenizer *tk;
  int rank, stream;
  int32_t n;
  int32_t **out;
  int32_t *nout, *cap;
  int failed;
  json_t *rounds; /* --trace (rank 0) */
} sink;

static void put_token(FILE *f, const sink *k, int32_t id, int first) {
  const char *b;
  size_t len;
  if (!k->a->ids && k->tk && dsp_tokenizer_is_special(k->tk, id)) return; /* as decode(skip_special_tokens=True) */
  if (k->a->ids || !k->tk || dsp_tokenizer_token_bytes(k->tk, id, &b, &len) != DSP_OK)
    fprintf(f, first ? "%d" : " %d", id);
  else
    fwrite(b, 1, len, f);
}

static void on_tokens(void *ctx, int32_t seq, const int32_t *ids, int32_t n) {
  sink *k = ctx;
  if (k->nout[seq] + n > k->cap[seq]) {
    int32_t c = (k->nout[seq] + n) * 2;
    int32_t *p = realloc(k->out[seq], (size_t)c * 4);
    if (!p) {
      k->failed = 1;
      return;
    }
    k->out[seq] = p, k->cap[seq] = c;
  }
  for (int32_t i = 0; i < n; i++) {
    if (k->stream && k->rank == 0) {
      put_token(stdout, k, ids[i], k->nout[seq] == 0);
      fflush(stdout);
    }
    k->out[seq][k->nout[seq]++] = ids[i];
  }
}

static void on_round(void *ctx, const dsp_spec_round *r) {
  sink *k = ctx;
  if (!k->rounds) return;
  json_t *o = json_object(), *d = json_array();
  for (int32_t i = 0; i < r->ndraft; i++) json_array_append_new(d, json_integer(r->draft[i]));
  json_object_set_new(o, "sequence", json_integer(r->seq));
  json_object_set_new(o, "anchor", json_integer(r->anchor));
  json_object_set_new(o, "draft", d);
  json_object_set_new(o, "accepted", json_integer(r->accepted));
  json_object_set_new(o, "bonus", json_integer(r->bonus));
  json_array_append_new(k->rounds, o);
}

/* What a plain run of the same prompts gave, for --compare. */
typedef struct {
  int done;
  double ms, tok_per_s;
  int same; /* greedy or exact: every sequence's tokens equal the speculative run's (-1: not compared) */
} plain_run;

/* Decode rate: the tokens after each sequence's first, per second of decode. */
static double decode_rate(const dsp_generate_stats *st, int32_t nseq) {
  return st->decode_ms > 0 ? (double)(st->new_tokens - nseq) / (st->decode_ms * 1e-3) : 0.0;
}

/* One JSON object on one line: the first (or only) sequence's fields at the
 * top, every sequence's in "results", and the timings. */
static void spec_json(json_t *root, const sink *k, const dsp_generate_stats *st, const plain_run *pr,
                      const char *verify) {
  const double rounds = st->rounds ? (double)st->rounds : 1.0;
  json_object_set_new(root, "verify", json_string(verify));
  json_object_set_new(root, "acceptance_length", json_real((double)(st->accepted + st->rounds) / rounds));
  json_t *pos = json_array(), *cum = json_array();
  for (int i = 0; i < 64 && st->tried[i]; i++) {
    json_array_append_new(pos, json_real((double)st->kept[i] / (double)st->tried[i]));
    json_array_append_new(cum, json_real((double)st->kept[i] / rounds));
  }
  json_object_set_new(root, "per_position_acceptance", pos);
  json_object_set_new(root, "cumulative_acceptance", cum);
  json_object_set_new(root, "rounds_total", json_integer(st->rounds));
  json_object_set_new(root, "rounds_without_drafts", json_integer(st->plain_rounds));
  json_object_set_new(root, "drafted", json_integer(st->drafted));
  json_object_set_new(root, "accepted", json_integer(st->accepted));
  json_object_set_new(root, "draft_ms", json_real(st->draft_ms));
  json_object_set_new(root, "verify_ms", json_real(st->verify_ms));
  if (pr && pr->done) {
    json_object_set_new(root, "plain_ms", json_real(pr->ms));
    json_object_set_new(root, "plain_tok_per_s", json_real(pr->tok_per_s));
    json_object_set_new(root, "speedup", json_real(pr->ms / (st->prefill_ms + st->decode_ms)));
    json_object_set_new(root, "same_as_plain", pr->same >= 0 ? json_boolean(pr->same) : json_null());
  }
  if (k->rounds) json_object_set(root, "rounds", k->rounds);
}

static void print_json(const sink *k, const prompt_set *p, const int32_t *finished, const dsp_generate_stats *st,
                       const plain_run *pr, const char *verify) {
  json_t *root = json_object(), *res = json_array();
  for (int32_t q = 0; q < k->n; q++) {
    json_t *r = json_object(), *ids = json_array();
    for (int32_t i = 0; i < k->nout[q]; i++) json_array_append_new(ids, json_integer(k->out[q][i]));
    json_object_set_new(r, "prompt_tokens", json_integer(p->len[q]));
    json_object_set_new(r, "tokens", ids);
    char *t;
    size_t tl;
    if (k->tk && dsp_tokenizer_text(k->tk, k->out[q], (size_t)k->nout[q], 1, &t, &tl) == DSP_OK) {
      json_object_set_new(r, "text", json_stringn(t, tl));
      free(t);
    }
    json_object_set_new(r, "finish", json_string(finished[q] ? "eos" : "length"));
    if (q == 0) json_object_update(root, r);
    json_array_append_new(res, r);
  }
  json_object_set_new(root, "results", res);
  json_object_set_new(root, "new_tokens", json_integer(st->new_tokens));
  json_object_set_new(root, "ttft_ms", json_real(st->prefill_ms));
  json_object_set_new(root, "tok_per_s", json_real(decode_rate(st, k->n)));
  json_object_set_new(root, "prefill_ms", json_real(st->prefill_ms));
  json_object_set_new(root, "decode_ms", json_real(st->decode_ms));
  json_object_set_new(root, "prefill_calls", json_integer(st->prefill_calls));
  json_object_set_new(root, "decode_calls", json_integer(st->decode_calls));
  json_object_set_new(root, "all_prompt_tokens", json_integer(st->prompt_tokens));
  if (verify) spec_json(root, k, st, pr, verify);
  json_dumpf(root, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
  fputc('\n', stdout);
  json_decref(root);
}

static void print_stats(const dsp_generate_stats *st, int32_t nseq, int spec, const plain_run *pr) {
  fprintf(stderr,
          "dspark: %lld prompt tokens, %lld generated; time to first token %.1f ms (%lld prefill calls); "
          "%.1f tokens/s after it (%lld %s calls, %.1f ms)\n",
          (long long)st->prompt_tokens, (long long)st->new_tokens, st->prefill_ms, (long long)st->prefill_calls,
          decode_rate(st, nseq), (long long)st->decode_calls, spec ? "verify" : "decode", st->decode_ms);
  if (!spec) return;
  const double rounds = st->rounds ? (double)st->rounds : 1.0;
  fprintf(stderr, "dspark: acceptance length %.2f (bonus included) over %lld rounds; %lld of %lld drafts accepted; "
                  "drafting %.1f ms, verifying %.1f ms; per position:",
          (double)(st->accepted + st->rounds) / rounds, (long long)st->rounds, (long long)st->accepted,
          (long long)st->drafted, st->draft_ms, st->verify_ms);
  for (int i = 0; i < 64 && st->tried[i]; i++) fprintf(stderr, " %.2f", (double)st->kept[i] / (double)st->tried[i]);
  fputc('\n', stderr);
  if (st->plain_rounds)
    fprintf(stderr, "dspark: gamma auto ran %lld sequence-rounds as decode steps (no drafts: they did not pay)\n",
            (long long)st->plain_rounds);
  if (pr && pr->done)
    fprintf(stderr, "dspark: plain decoding of the same prompts %.1f ms (%.1f tokens/s): speedup %.2fx%s\n", pr->ms,
            pr->tok_per_s, pr->ms / (st->prefill_ms + st->decode_ms),
            pr->same < 0 ? "" : pr->same ? "; the same tokens" : "; TOKENS DIFFER (a bug)");
}

/* More prompts than slots: dsp_generate runs them in waves, dsp_speculate admits
 * a waiting prompt into each slot a finished sequence frees; each prompt keeps
 * its own seed, so its tokens are those of one whole batch either way. */
static dsp_status run_all(dsp_target *t, dsp_draft *d, const prompt_set *p, const dsp_generate_options *go,
                          const dsp_spec_options *so, sink *k, int32_t *finished, dsp_generate_stats *st) {
  if (!d) return dsp_generate(t, p->n, (const int32_t *const *)p->ids, p->len, go, on_tokens, k, finished, st);
  dsp_spec_options o = *so;
  o.gen = *go;
  return dsp_speculate(t, d, p->n, (const int32_t *const *)p->ids, p->len, &o, on_tokens, on_round, k, finished, st);
}

/* A sink that keeps the tokens of every prompt and streams nothing. */
static int quiet_sink(const sink *k, int32_t n, sink *c) {
  *c = (sink){.a = k->a, .n = n};
  c->out = calloc((size_t)n, sizeof *c->out);
  c->nout = calloc((size_t)n, sizeof *c->nout);
  c->cap = calloc((size_t)n, sizeof *c->cap);
  return c->out && c->nout && c->cap;
}
static void quiet_free(sink *c) {
  for (int32_t q = 0; c->out && q < c->n; q++) free(c->out[q]);
  free(c->out), free(c->nout), free(c->cap);
}

/* --compare: first an untimed run of each kind over a few tokens of every prompt, so that neither timed run
 * pays the process's first calls (page faults, first products, graph captures) for the other. */
static dsp_status warm_up(dsp_target *t, dsp_draft *d, const prompt_set *p, const dsp_generate_options *go,
                          const dsp_spec_options *so, const sink *k) {
  sink c;
  dsp_generate_options w = *go;
  w.max_new = go->max_new < 16 ? go->max_new : 16;
  dsp_generate_stats st;
  dsp_status s = quiet_sink(k, p->n, &c) ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "out of memory");
  if (s == DSP_OK) s = run_all(t, d, p, &w, so, &c, NULL, &st);
  for (int32_t q = 0; s == DSP_OK && q < p->n; q++) c.nout[q] = 0;
  if (s == DSP_OK) s = run_all(t, NULL, p, &w, NULL, &c, NULL, &st);
  quiet_free(&c);
  return s;
}

/* --compare: the prompts decoded plainly on the same target. */
static dsp_status plain_compare(dsp_target *t, const prompt_set *p, const dsp_generate_options *go, int exact,
                                const sink *k, plain_run *pr) {
  sink c;
  dsp_generate_stats st;
  dsp_status s = quiet_sink(k, p->n, &c) ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "out of memory");
  if (s == DSP_OK) s = run_all(t, NULL, p, go, NULL, &c, NULL, &st);
  if (s == DSP_OK) {
    pr->done = 1;
    pr->ms = st.prefill_ms + st.decode_ms;
    pr->tok_per_s = decode_rate(&st, p->n);
    pr->same = go->temperature >= 1e-5f && !exact ? -1 : 1;
    for (int32_t q = 0; pr->same == 1 && q < p->n; q++)
      pr->same = c.nout[q] == k->nout[q] && !memcmp(c.out[q], k->out[q], (size_t)c.nout[q] * 4);
  }
  quiet_free(&c);
  return s;
}

static dsp_status run_generate(const gen_args *a, dsp_comm *comm) {
  const int rank = dsp_comm_rank(comm);
  dsp_tokenizer *tk = NULL;
  prompt_set p = {0};
  dsp_backend *be = NULL;
  dsp_target *t = NULL;
  dsp_draft *d = NULL;
  dsp_draft_info di = {0};
  plain_run pr = {0};
  sink k = {.a = a, .rank = rank};
  int32_t *finished = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/tokenizer.json", a->model);
  dsp_status s = DSP_OK;
  /* the tokenizer is needed for text in or out; ids alone run without it */
  if (a->prompt || access(path, F_OK) == 0) s = dsp_tokenizer_load(path, &tk);
  if (s == DSP_OK && !tk && !a->ids && !a->json)
    s = dsp_fail(DSP_ERR_ARG, "%s has no tokenizer.json: print ids with --ids or --json", a->model);
  if (s == DSP_OK) s = load_prompts(a, tk, &p);
  if (s == DSP_OK && a->draft) s = dsp_draft_read_info(a->draft, &di);
  if (s == DSP_OK && a->draft && a->gamma > di.block_size)
    s = dsp_fail(DSP_ERR_RANGE, "--gamma %lld is above the draft's block_size %lld", (long long)a->gamma,
                 (long long)di.block_size);
  s = dsp_comm_agree(comm, s);
  const int64_t G = a->gamma > 0 ? a->gamma : di.block_size;
  int64_t need = 0, total = 0;
  for (int32_t q = 0; s == DSP_OK && q < p.n; q++) {
    need = p.len[q] + a->max_new > need ? p.len[q] + a->max_new : need;
    total += p.len[q];
  }
  if (s == DSP_OK) s = dsp_tool_backend_create(&a->backend, comm, &be);
  /* the running batch: --max-batch, else every prompt as far as the Markov head on this backend takes */
  int32_t W = a->max_batch ? (int32_t)a->max_batch : p.n;
  if (!a->max_batch && a->draft && be && W > dsp_markov_max_batch(be)) W = dsp_markov_max_batch(be);
  if (W > p.n) W = p.n;
  if (s == DSP_OK) {
    dsp_target_options o = {.max_seqs = W, .max_len = (int32_t)(need - 1),
                            .max_tokens = (int32_t)(total < a->max_tokens ? (total > p.n ? total : p.n) : a->max_tokens)};
    if (o.max_tokens < W) o.max_tokens = W; /* one decode step of every sequence */
    if (a->draft) { /* verifications: gamma + 1 new positions of every sequence; the draft's taps */
      o.max_len = (int32_t)(need + G + 1);
      if (o.max_tokens < W * (G + 1)) o.max_tokens = (int32_t)(W * (G + 1));
      o.taps = di.taps;
      o.ntaps = di.ntaps;
    }
    s = dsp_target_load(be, a->model, &o, &t);
    if (s == DSP_OK && a->draft) {
      dsp_draft_options dop = {.max_seqs = W, .max_len = (int32_t)(need + di.block_size + 1),
                               .max_ctx = dsp_target_info_of(t)->max_tokens, .gamma = (int32_t)(a->gamma > 0 ? a->gamma : 0),
                               .block_gamma = a->block_gamma};
      s = dsp_draft_load(be, a->draft, t, &dop, &d);
    }
  }
  if (s == DSP_OK && tk && dsp_tokenizer_vocab_size(tk) > dsp_target_info_of(t)->vocab)
    s = dsp_fail(DSP_ERR_FORMAT, "tokenizer.json has %lld tokens, more than the model's vocabulary %lld",
                 (long long)dsp_tokenizer_vocab_size(tk), (long long)dsp_target_info_of(t)->vocab);
  s = dsp_comm_agree(comm, s);
  if (s == DSP_OK && rank == 0 && !dsp_settings_quiet()) {
    fprintf(stderr, "%s\n", dsp_target_report(t));
    if (d) fprintf(stderr, "%s\n", dsp_draft_report(d));
  }
  if (s == DSP_OK) {
    k.tk = tk;
    k.n = p.n;
    k.stream = p.n == 1 && !a->json;
    k.out = calloc((size_t)p.n, sizeof *k.out);
    k.nout = calloc((size_t)p.n, sizeof *k.nout);
    k.cap = calloc((size_t)p.n, sizeof *k.cap);
    finished = calloc((size_t)p.n, sizeof *finished);
    if (a->trace && rank == 0) k.rounds = json_array();
    if (!k.out || !k.nout || !k.cap || !finished) s = dsp_fail(DSP_ERR_NOMEM, "out of memory");
  }
  dsp_generate_stats st = {0};
  if (s == DSP_OK) {
    /* prompt q of a batch draws with seed + q: copies of one prompt sample independently */
    uint64_t *seeds = malloc((size_t)p.n * 8);
    for (int32_t q = 0; seeds && q < p.n; q++) seeds[q] = (uint64_t)a->seed + (uint64_t)q;
    dsp_generate_options go = {.max_new = (int32_t)a->max_new, .temperature = a->temperature,
                               .seed = (uint64_t)a->seed, .seeds = seeds, .ignore_eos = a->ignore_eos};
    dsp_spec_options so = {.gen = go, .gamma = (int32_t)a->gamma, .p_min = a->p_min, .verify = a->verify};
    if (a->compare) s = dsp_comm_agree(comm, warm_up(t, d, &p, &go, &so, &k));
    if (s == DSP_OK) s = run_all(t, d, &p, &go, &so, &k, finished, &st);
    if (s == DSP_OK && k.failed) s = dsp_fail(DSP_ERR_NOMEM, "out of memory for the output");
    s = dsp_comm_agree(comm, s);
    if (s == DSP_OK && a->compare) {
      k.stream = 0; /* the plain run streams nothing */
      s = dsp_comm_agree(comm, plain_compare(t, &p, &go, a->verify == DSP_VERIFY_EXACT, &k, &pr));
      k.stream = p.n == 1 && !a->json;
    }
    free(seeds);
  }
  if (s == DSP_OK && rank == 0) {
    if (k.stream) {
      fputc('\n', stdout);
    } else if (a->json) {
      print_json(&k, &p, finished, &st, &pr,
                 !d ? NULL : a->temperature < 1e-5f ? "greedy" : a->verify == DSP_VERIFY_EXACT ? "exact" : "rejection");
    } else {
      for (int32_t q = 0; q < p.n; q++) {
        printf("== %d (%s)\n", q, finished[q] ? "eos" : "length");
        for (int32_t i = 0; i < k.nout[q]; i++) put_token(stdout, &k, k.out[q][i], i == 0);
        fputc('\n', stdout);
      }
    }
    fflush(stdout);
    if (!dsp_settings_quiet()) print_stats(&st, p.n, d != NULL, &pr);
  }
  for (int32_t q = 0; k.out && q < p.n; q++) free(k.out[q]);
  free(k.out), free(k.nout), free(k.cap), free(finished);
  prompts_free(&p);
  json_decref(k.rounds);
  dsp_draft_free(d);
  dsp_target_free(t);
  dsp_backend_free(be);
  dsp_tokenizer_free(tk);
  return s;
}

int dsp_cmd_generate(int argc, char **argv) {
  gen_args a;
  if (parse_gen_args(argc, argv, &a)) {
    gen_usage(stderr);
    return 2;
  }
  if (dsp_tool_settings("dspark generate")) return 2;
  dsp_comm *comm;
  if (dsp_comm_auto_create(&comm) != DSP_OK) {
    fprintf(stderr, "dspark generate: error: %s\n", dsp_error_message());
    return 1;
  }
  dsp_status s = run_generate(&a, comm);
  if (s != DSP_OK && dsp_comm_rank(comm) == 0) fprintf(stderr, "dspark generate: error: %s\n", dsp_error_message());
  dsp_comm_free(comm);
  return s == DSP_OK ? 0 : 1;
}
