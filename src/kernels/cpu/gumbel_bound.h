/* Upper bounds of contract 5's noise from Philox's first word alone, so that
 * a selection can skip the two logs of ids that cannot win (the noise rises
 * with the word: core/philox.h). */
#ifndef DSP_KERNELS_CPU_GUMBEL_BOUND_H
#define DSP_KERNELS_CPU_GUMBEL_BOUND_H
#include <stdint.h>

/* A float G with dsp_gumbel_of_word(u) <= G for every word u <= w; within
 * 1/4 of the noise of w, never above DSP_GUMBEL_HI. Thread-safe; the first
 * call builds a table of about 200 words (a fraction of a millisecond). */
float dsp_gumbel_bound(uint32_t w);

#endif
