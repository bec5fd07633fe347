/* KDA output norm: RMSNorm of each (token, value head) row of V values with one
 * weight [V] shared by all heads, times sigmoid of the output gate z (fla's
 * FusedRMSNormGated, activation "sigmoid"). Row by row, fp32:
 * ss = sum x^2 (d ascending), r = 1 / sqrtf(ss / V + eps),
 * y = bf16(((x * r) * w) * (1 / (1 + expf(-z)))). The order does not depend on
 * the strides, so a strided view gives the bits of its contiguous copy. */
#include <math.h>

#include "core/bf16.h"
#include "core/status.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/kda.h"

dsp_status dsp_kda_gated_rmsnorm(int64_t T, int32_t HV, int32_t V, dsp_kda_in_bf16 x,
                                 dsp_kda_in_bf16 z, const float *weight, float eps,
                                 dsp_kda_out_bf16 y) {
  if (!weight || (T > 0 && (!x.data || !z.data || !y.data))) return dsp_fail(DSP_ERR_ARG, "kda norm: NULL argument");
  if (T < 0 || HV <= 0 || V <= 0) return dsp_fail(DSP_ERR_SHAPE, "kda norm: T %lld, HV %d, V %d", (long long)T, (int)HV, (int)V);
  if (!(eps >= 0.0f) || !isfinite(eps)) return dsp_fail(DSP_ERR_ARG, "kda norm: eps %g", (double)eps);
  const int64_t rows = T * HV;
#pragma omp parallel for schedule(static) if (rows * V >= 65536)
  for (int64_t i = 0; i < rows; i++) {
    const int64_t t = i / HV, h = i % HV;
    const dsp_bf16 *xr = x.data + t * x.tok + h * x.head;
    const dsp_bf16 *zr = z.data + t * z.tok + h * z.head;
    dsp_bf16 *yr = y.data + t * y.tok + h * y.head;
    float ss = 0.0f;
    for (int32_t d = 0; d < V; d++) {
      float v = dsp_bf16_to_f32(xr[d]);
      ss += v * v;
    }
    const float r = 1.0f / sqrtf(ss / (float)V + eps);
    /* Element d is read before it is written: y may be x itself. */
    for (int32_t d = 0; d < V; d++) {
      float s = 1.0f / (1.0f + dsp_cpu_expf(-dsp_bf16_to_f32(zr[d])));
      yr[d] = dsp_f32_to_bf16(((dsp_bf16_to_f32(xr[d]) * r) * weight[d]) * s);
    }
  }
  return DSP_OK;
}
