#include "tool_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/env.h"
#include "core/threads.h"
#include "core/status.h"
#ifdef DSPARK_HAVE_CUDA
#include "cuda/head_cuda.h"
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
  dsp_cuda_head *cuda;
#endif
};

dsp_status dsp_tool_head_create(const dsp_tool_backend *b, const dsp_head_config *cfg, dsp_comm *comm,
                                const dsp_head_weights *w, dsp_tool_head **out) {
  *out = NULL;
  dsp_tool_head *h = calloc(1, sizeof *h);
  if (!h) return dsp_fail(DSP_ERR_NOMEM, "out of memory");
  dsp_status s;
  if (b->cuda) {
#ifdef DSPARK_HAVE_CUDA
    s = dsp_cuda_head_create(cfg, comm, w, 0, &h->cuda);
#else
    s = dsp_fail(DSP_ERR_UNSUPPORTED, "this dspark was built without the CUDA backend (DSPARK_CUDA=off or no nvcc)");
#endif
  } else {
    s = b->tp == 1 ? dsp_head_create(cfg, comm, w, &h->cpu)
                   : dsp_fail(DSP_ERR_ARG, "--tp applies to --backend cuda; on CPUs run under mpirun -np N");
  }
  if (s != DSP_OK) {
    free(h);
    return s;
  }
  *out = h;
  return DSP_OK;
}

dsp_status dsp_tool_head_propose(dsp_tool_head *h, const dsp_head_inputs *in, dsp_head_outputs *out) {
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) return dsp_cuda_head_propose(h->cuda, in, out);
#endif
  return dsp_head_propose(h->cpu, in, out);
}

dsp_status dsp_tool_head_set_path(dsp_tool_head *h, dsp_path p) {
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) return dsp_fail(DSP_ERR_UNSUPPORTED, "the CUDA head's path is fixed at creation");
#endif
  return dsp_head_set_path(h->cpu, p);
}

const char *dsp_tool_head_report(const dsp_tool_head *h) {
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) return dsp_cuda_head_report(h->cuda);
#endif
  return dsp_head_report(h->cpu);
}

dsp_head *dsp_tool_head_cpu(dsp_tool_head *h) { return h ? h->cpu : NULL; }

void dsp_tool_head_free(dsp_tool_head *h) {
  if (!h) return;
#ifdef DSPARK_HAVE_CUDA
  if (h->cuda) dsp_cuda_head_free(h->cuda);
#endif
  dsp_head_free(h->cpu);
  free(h);
}

void dsp_tool_threads(dsp_comm *c) {
  (void)c;
  dsp_threads_setup();
}
