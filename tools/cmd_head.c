/* dspark head: one proposal of the Markov head on tensors from safetensors files,
 * alone or under mpirun (TP size = ranks). Every rank reads only its rows of the
 * LM head and W2; rank 0 writes the output once, through a temporary file, so a
 * failure never leaves a partial output. Errors are agreed on by all ranks, so
 * every rank exits non-zero together instead of one hanging in a collective. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "comm/comm_auto.h"
#include "core/env.h"
#include "io/safetensors.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/head_load.h"
#include "tool_common.h"

typedef struct {
  const char *weights, *inputs, *out;
  dsp_path path;
  dsp_contract contract;
  int broadcast, dump;
  dsp_tool_backend backend;
} head_args;

static void head_usage(FILE *f) {
  fprintf(f,
          "usage: dspark head --weights W.safetensors --inputs I.safetensors --out O.safetensors\n"
          "                   [--path auto|original|sharded|replicated] [--contract bf16|fp32-add]\n"
          "                   [--broadcast on|off] [--dump-logits] [--backend cpu|cuda [--tp N]]\n"
          "  W: lm_head.weight [Vp,H] BF16, markov_w1.weight [Vp,R] BF16, markov_w2.weight [Vp,R] BF16,\n"
          "     optional __metadata__ vocab_size = V\n"
          "  I: hidden [B,gamma,H] BF16, anchor [B] I64; optional temperature [B] F32, seed [B] I64, position [B] I64\n"
          "  O: tokens [B,gamma] I64; corrected_logits [B,gamma,V] when a row samples or with --dump-logits\n"
          "  Run under `mpirun -np N` for tensor parallelism over N ranks.\n");
}

static int parse_head_args(int argc, char **argv, head_args *a) {
  *a = (head_args){.path = DSP_PATH_AUTO, .contract = DSP_CONTRACT_BF16, .broadcast = 1};
  dsp_tool_backend_init(&a->backend);
  int br;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 1;
    if (!strcmp(o, "--weights") && v) a->weights = v;
    else if (!strcmp(o, "--inputs") && v) a->inputs = v;
    else if (!strcmp(o, "--out") && v) a->out = v;
    else if (!strcmp(o, "--path") && v) { if (dsp_tool_parse_path(v, &a->path)) return -1; }
    else if (!strcmp(o, "--contract") && v) { if (dsp_tool_parse_contract(v, &a->contract)) return -1; }
    else if (!strcmp(o, "--broadcast") && v) { if (dsp_tool_parse_onoff("--broadcast", v, &a->broadcast)) return -1; }
    else if (!strcmp(o, "--dump-logits")) { a->dump = 1; used = 0; }
    else if ((used = 0, br = dsp_tool_backend_option(&a->backend, o, v, &used)) != 1) { if (br < 0) return -1; }
    else if (!strcmp(o, "-h") || !strcmp(o, "--help")) { head_usage(stdout); exit(0); }
    else {
      fprintf(stderr, "dspark head: unknown or incomplete option '%s'\n", o);
      return -1;
    }
    i += used;
  }
  if (!a->weights || !a->inputs || !a->out) {
    fprintf(stderr, "dspark head: --weights, --inputs and --out are required\n");
    return -1;
  }
  return 0;
}

static int any_sampled(const dsp_head_input_file *in) {
  for (int32_t b = 0; in->temperature && b < in->batch; b++)
    if (in->temperature[b] > 0.0f) return 1;
  return 0;
}

static dsp_status write_output(const head_args *a, const dsp_head_input_file *in, int64_t *tokens,
                               const dsp_tensor *logits) {
  dsp_st_writer *w;
  DSP_TRY(dsp_st_writer_create(a->out, &w));
  dsp_tensor t = dsp_tensor_2d(tokens, DSP_I64, in->batch, in->gamma);
  dsp_status s = dsp_st_writer_add(w, "tokens", &t);
  if (s == DSP_OK && logits) s = dsp_st_writer_add(w, "corrected_logits", logits);
  if (s != DSP_OK) {
    dsp_st_writer_abort(w);
    return s;
  }
  return dsp_st_writer_finish(w);
}

typedef struct {
  dsp_st_file *f;
  dsp_head_config cfg;
  int need_full;
} file_ctx;

/* --tp N: rank i's views into the one mapped file. */
static dsp_status file_weights(void *ctx, int size, int rank, dsp_head_weights *w) {
  file_ctx *c = ctx;
  DSP_TRY(dsp_head_weights_from_file(c->f, size, rank, 1, &c->cfg, w));
  w->has_w2_full = c->need_full;
  return DSP_OK;
}

