/* Internals of the CPU attention (attention.c) shared with its per-ISA
 * pieces: one work item (a run of rows of one slot at one kv head) and the
 * AVX2 forms of its q.k and p.v. */
#ifndef DSP_KERNELS_CPU_ATTENTION_IMPL_H
#define DSP_KERNELS_CPU_ATTENTION_IMPL_H
#include <stdint.h>

#include "dspark.h"

typedef struct {
  const dsp_bf16 *kb, *vb; /* the slot's cache at kv head g */
  int64_t nk, D, rep, kst; /* keys, head dim, heads per kv head, elements per cache row */
  int64_t nq, es;          /* q vectors in qf (scores), floats from one q vector's scores to the next */
  float *qf, *e, *acc;     /* scratch */
} dsp_cpu_attn_item;

/* The AVX2 forms, for D % 16 == 0 and D <= 256: the scalar path's chains (one
 * per score in order over d, one per output in key order), 8 lanes at a time.
 * scores: all nq q vectors against keys 0 .. nk - 1 into e. pv: q vectors
 * v0 .. v0 + nq - 1 over keys [j0, j1) into acc (j0 > 0: continuing). */
void dsp_cpu_attn_scores_avx2(const dsp_cpu_attn_item *it);
/* The softmax of the run's nr rows x rep heads (vector r * rep + h holds row r's row_nk[r] scores), in place. */
void dsp_cpu_attn_softmax_avx2(const dsp_cpu_attn_item *it, int64_t nr, const int64_t *row_nk, float scale);
void dsp_cpu_attn_pv_avx2(const dsp_cpu_attn_item *it, int64_t v0, int64_t nq, int64_t j0, int64_t j1);

#endif
