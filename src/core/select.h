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

/* The same order as one integer, so the best pair is a plain max (ids < 2^32):
 *   high 32 bits: the value mapped to an order-preserving unsigned integer,
 *                 -0 folded onto +0 and every NaN onto the top (0xFFFFFFFF);
 *   low 32 bits:  ~id, so that among equal values the lower id is larger.
 * Every real pair (even -inf) has a key > 0: 0 means "no candidate". */
DSP_HD uint64_t dsp_select_key(float v, uint32_t id) {
  union {
    float f;
    uint32_t u;
  } c;
  c.f = v;
  uint32_t o;
  if (v != v) {
    o = 0xFFFFFFFFu;
  } else {
    uint32_t u = c.u == 0x80000000u ? 0u : c.u;
    o = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
  return ((uint64_t)o << 32) | (uint64_t)(~id);
}

/* The value and id of a key (NaN as the canonical 0x7FC00000). */
DSP_HD float dsp_select_key_value(uint64_t key) {
  const uint32_t o = (uint32_t)(key >> 32);
  union {
    float f;
    uint32_t u;
  } c;
  c.u = o == 0xFFFFFFFFu ? 0x7FC00000u : (o & 0x80000000u) ? (o ^ 0x80000000u) : ~o;
  return c.f;
}
DSP_HD int64_t dsp_select_key_id(uint64_t key) { return (int64_t)(uint32_t)~(uint32_t)key; }

#endif
