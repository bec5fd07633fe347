/* What the dspark subcommands share: option parsing and the backend switch
 * (the CPU head, or the CUDA head when this build has it). */
#ifndef DSP_TOOLS_TOOL_COMMON_H
#define DSP_TOOLS_TOOL_COMMON_H
#include "dspark.h"

typedef struct {
  int cuda;   /* --backend cuda */
  int tp;     /* --tp N: GPUs driven by this one process (CUDA only) */
} dsp_tool_backend;

void dsp_tool_backend_init(dsp_tool_backend *b);
/* 0: consumed (*used = 1 when it took the value), 1: not a backend option, -1: bad value (printed). */
int dsp_tool_backend_option(dsp_tool_backend *b, const char *opt, const char *val, int *used);
int dsp_tool_parse_path(const char *v, dsp_path *p);
int dsp_tool_parse_contract(const char *v, dsp_contract *c);
int dsp_tool_parse_onoff(const char *opt, const char *v, int *out);
int dsp_tool_parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out);

typedef struct dsp_tool_head dsp_tool_head;
/* Weights of TP rank `rank` of `size` (for --tp N, where one process holds every rank's). */
typedef dsp_status (*dsp_tool_weights_fn)(void *ctx, int size, int rank, dsp_head_weights *w);
/* w: this process's rank's weights. With --backend cuda --tp N (N > 1, no mpirun)
 * the head drives N GPUs from N threads and asks `more` for each rank's weights. */
dsp_status dsp_tool_head_create(const dsp_tool_backend *b, const dsp_head_config *cfg, dsp_comm *comm,
                                const dsp_head_weights *w, dsp_tool_weights_fn more, void *ctx,
                                dsp_tool_head **out);
dsp_status dsp_tool_head_propose(dsp_tool_head *h, const dsp_head_inputs *in, dsp_head_outputs *out);
dsp_status dsp_tool_head_set_path(dsp_tool_head *h, dsp_path p);
const char *dsp_tool_head_report(const dsp_tool_head *h);
void dsp_tool_head_free(dsp_tool_head *h);
/* CUDA heads: median ms of the full proposal and of the Markov tail over
 * `replays` graph replays (CUDA events); with --tp N the slowest GPU's. */
dsp_status dsp_tool_head_time(dsp_tool_head *h, int32_t batch, int sampling, int replays, float *full_ms,
                              float *tail_ms);
int dsp_tool_head_is_cuda(const dsp_tool_head *h);
/* The CPU head inside (NULL for other backends). */
dsp_head *dsp_tool_head_cpu(dsp_tool_head *h);
/* OpenMP threads for this process: DSPARK_THREADS, else the host's cores
 * shared equally among the ranks on it. */
void dsp_tool_threads(dsp_comm *c);

#endif
