/* dspark head: one proposal of the Markov head on tensors from safetensors files,
 * alone or under mpirun (TP size = ranks). Every rank reads only its rows of the
 * LM head and W2; rank 0 writes the output once, through a temporary file, so a
 * failure never leaves a partial output. Errors are agreed on by all ranks, so
 * every rank exits non-zero together instead of one hanging in a collective. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmds.h"
#include "dspark.h"
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
          "  Run under `mpirun -np N` for tensor parallelism over N ranks, or give --tp N for N TP ranks\n"
          "  in this one process (N GPUs with cuda; N threads' ranks with cpu).\n");
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

/* Rank 0 alone writes O: check first that it can, so a bad --out fails before
 * the work (the writer itself leaves no partial file either way). */
static dsp_status check_out(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return dsp_fail(DSP_ERR_IO, "--out %s is a directory", path);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  const char *d = dirname(dir);
  if (access(d, W_OK | X_OK) != 0) return dsp_fail(DSP_ERR_IO, "--out %s: cannot write in %s", path, d);
  return DSP_OK;
}

static int any_sampled(const dsp_markov_input_file *in) {
  for (int32_t b = 0; in->temperature && b < in->batch; b++)
    if (in->temperature[b] > 0.0f) return 1;
  return 0;
}

static dsp_status write_output(const head_args *a, const dsp_markov_input_file *in, int64_t *tokens,
                               const dsp_tensor *logits) {
  dsp_st_writer *w;
  dsp_status s = dsp_st_writer_create(a->out, &w);
  if (s != DSP_OK) return s;
  dsp_tensor t = dsp_tensor_2d(tokens, DSP_I64, in->batch, in->gamma);
  s = dsp_st_writer_add(w, "tokens", &t);
  if (s == DSP_OK && logits) s = dsp_st_writer_add(w, "corrected_logits", logits);
  if (s != DSP_OK) {
    dsp_st_writer_abort(w);
    return s;
  }
  return dsp_st_writer_finish(w);
}

typedef struct {
  dsp_st_file *f;
  dsp_markov_config cfg;
  int need_full;
} file_ctx;

/* TP rank `rank`'s views into the one mapped file. */
static dsp_status file_weights(void *ctx, int32_t size, int32_t rank, dsp_markov_weights *w) {
  file_ctx *c = ctx;
  dsp_markov_config cfg = c->cfg;
  dsp_status s = dsp_markov_weights_from_file(c->f, size, rank, c->need_full, &cfg, w);
  w->has_w2_full = s == DSP_OK && c->need_full;
  return s;
}

/* Everything after the communicator exists; each stage is agreed on by all ranks. */
static dsp_status run_head(const head_args *a, dsp_comm *comm) {
  const int rank = dsp_comm_rank(comm);
  dsp_markov_config cfg = {.path = a->path, .contract = a->contract, .broadcast = a->broadcast};
  dsp_markov_weights w;
  dsp_st_file *wf = NULL;
  dsp_markov_input_file in = {0};
  dsp_backend *be = NULL;
  dsp_markov_head *head = NULL;
  int64_t *tokens = NULL;
  void *logit_buf = NULL;

  dsp_status s = dsp_comm_agree(comm, rank == 0 ? check_out(a->out) : DSP_OK);
  if (s == DSP_OK) s = dsp_tool_backend_create(&a->backend, comm, &be);
  if (s == DSP_OK) {
    s = dsp_st_open(a->weights, &wf);
    /* the file's sizes (cfg) from this rank's views */
    if (s == DSP_OK) s = dsp_markov_weights_from_file(wf, dsp_backend_tp_size(be), dsp_backend_tp_rank0(be), 0, &cfg, &w);
    s = dsp_comm_agree(comm, s);
  }
  if (s == DSP_OK) s = dsp_comm_agree(comm, dsp_markov_inputs_load(a->inputs, &cfg, &in));
  if (s == DSP_OK) {
    cfg.gamma = in.gamma;
    cfg.max_batch = in.batch;
    /* Only the original and replicated paths (or a fallback to original) need all of W2. */
    const int sharded = a->path == DSP_PATH_AUTO || a->path == DSP_PATH_SHARDED;
    file_ctx fc = {.f = wf, .cfg = cfg, .need_full = !sharded || dsp_backend_tp_size(be) > cfg.vocab};
    s = dsp_markov_head_create(be, &cfg, file_weights, &fc, &head);
  }
  if (s == DSP_OK && rank == 0 && !dsp_settings_quiet()) fprintf(stderr, "%s\n", dsp_markov_head_report(head));
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
    dsp_markov_inputs hin = dsp_markov_input_file_view(&in);
    dsp_markov_outputs hout = {.tokens = tokens, .logits = want_logits ? &logits : NULL};
    s = dsp_comm_agree(comm, dsp_markov_head_propose(head, &hin, &hout));
  }
  if (s == DSP_OK) {
    dsp_status ws = rank == 0 ? write_output(a, &in, tokens, want_logits ? &logits : NULL) : DSP_OK;
    s = dsp_comm_agree(comm, ws);
  }
  free(tokens);
  free(logit_buf);
  dsp_markov_head_free(head);
  dsp_markov_input_file_free(&in);
  dsp_st_close(wf);
  dsp_backend_free(be);
  return s;
}

int dsp_cmd_head(int argc, char **argv) {
  head_args a;
  if (parse_head_args(argc, argv, &a)) {
    head_usage(stderr);
    return 2;
  }
  if (dsp_tool_settings("dspark head")) return 2;
  dsp_comm *comm;
  if (dsp_comm_auto_create(&comm) != DSP_OK) {
    fprintf(stderr, "dspark head: error: %s\n", dsp_error_message());
    return 1;
  }
  dsp_status s = run_head(&a, comm);
  if (s != DSP_OK && dsp_comm_rank(comm) == 0) fprintf(stderr, "dspark head: error: %s\n", dsp_error_message());
  dsp_comm_free(comm);
  return s == DSP_OK ? 0 : 1;
}
