/* The one total order on (value, id) pairs behind greedy selection (contract 4).
 * torch.argmax semantics: NaN beats everything and the first NaN wins; otherwise
 * the larger value wins; equal values (with -0 == +0) go to the lower id. A row of
 * all -inf therefore yields its lowest id, 0. Because it is a total order, the
 * best of per-shard winners is the global winner: sharding is exact.
 * Host and device share this header (DSP_HD marks both). */
#ifndef DSP_CORE_SELECT_H
#define DSP_CORE_SELECT_H
#include <stdint.h>

#ifdef __CUDACC__
#define DSP_HD __host__ __device__ __forceinline__
#else
#define DSP_HD static inline
#endif

typedef struct {
  float value;
  int32_t pad_; /* keeps the pair 16 bytes; always 0 */
  int64_t id;
} dsp_pair;

/* 1 when (av, ai) comes before (bv, bi) in the order above. */
DSP_HD int dsp_pair_better(float av, int64_t ai, float bv, int64_t bi) {
  int an = av != av, bn = bv != bv;
  if (an | bn) return an && (!bn || ai < bi);
  if (av != bv) return av > bv;
  return ai < bi;
}

/* The empty candidate: loses to every real pair (a -inf at the largest id). */
#define DSP_PAIR_NONE_ID INT64_MAX

#endif
