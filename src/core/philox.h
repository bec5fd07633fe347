/* Philox4x32-10 (Salmon et al., SC'11) and the Gumbel noise of contract 5.
 * Counter-based: the noise for (seed, draft position, global token id) is a pure
 * function of those three, so it does not depend on sharding, batch row or bucket.
 * Host and device share this header.
 *
 * Keying (normative for dspark): key = {seed lo32, seed hi32};
 * counter = {token id lo32, token id hi32, position lo32, position hi32};
 * u = (word0 + 0.5) / 2^32 in double, strictly inside (0, 1);
 * g = (float)(-log(-log(u))) computed in double, rounded once to fp32. */
#ifndef DSP_CORE_PHILOX_H
#define DSP_CORE_PHILOX_H
#include <math.h>
#include <stdint.h>

#include "core/select.h" /* DSP_HD */

#define DSP_PHILOX_M0 0xD2511F53u
#define DSP_PHILOX_M1 0xCD9E8D57u
#define DSP_PHILOX_W0 0x9E3779B9u
#define DSP_PHILOX_W1 0xBB67AE85u

typedef struct { uint32_t v[4]; } dsp_philox4;

DSP_HD dsp_philox4 dsp_philox4x32_10(dsp_philox4 c, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    if (r) { k0 += DSP_PHILOX_W0; k1 += DSP_PHILOX_W1; }
    uint64_t p0 = (uint64_t)DSP_PHILOX_M0 * c.v[0];
    uint64_t p1 = (uint64_t)DSP_PHILOX_M1 * c.v[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    dsp_philox4 n;
    n.v[0] = hi1 ^ c.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ c.v[3] ^ k1;
    n.v[3] = lo0;
    c = n;
  }
  return c;
}

/* Bounds of the noise over every word: it rises with w, from g(0) = -3.1299
 * to g(2^32 - 1) = 22.874 (test_cpu_gumbel checks both). A selection may skip
 * the noise of ids whose x / T + DSP_GUMBEL_HI falls below the largest
 * x / T + DSP_GUMBEL_LO: they cannot win. */
#define DSP_GUMBEL_LO (-3.25f)
#define DSP_GUMBEL_HI 23.0f

/* The noise from Philox's first word w: u = (w + 0.5) / 2^32, -log(-log(u)). */
DSP_HD float dsp_gumbel_of_word(uint32_t w) {
  double u = ((double)w + 0.5) * (1.0 / 4294967296.0);
  return (float)(-log(-log(u)));
}

/* The Gumbel noise g_v for one (seed, position, token id). */
DSP_HD float dsp_gumbel(uint64_t seed, int64_t position, int64_t id) {
  dsp_philox4 c = {{(uint32_t)(uint64_t)id, (uint32_t)((uint64_t)id >> 32),
                    (uint32_t)(uint64_t)position, (uint32_t)((uint64_t)position >> 32)}};
  dsp_philox4 r = dsp_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  return dsp_gumbel_of_word(r.v[0]);
}

/* Speculative sampling's uniform in (0, 1) for (seed, position, purpose): the
 * counter {purpose, 1, position lo32, position hi32}; the second word 1 keeps
 * it apart from every token id's Gumbel noise (ids < 2^31). */
DSP_HD double dsp_philox_uniform(uint64_t seed, int64_t position, uint32_t purpose) {
  dsp_philox4 c = {{purpose, 1u, (uint32_t)(uint64_t)position, (uint32_t)((uint64_t)position >> 32)}};
  dsp_philox4 r = dsp_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  return ((double)r.v[0] + 0.5) * (1.0 / 4294967296.0);
}

#endif
