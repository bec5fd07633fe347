/* The chunked form for AVX-512: kda_chunked_body.h with the value-column loops
 * 16 lanes wide (separate multiplies and adds, as ISO C keeps them) and expf
 * 16 lanes at a time (expf_avx512.h). */
#include "kernels/cpu/kda_chunked_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/avx512.h"
#include "kernels/cpu/expf_avx512.h"

/* GCC's vectorizer would stop at 256 bits without the preference; clang takes no such attribute */
#ifdef __clang__
#define KDA_TARGET "avx512f,avx512bw,avx512dq,avx512vl"
#else
#define KDA_TARGET "avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512"
#endif
#define KDA_FN static __attribute__((target(KDA_TARGET)))
#define KDA_SFX(name) name##_avx512
/* out[d] = expf(a[d] - b[d]) (b NULL: expf(a[d])), 16 lanes at a time: the scalar dsp_cpu_expf's bits */
DSP_AVX512 static void exp_sub_avx512(float *out, const float *a, const float *b, int32_t n) {
  for (int32_t d = 0; d < n; d += 16) {
    const __mmask16 m = dsp_avx512_lanes(n - d);
    __m512 x = _mm512_maskz_loadu_ps(m, a + d);
    if (b) x = _mm512_sub_ps(x, _mm512_maskz_loadu_ps(m, b + d));
    _mm512_mask_storeu_ps(out + d, m, dsp_avx512_expf(x));
  }
}
/* out[j] += c[r cs] rows[r rs + j], r = 0 .. m-1 in order: 64 columns in four registers across all r */
DSP_AVX512 static void acc_rows_avx512(float *out, const float *c, int64_t cs, const float *rows, int64_t rs, int32_t m,
                                       int32_t n) {
  for (int32_t j0 = 0; j0 < n; j0 += 64) {
    __mmask16 k[4];
    __m512 acc[4];
    for (int w = 0; w < 4; w++) {
      k[w] = dsp_avx512_lanes(n - j0 - 16 * w);
      acc[w] = _mm512_maskz_loadu_ps(k[w], out + j0 + 16 * w);
    }
    for (int32_t r = 0; r < m; r++) {
      const __m512 cr = _mm512_set1_ps(c[r * cs]);
      const float *row = rows + r * rs + j0;
      for (int w = 0; w < 4; w++)
        acc[w] = _mm512_add_ps(acc[w], _mm512_mul_ps(cr, _mm512_maskz_loadu_ps(k[w], row + 16 * w)));
    }
    for (int w = 0; w < 4; w++) _mm512_mask_storeu_ps(out + j0 + 16 * w, k[w], acc[w]);
  }
}
#include "kernels/cpu/kda_chunked_body.h"

__attribute__((target(KDA_TARGET))) void
dsp_kda_chunk_task_avx512(const dsp_kda_dims *d, int32_t bv, float scale, int32_t raw, const dsp_kda_seqs *s,
                          const dsp_kda_io *io, dsp_kda_state *st, char *base, size_t per, int thread, int64_t task) {
  chunk_task_avx512(d, bv, scale, raw, s, io, st, base, per, thread, task);
}
