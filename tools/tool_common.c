#include "tool_common.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/env.h"
#include "core/threads.h"
#include "core/status.h"
#include "core/tensor.h"
#ifdef DSPARK_HAVE_CUDA
#include "kernels/cuda/head_cuda.h"
#endif

void dsp_tool_backend_init(dsp_tool_backend *b) { *b = (dsp_tool_backend){.cuda = 0, .tp = 1}; }

int dsp_tool_parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "dspark: %s wants an integer in [%lld, %lld], got '%s'\n", opt, (long long)lo, (long long)hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

int dsp_tool_backend_option(dsp_tool_backend *b, const char *opt, const char *val, int *used) {
  if (!strcmp(opt, "--backend")) {
    if (!val || (strcmp(val, "cpu") && strcmp(val, "cuda"))) {
      fprintf(stderr, "dspark: --backend wants cpu or cuda\n");
      return -1;
    }
    b->cuda = !strcmp(val, "cuda");
    *used = 1;
    return 0;
  }
  if (!strcmp(opt, "--tp")) {
    int64_t n;
    if (!val || dsp_tool_parse_i64("--tp", val, 1, 64, &n)) return -1;
    b->tp = (int)n;
    *used = 1;
    return 0;
  }
  return 1;
}

int dsp_tool_parse_path(const char *v, dsp_path *p) {
  static const char *names[] = {"auto", "original", "sharded", "replicated"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(v, names[i])) {
      *p = (dsp_path)i;
      return 0;
    }
  fprintf(stderr, "dspark: --path wants auto, original, sharded or replicated, got '%s'\n", v);
  return -1;
}

int dsp_tool_parse_contract(const char *v, dsp_contract *c) {
  if (!strcmp(v, "bf16")) *c = DSP_CONTRACT_BF16;
  else if (!strcmp(v, "fp32-add")) *c = DSP_CONTRACT_FP32_ADD;
  else {
    fprintf(stderr, "dspark: --contract wants bf16 or fp32-add, got '%s'\n", v);
    return -1;
  }
  return 0;
}

int dsp_tool_parse_onoff(const char *opt, const char *v, int *out) {
  if (!strcmp(v, "on")) *out = 1;
  else if (!strcmp(v, "off")) *out = 0;
  else {
    fprintf(stderr, "dspark: %s wants on or off, got '%s'\n", opt, v);
    return -1;
  }
  return 0;
}

struct dsp_tool_head {
  dsp_head *cpu;
#ifdef DSPARK_HAVE_CUDA
  int n;                 /* CUDA heads: 1, or N for --tp N (one thread per GPU) */
  dsp_cuda_head **cuda;
  dsp_comm **group;      /* --tp N: the NCCL group, rank i on device i */
#endif
};

#ifdef DSPARK_HAVE_CUDA
/* One job per GPU thread: the collectives inside each call need every rank
 * of the group running at once. */
typedef struct {
  dsp_tool_head *h;
  int i;
  const dsp_head_config *cfg;
  dsp_head_weights w;
  const dsp_head_inputs *in;
  dsp_head_outputs out;
  int32_t batch;
  int sampling, replays;
  float full, tail;
  dsp_status s;
  char msg[512];
} gpu_job;

static void *gpu_time(void *p) {
  gpu_job *j = p;
  j->s = dsp_cuda_head_time(j->h->cuda[j->i], j->batch, j->sampling, j->replays, &j->full, &j->tail);
  if (j->s != DSP_OK) snprintf(j->msg, sizeof j->msg, "%s", dsp_error_message());
  return NULL;
}

static void *gpu_create(void *p) {
  gpu_job *j = p;
  j->s = dsp_cuda_head_create(j->cfg, j->h->group[j->i], &j->w, j->i, &j->h->cuda[j->i]);
  if (j->s != DSP_OK) snprintf(j->msg, sizeof j->msg, "%s", dsp_error_message());
  return NULL;
}

static void *gpu_propose(void *p) {
  gpu_job *j = p;
  j->s = dsp_cuda_head_propose(j->h->cuda[j->i], j->in, &j->out);
  if (j->s != DSP_OK) snprintf(j->msg, sizeof j->msg, "%s", dsp_error_message());
  return NULL;
}

