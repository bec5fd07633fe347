/* The chunked form for AVX-512: kda_chunked_body.h with the value-column loops
 * 16 lanes wide (separate multiplies and adds, as ISO C keeps them). */
#include "kernels/cpu/kda_chunked_avx512.h"


#define KDA_FN static __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")))
#define KDA_SFX(name) name##_avx512
#include "kernels/cpu/kda_chunked_body.h"

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512"))) void
dsp_kda_chunk_task_avx512(const dsp_kda_dims *d, int32_t bv, float scale, int32_t raw, const dsp_kda_seqs *s,
                          const dsp_kda_io *io, dsp_kda_state *st, char *base, size_t per, int thread, int64_t task) {
  chunk_task_avx512(d, bv, scale, raw, s, io, st, base, per, thread, task);
}
