/* KDA beta = sigmoid(b_proj(x)), one fp32 per token and value head, read from a
 * strided bf16 view (a column block of a merged projection) and stored
 * contiguous [T][HV] in one pass. fp32: 1 / (1 + expf(-b)). */
#include <math.h>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/kda.h"

dsp_status dsp_kda_beta(int64_t T, int32_t HV, const dsp_bf16 *b, int64_t b_tok, int64_t b_head,
                        float *beta) {
  if (!beta || (T > 0 && !b)) return dsp_fail(DSP_ERR_ARG, "kda beta: NULL argument");
  if (T < 0 || HV <= 0) return dsp_fail(DSP_ERR_SHAPE, "kda beta: T %lld, HV %d", (long long)T, (int)HV);
#pragma omp parallel for schedule(static) if (T * HV >= 65536)
  for (int64_t t = 0; t < T; t++)
    for (int32_t h = 0; h < HV; h++)
      beta[t * HV + h] = 1.0f / (1.0f + dsp_cpu_expf(-dsp_bf16_to_f32(b[t * b_tok + h * b_head])));
  return DSP_OK;
}