/* Runs fn on n threads and returns the first failure (its message re-raised here). */
static dsp_status run_gpu_jobs(gpu_job *jobs, int n, void *(*fn)(void *)) {
  pthread_t t[64];
  int started = 0;
  for (; started < n; started++)
    if (pthread_create(&t[started], NULL, fn, &jobs[started])) break;
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  if (started < n) return dsp_fail(DSP_ERR_NOMEM, "cannot start %d GPU threads", n);
  for (int i = 0; i < n; i++)
    if (jobs[i].s != DSP_OK) return dsp_fail(jobs[i].s, "GPU %d: %s", i, jobs[i].msg);
  return DSP_OK;
}

static dsp_status cuda_create(const dsp_tool_backend *b, const dsp_head_config *cfg, dsp_comm *comm,
                              const dsp_head_weights *w, dsp_tool_weights_fn more, void *ctx, dsp_tool_head *h) {
  int ndev = dsp_cuda_device_count();
  if (ndev < 1) return dsp_fail(DSP_ERR_DEVICE, "no CUDA device: --backend cuda needs a GPU");
  h->n = b->tp;
  h->cuda = calloc((size_t)h->n, sizeof *h->cuda);
  if (!h->cuda) return dsp_fail(DSP_ERR_NOMEM, "out of memory");
  if (h->n == 1) {
    /* one GPU per process; under mpirun ranks on a host take devices round-robin */
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int dev = lr ? atoi(lr) % ndev : 0;
    return dsp_cuda_head_create(cfg, comm, w, dev, &h->cuda[0]);
  }
  if (dsp_comm_size(comm) != 1)
    return dsp_fail(DSP_ERR_ARG, "--tp %d drives %d GPUs from one process; do not also run under mpirun", h->n, h->n);
  if (ndev < h->n) return dsp_fail(DSP_ERR_DEVICE, "--tp %d needs %d GPUs, this machine has %d", h->n, h->n, ndev);
  if (!more) return dsp_fail(DSP_ERR_ARG, "--tp %d: no per-rank weights", h->n);
  int devs[64];
  for (int i = 0; i < h->n; i++) devs[i] = i;
  h->group = calloc((size_t)h->n, sizeof *h->group);
  if (!h->group) return dsp_fail(DSP_ERR_NOMEM, "out of memory");
  DSP_TRY(dsp_comm_nccl_create_group(h->n, devs, h->group));
  gpu_job jobs[64];
  memset(jobs, 0, sizeof jobs);
  for (int i = 0; i < h->n; i++) {
    jobs[i] = (gpu_job){.h = h, .i = i, .cfg = cfg};
    DSP_TRY(more(ctx, h->n, i, &jobs[i].w));
  }
  return run_gpu_jobs(jobs, h->n, gpu_create);
}

static dsp_status cuda_propose(dsp_tool_head *h, const dsp_head_inputs *in, dsp_head_outputs *out) {
  if (h->n == 1) return dsp_cuda_head_propose(h->cuda[0], in, out);
  /* every GPU computes the same tokens; rank 0's go to the caller, the others
   * into scratch and are checked equal (all ranks must pick the same variant,
   * so all of them ask for logits when rank 0 does) */
  size_t nt = (size_t)in->batch * (size_t)in->hidden->shape[1];
  size_t nl = out->logits ? (size_t)dsp_tensor_numel(out->logits) * dsp_dtype_size(out->logits->dtype) : 0;
  gpu_job jobs[64];
  memset(jobs, 0, sizeof jobs);
  int64_t *tok = calloc(nt * (size_t)h->n, sizeof *tok);
  char *lg = nl ? malloc(nl * (size_t)h->n) : NULL;
  dsp_tensor lv[64];
  dsp_status s = tok && (!nl || lg) ? DSP_OK : dsp_fail(DSP_ERR_NOMEM, "out of memory");
  for (int i = 0; i < h->n && s == DSP_OK; i++) {
    jobs[i] = (gpu_job){.h = h, .i = i, .in = in, .out = *out};
    if (i == 0) continue;
    jobs[i].out.tokens = tok + nt * (size_t)i;
    if (nl) {
      lv[i] = dsp_tensor_view(lg + nl * (size_t)i, out->logits->dtype, out->logits->ndim, out->logits->shape);
      jobs[i].out.logits = &lv[i];
    }
  }
  if (s == DSP_OK) s = run_gpu_jobs(jobs, h->n, gpu_propose);
  for (int i = 1; i < h->n && s == DSP_OK; i++)
    if (memcmp(out->tokens, tok + nt * (size_t)i, nt * sizeof *tok))
      s = dsp_fail(DSP_ERR_DEVICE, "--tp %d: GPU %d proposed different tokens from GPU 0", h->n, i);
  free(tok);
  free(lg);
  return s;
}
#endif

