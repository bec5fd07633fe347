/* The chunked form's per-task work built for AVX-512 (kda_chunked_avx512.c):
 * the bits of the baseline build (kda_chunked_body.h). */
#ifndef DSP_KERNELS_CPU_KDA_CHUNKED_AVX512_H
#define DSP_KERNELS_CPU_KDA_CHUNKED_AVX512_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kda.h"

void dsp_kda_chunk_task_avx512(const dsp_kda_dims *d, int32_t bv, float scale, int32_t raw, const dsp_kda_seqs *s,
                               const dsp_kda_io *io, dsp_kda_state *st, char *base, size_t per, int thread,
                               int64_t task);

#endif
