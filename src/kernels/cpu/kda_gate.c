/* KDA forget gate: the log decay g [T][HV][K] (fp32) from the raw f_b_proj
 * output, in exactly one of the two forms (kda.h). The recurrence kernels take
 * g as made here and never apply a gate again. */
#include <math.h>

#include "core/bf16.h"
#include "core/log1pf.h"
#include "core/status.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/kda.h"

/* torch's softplus with beta 1, threshold 20, as fla's naive gate and vLLM use. */
static inline float softplus20(float x) { return x > 20.0f ? x : dsp_log1pf(dsp_cpu_expf(x)); }

dsp_status dsp_kda_gate(int64_t T, int32_t HV, int32_t K, dsp_kda_in_bf16 f, const float *A_log,
                        const float *dt_bias, const dsp_kda_gate_cfg *cfg, float *g) {
  if (!cfg || !g || (T > 0 && !f.data)) return dsp_fail(DSP_ERR_ARG, "kda gate: NULL argument");
  if (T < 0 || HV <= 0 || K <= 0) return dsp_fail(DSP_ERR_SHAPE, "kda gate: T %lld, HV %d, K %d", (long long)T, (int)HV, (int)K);
  const int lb = cfg->form == DSP_KDA_GATE_LOWER_BOUND;
  if (!lb && cfg->form != DSP_KDA_GATE_SOFTPLUS) return dsp_fail(DSP_ERR_ARG, "kda gate: unknown form %d", (int)cfg->form);
  if (lb && !(isfinite(cfg->lower_bound) && cfg->lower_bound < 0.0f))
    return dsp_fail(DSP_ERR_ARG, "kda gate: lower bound %g is not finite and negative", (double)cfg->lower_bound);
  const float bound = cfg->lower_bound;
#pragma omp parallel for schedule(static) if (T * HV * K >= 65536)
  for (int64_t t = 0; t < T; t++)
    for (int32_t h = 0; h < HV; h++) {
      const dsp_bf16 *fr = f.data + t * f.tok + h * f.head;
      const float *bias = dt_bias ? dt_bias + (int64_t)h * K : NULL;
      const float a = A_log ? dsp_cpu_expf(A_log[h]) : 1.0f;
      float *out = g + (t * HV + h) * K;
      for (int32_t d = 0; d < K; d++) {
        float x = dsp_bf16_to_f32(fr[d]);
        if (bias) x += bias[d];
        /* Each form on its own; never the sigmoid of a softplus. */
        out[d] = lb ? bound * (1.0f / (1.0f + dsp_cpu_expf(-(a * x)))) : -(a * softplus20(x));
      }
    }
  return DSP_OK;
}