dsp_status dsp_tool_head_create(const dsp_tool_backend *b, const dsp_head_config *cfg, dsp_comm *comm,
                                const dsp_head_weights *w, dsp_tool_weights_fn more, void *ctx,
                                dsp_tool_head **out) {
  *out = NULL;
  dsp_tool_head *h = calloc(1, sizeof *h);
  if (!h) return dsp_fail(DSP_ERR_NOMEM, "out of memory");
  dsp_status s;
  if (b->cuda) {
#ifdef DSPARK_HAVE_CUDA
    s = cuda_create(b, cfg, comm, w, more, ctx, h);
#else
    (void)more;
    (void)ctx;
    s = dsp_fail(DSP_ERR_UNSUPPORTED, "this dspark was built without the CUDA backend (DSPARK_CUDA=off or no nvcc)");
#endif
  } else {
    s = b->tp == 1 ? dsp_head_create(cfg, comm, w, &h->cpu)
                   : dsp_fail(DSP_ERR_ARG, "--tp applies to --backend cuda; on CPUs run under mpirun -np N");
  }
  if (s != DSP_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dsp_error_message());
    dsp_tool_head_free(h);
    return dsp_fail(s, "%s", msg);
  }
  *out = h;
  return DSP_OK;
}

dsp_status dsp_tool_head_propose(dsp_tool_head *h, const dsp_head_inputs *in, dsp_head_outputs *out) {
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) return cuda_propose(h, in, out);
#endif
  return dsp_head_propose(h->cpu, in, out);
}

dsp_status dsp_tool_head_time(dsp_tool_head *h, int32_t batch, int sampling, int replays, float *full_ms,
                              float *tail_ms) {
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) {
    gpu_job jobs[64];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < h->n; i++)
      jobs[i] = (gpu_job){.h = h, .i = i, .batch = batch, .sampling = sampling, .replays = replays};
    DSP_TRY(h->n == 1 ? (gpu_time(&jobs[0]), jobs[0].s == DSP_OK ? DSP_OK : dsp_fail(jobs[0].s, "%s", jobs[0].msg))
                      : run_gpu_jobs(jobs, h->n, gpu_time));
    *full_ms = *tail_ms = 0;
    for (int i = 0; i < h->n; i++) {
      if (jobs[i].full > *full_ms) *full_ms = jobs[i].full;
      if (jobs[i].tail > *tail_ms) *tail_ms = jobs[i].tail;
    }
    return DSP_OK;
  }
#endif
  (void)h; (void)batch; (void)sampling; (void)replays; (void)full_ms; (void)tail_ms;
  return dsp_fail(DSP_ERR_UNSUPPORTED, "graph-replay timing is for the CUDA head");
}

int dsp_tool_head_is_cuda(const dsp_tool_head *h) {
#ifdef DSPARK_HAVE_CUDA
  return h->cuda != NULL;
#else
  (void)h;
  return 0;
#endif
}

dsp_status dsp_tool_head_set_path(dsp_tool_head *h, dsp_path p) {
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) return dsp_fail(DSP_ERR_UNSUPPORTED, "the CUDA head's path is fixed at creation");
#endif
  return dsp_head_set_path(h->cpu, p);
}

const char *dsp_tool_head_report(const dsp_tool_head *h) {
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) return dsp_cuda_head_report(h->cuda[0]);
#endif
  return dsp_head_report(h->cpu);
}

dsp_head *dsp_tool_head_cpu(dsp_tool_head *h) { return h ? h->cpu : NULL; }

void dsp_tool_head_free(dsp_tool_head *h) {
  if (!h) return;
#ifdef DSPARK_HAVE_CUDA
  for (int i = 0; h->cuda && i < h->n; i++) dsp_cuda_head_free(h->cuda[i]);
  for (int i = 0; h->group && i < h->n; i++) dsp_comm_free(h->group[i]);
  free(h->cuda);
  free(h->group);
#endif
  dsp_head_free(h->cpu);
  free(h);
}

void dsp_tool_threads(dsp_comm *c) {
  (void)c;
  dsp_threads_setup();
}
