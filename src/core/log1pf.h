/* log1p for floats, dspark's own, on the host and the device alike (the KDA
 * gate's softplus): evaluated in double and rounded once, with every
 * multiply-add an explicit fma, so a C compiler (no contraction in ISO C) and
 * nvcc (which would contract a * b + c) perform the same IEEE operations and
 * get the same bits (NaN payloads aside). Accuracy: the double result is within about 2^-50 of
 * log1p, so the float is correctly rounded unless log1p lies that close to a
 * rounding boundary (test_cpu_expf counts). Method: |y| < 2^-10 a Taylor
 * series; otherwise s = 1 + y (exact for |y| in [2^-30, 2^30], else within
 * 2^-53), s = 2^e m with m in [sqrt(1/2), sqrt(2)), and
 * log m = 2 atanh(f), f = (m - 1) / (m + 1), |f| < 0.172, by its odd series to
 * f^21. */
#ifndef DSP_CORE_LOG1PF_H
#define DSP_CORE_LOG1PF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/select.h" /* DSP_HD */

DSP_HD float dsp_log1pf(float y) {
  if (isnan(y)) return y + y;
  if (y == INFINITY) return y;
  if (y <= -1.0f) return y == -1.0f ? -INFINITY : NAN;
  const double x = (double)y;
  if (fabs(x) < 0x1p-10) { /* x (1 - x/2 + x^2/3 - x^3/4): the next term is below 2^-42 of x */
    double p = fma(x, -0.25, 1.0 / 3.0);
    p = fma(x, p, -0.5);
    p = fma(x, p, 1.0);
    return (float)(x * p);
  }
  const double s = 1.0 + x;
  uint64_t b;
  memcpy(&b, &s, 8);
  int e = (int)((b >> 52) & 0x7ff) - 1023; /* s is normal: s > 2^-10 here or 1 + y with y > -1 + 2^-24 */
  b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m;
  memcpy(&m, &b, 8);
  if (m > 0x1.6a09e667f3bcdp+0) m *= 0.5, e += 1; /* m in [sqrt(1/2), sqrt(2)) */
  const double f = (m - 1.0) / (m + 1.0), f2 = f * f;
  /* q = 1/3 + f2/5 + ... + f2^9/21; log m = 2f + 2f f2 q */
  double q = 1.0 / 21.0;
  q = fma(f2, q, 1.0 / 19.0);
  q = fma(f2, q, 1.0 / 17.0);
  q = fma(f2, q, 1.0 / 15.0);
  q = fma(f2, q, 1.0 / 13.0);
  q = fma(f2, q, 1.0 / 11.0);
  q = fma(f2, q, 1.0 / 9.0);
  q = fma(f2, q, 1.0 / 7.0);
  q = fma(f2, q, 1.0 / 5.0);
  q = fma(f2, q, 1.0 / 3.0);
  const double t = f + f, u = f2 * q;
  const double lm = fma(t, u, t);
  return (float)fma((double)e, 0x1.62e42fefa39efp-1, lm); /* e ln 2 + log m */
}

#endif
