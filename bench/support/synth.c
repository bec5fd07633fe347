#include "support/synth.h"

#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/philox.h"
#include "core/status.h"
#include "core/tensor.h"

void dsp_synth_fill(dsp_bf16 *dst, int64_t rows, int64_t cols, int64_t row0, uint64_t seed, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    uint64_t g = (uint64_t)(row0 + r);
    for (int64_t c = 0; c < cols; c += 4) {
      dsp_philox4 ctr = {{(uint32_t)c, (uint32_t)g, (uint32_t)(g >> 32), 0x5eed}};
      dsp_philox4 x = dsp_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
      for (int j = 0; j < 4 && c + j < cols; j++) {
        float u = (float)(x.v[j] >> 8) * (1.0f / 16777216.0f); /* [0, 1) */
        dst[r * cols + c + j] = dsp_f32_to_bf16((2.0f * u - 1.0f) * scale);
      }
    }
  }
}

dsp_status dsp_synth_weights_create(const dsp_markov_config *cfg, int size, int rank, int full, uint64_t seed,
                                    dsp_synth_weights *out) {
  memset(out, 0, sizeof *out);
  int64_t row0, vr, real, vp = cfg->vocab_padded, H = cfg->hidden, R = cfg->rank;
  dsp_markov_rows(vp, size, rank, &row0, &vr, &real);
  out->lm = malloc((size_t)(real ? real : 1) * (size_t)H * 2);
  out->w1 = malloc((size_t)vp * (size_t)R * 2);
  out->w2 = malloc((size_t)(full ? vp : (real ? real : 1)) * (size_t)R * 2);
  if (!out->lm || !out->w1 || !out->w2) {
    dsp_synth_weights_free(out);
    return dsp_fail(DSP_ERR_NOMEM, "synthetic weights: out of memory");
  }
  /* scales keep logits O(1): hidden ~ U(-1,1), lm ~ U(-1,1)/sqrt(H) */
  float s_lm = 1.7f / __builtin_sqrtf((float)H), s_w2 = 1.7f / __builtin_sqrtf((float)R);
  dsp_synth_fill(out->lm, real, H, row0, seed ^ 0x11, s_lm);
  dsp_synth_fill(out->w1, vp, R, 0, seed ^ 0x22, 1.0f);
  if (full) dsp_synth_fill(out->w2, vp, R, 0, seed ^ 0x33, s_w2);
  else dsp_synth_fill(out->w2, real, R, row0, seed ^ 0x33, s_w2);
  dsp_markov_weights *w = &out->w;
  w->lm_local = dsp_tensor_2d(out->lm, DSP_BF16, real, H);
  w->w1 = dsp_tensor_2d(out->w1, DSP_BF16, vp, R);
  if (full) {
    w->w2_full = dsp_tensor_2d(out->w2, DSP_BF16, vp, R);
    w->has_w2_full = 1;
    w->w2_local = dsp_tensor_rows(&w->w2_full, real ? row0 : 0, real ? row0 + real : 0);
  } else {
    w->w2_local = dsp_tensor_2d(out->w2, DSP_BF16, real, R);
  }
  return DSP_OK;
}

void dsp_synth_weights_free(dsp_synth_weights *s) {
  free(s->lm);
  free(s->w1);
  free(s->w2);
  memset(s, 0, sizeof *s);
}
