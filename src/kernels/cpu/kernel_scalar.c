/* The portable path: the chain of kernel.h with C99 fmaf, and the scalar
 * epilogues (also used by the AVX2 path, whose time is in the tile kernel). */
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/cpu/kernel.h"

void dsp_cpu_tile_scalar(const float *ap, int mr, const uint16_t *bp, int64_t kc, float *tile, int load,
                         const void *pf) {
  (void)pf; /* this path is compute-bound */
  float acc[DSP_CPU_MR][DSP_CPU_NR];
  for (int i = 0; i < mr; i++)
    for (int c = 0; c < DSP_CPU_NR; c++) acc[i][c] = load ? tile[i * DSP_CPU_NR + c] : 0.0f;
  for (int64_t kk = 0; kk < kc; kk++) {
    const uint16_t *line = bp + kk * DSP_CPU_NR;
    const float *av = ap + kk * mr;
    for (int c = 0; c < DSP_CPU_NR; c++) {
      float w = dsp_bf16_to_f32(line[dsp_cpu_slot(c)]);
      for (int i = 0; i < mr; i++) acc[i][c] = fmaf(av[i], w, acc[i][c]);
    }
  }
  for (int i = 0; i < mr; i++) memcpy(tile + i * DSP_CPU_NR, acc[i], sizeof acc[i]);
}

void dsp_cpu_store_scalar(const float *tile, int mr, int ncols, void *c0, dsp_dtype dt, int64_t rs, int64_t cs) {
  for (int i = 0; i < mr; i++) {
    const float *t = tile + i * DSP_CPU_NR;
    if (dt == DSP_BF16) {
      dsp_bf16 *row = (dsp_bf16 *)c0 + i * rs;
      for (int c = 0; c < ncols; c++) row[c * cs] = dsp_cpu_out_bf16(t[c]);
    } else {
      float *row = (float *)c0 + i * rs;
      for (int c = 0; c < ncols; c++) row[c * cs] = dsp_cpu_out_f32(t[c]);
    }
  }
}

void dsp_cpu_markov_scalar(const float *tile, int mr, int nvalid, const dsp_cpu_markov_tile *t) {
  for (int i = 0; i < mr; i++) {
    const dsp_bf16 *base = t->base0 + i * t->base_rs;
    float *bv = t->best_v + i * DSP_CPU_NR;
    int32_t *bi = t->best_i + i * DSP_CPU_NR;
    for (int c = 0; c < nvalid; c++) {
      float bias = dsp_bf16_to_f32(dsp_cpu_out_bf16(tile[i * DSP_CPU_NR + c]));
      float s = dsp_bf16_to_f32(base[c * t->base_cs]) + bias;
      float v;
      if (t->fp32_add) {
        v = dsp_cpu_out_f32(s);
        if (t->logit0) ((float *)t->logit0)[i * t->logit_rs + c * t->logit_cs] = v;
      } else {
        uint16_t h = dsp_cpu_out_bf16(s);
        v = dsp_bf16_to_f32(h);
        if (t->logit0) ((dsp_bf16 *)t->logit0)[i * t->logit_rs + c * t->logit_cs] = h;
      }
      /* Columns reach a lane in increasing order: a later one wins only when
       * strictly better (larger, or the first NaN). */
      float o = bv[c];
      if (bi[c] < 0 || (v != v && o == o) || v > o) {
        bv[c] = v;
        bi[c] = t->n0 + c;
      }
    }
  }
}