/* Everything after the communicator exists; each stage is agreed on by all ranks. */
static dsp_status run_head(const head_args *a, dsp_comm *comm) {
  int rank = dsp_comm_rank(comm), size = dsp_comm_size(comm);
  dsp_head_config cfg = {.path = a->path, .contract = a->contract, .broadcast = a->broadcast};
  dsp_head_weights w;
  dsp_st_file *wf = NULL;
  dsp_head_input_file in = {0};
  dsp_tool_head *head = NULL;
  int64_t *tokens = NULL;
  void *logit_buf = NULL;

  dsp_status s = dsp_head_load_weights(a->weights, size, rank, 1, &cfg, &w, &wf);
  s = dsp_comm_agree(comm, s);
  if (s == DSP_OK) s = dsp_comm_agree(comm, dsp_head_load_inputs(a->inputs, &cfg, &in));
  if (s == DSP_OK) {
    cfg.gamma = in.gamma;
    cfg.max_batch = in.batch;
    /* Only the original and replicated paths (or a fallback to original) need all of W2. */
    int sharded = a->path == DSP_PATH_AUTO || a->path == DSP_PATH_SHARDED;
    int tp = size * a->backend.tp;
    w.has_w2_full = !sharded || tp > cfg.vocab;
    file_ctx fc = {.f = wf, .cfg = cfg, .need_full = w.has_w2_full};
    s = dsp_comm_agree(comm, dsp_tool_head_create(&a->backend, &cfg, comm, &w, file_weights, &fc, &head));
  }
  if (s == DSP_OK && rank == 0 && !dsp_env_get()->quiet) fprintf(stderr, "%s\n", dsp_tool_head_report(head));
  int want_logits = s == DSP_OK && (a->dump || any_sampled(&in));
  size_t n = s == DSP_OK ? (size_t)in.batch * (size_t)in.gamma : 0;
  size_t ls = a->contract == DSP_CONTRACT_FP32_ADD ? 4 : 2;
  dsp_tensor logits = {0};
  if (s == DSP_OK) {
    tokens = malloc(n * sizeof *tokens);
    logit_buf = want_logits ? malloc(n * (size_t)cfg.vocab * ls) : NULL;
    if (!tokens || (want_logits && !logit_buf)) s = dsp_fail(DSP_ERR_NOMEM, "out of memory for the outputs");
    s = dsp_comm_agree(comm, s);
  }
  if (s == DSP_OK) {
    int64_t sh[3] = {in.batch, in.gamma, cfg.vocab};
    logits = dsp_tensor_view(logit_buf, a->contract == DSP_CONTRACT_FP32_ADD ? DSP_F32 : DSP_BF16, 3, sh);
    dsp_head_inputs hin = dsp_head_input_file_view(&in);
    dsp_head_outputs hout = {.tokens = tokens, .logits = want_logits ? &logits : NULL};
    s = dsp_comm_agree(comm, dsp_tool_head_propose(head, &hin, &hout));
  }
  if (s == DSP_OK) {
    dsp_status ws = rank == 0 ? write_output(a, &in, tokens, want_logits ? &logits : NULL) : DSP_OK;
    s = dsp_comm_agree(comm, ws);
  }
  free(tokens);
  free(logit_buf);
  dsp_tool_head_free(head);
  dsp_head_input_file_free(&in);
  dsp_st_close(wf);
  return s;
}

int dsp_cmd_head(int argc, char **argv) {
  head_args a;
  if (parse_head_args(argc, argv, &a)) {
    head_usage(stderr);
    return 2;
  }
  dsp_comm *comm;
  if (dsp_comm_create_auto(&comm) != DSP_OK) {
    fprintf(stderr, "dspark head: error: %s\n", dsp_error_message());
    return 1;
  }
  dsp_tool_threads(comm);
  dsp_status s = run_head(&a, comm);
  if (s != DSP_OK && dsp_comm_rank(comm) == 0)
    fprintf(stderr, "dspark head: error: %s\n", dsp_error_message());
  dsp_comm_free(comm);
  return s == DSP_OK ? 0 : 1;
}
