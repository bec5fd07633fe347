/* The models' element-wise and row-wise layers on the CPU (layers.h). */
#include "kernels/cpu/layers.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/cpu/expf.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/layers_avx2.h"
#include "kernels/cpu/layers_avx512.h"

/* 2: the AVX-512 row kernels, 1: the AVX2 ones, 0: the loops here. */
static inline int vec_level(void) {
  const dsp_cpu_isa isa = dsp_cpu_isa_current();
  return isa == DSP_CPU_ISA_AVX512 ? 2 : isa == DSP_CPU_ISA_AVX2;
}

static inline float ld(const dsp_tensor *t, const dsp_bf16 *row, int64_t c) {
  return dsp_bf16_to_f32(row[c * t->stride[t->ndim - 1]]);
}

/* A view of 2 or 3 dims as rows of its last dim: row r of R = rows * heads. */
static inline int64_t nrows(const dsp_tensor *t) { return t->ndim == 3 ? t->shape[0] * t->shape[1] : t->shape[0]; }
static inline dsp_bf16 *row_ptr(const dsp_tensor *t, int64_t r) {
  int64_t off = t->ndim == 3 ? (r / t->shape[1]) * t->stride[0] + (r % t->shape[1]) * t->stride[1] : r * t->stride[0];
  return (dsp_bf16 *)t->data + off;
}

/* body(ctx, i0, i1) over items [0, n): split over the team when the op is
 * large enough to pay for one, else on this thread without entering the
 * OpenMP runtime at all (a serialized parallel region still costs about half a
 * microsecond, a decode step has dozens of these ops). Items are independent,
 * so the split does not change a bit. The thresholds below: where 2 threads
 * beat one on a 2-core machine, measured alone (bench/RESULTS.md). */
typedef void (*range_fn)(const void *ctx, int64_t i0, int64_t i1);
static void run_items(int64_t n, int parallel, range_fn body, const void *ctx) {
  if (!parallel || n < 2) {
    body(ctx, 0, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    body(ctx, n * id / nt, n * (id + 1) / nt);
  }
}

typedef struct {
  const dsp_tensor *table, *out;
  const int32_t *ids;
} embed_ctx;
static void embed_range(const void *p, int64_t i0, int64_t i1) {
  const embed_ctx *c = p;
  const dsp_tensor *table = c->table, *out = c->out;
  const int64_t H = table->shape[1];
  for (int64_t i = i0; i < i1; i++) {
    const dsp_bf16 *src = (const dsp_bf16 *)table->data + (int64_t)c->ids[i] * table->stride[0];
    dsp_bf16 *dst = (dsp_bf16 *)out->data + i * out->stride[0];
    if (table->stride[1] == 1 && out->stride[1] == 1) memcpy(dst, src, (size_t)H * 2);
    else
      for (int64_t col = 0; col < H; col++) dst[col * out->stride[1]] = src[col * table->stride[1]];
  }
}
void dsp_cpu_embed(const dsp_tensor *table, const int32_t *ids, int64_t t, dsp_tensor *out) {
  const embed_ctx c = {.table = table, .out = out, .ids = ids};
  run_items(t, t * table->shape[1] > 65536, embed_range, &c);
}

DSP_FMA_CLONES static void rmsnorm_rows(const dsp_tensor *x, const dsp_bf16 *w, float eps, dsp_tensor *out, int64_t r0, int64_t r1) {
  const int64_t D = x->shape[x->ndim - 1], os = out->stride[out->ndim - 1];
  for (int64_t r = r0; r < r1; r++) {
    const dsp_bf16 *xr = row_ptr(x, r);
    dsp_bf16 *orow = row_ptr(out, r);
    float ss = 0.0f;
    for (int64_t d = 0; d < D; d++) {
      const float v = ld(x, xr, d);
      ss = fmaf(v, v, ss);
    }
    const float inv = 1.0f / sqrtf(ss / (float)D + eps);
    for (int64_t d = 0; d < D; d++) {
      const float xn = dsp_round_bf16(ld(x, xr, d) * inv);
      orow[d * os] = dsp_f32_to_bf16(dsp_bf16_to_f32(w[d]) * xn);
    }
  }
}

typedef struct {
  const dsp_tensor *x;
  dsp_tensor *out;
  const dsp_bf16 *w;
  float eps;
  int vec;
} norm_ctx;
static void rmsnorm_groups(const void *p, int64_t g0, int64_t g1) {
  const norm_ctx *c = p;
  const int64_t R = nrows(c->x), D = c->x->shape[c->x->ndim - 1];
  for (int64_t gi = g0; gi < g1; gi++) {
    const int64_t r0 = gi * 16, r1 = r0 + 16 < R ? r0 + 16 : R;
    if (!c->vec) {
      rmsnorm_rows(c->x, c->w, c->eps, c->out, r0, r1);
      continue;
    }
    dsp_bf16 *xr[16], *orow[16];
    for (int64_t r = r0; r < r1; r++) xr[r - r0] = row_ptr(c->x, r), orow[r - r0] = row_ptr(c->out, r);
    if (c->vec == 2) dsp_cpu_rmsnorm_avx512(xr, orow, (int)(r1 - r0), D, c->w, c->eps);
    else dsp_cpu_rmsnorm_avx2(xr, orow, (int)(r1 - r0), D, c->w, c->eps);
  }
}

/* Groups of 16 rows: the AVX-512 or AVX2 form where rows are contiguous, else the loop above. */
void dsp_cpu_rmsnorm(const dsp_tensor *x, const dsp_bf16 *w, float eps, dsp_tensor *out) {
  const int64_t R = nrows(x), D = x->shape[x->ndim - 1];
  const norm_ctx c = {.x = x, .out = out, .w = w, .eps = eps,
                      .vec = D >= 2 && x->stride[x->ndim - 1] == 1 && out->stride[out->ndim - 1] == 1 ? vec_level() : 0};
  run_items((R + 15) / 16, R * D > 16384, rmsnorm_groups, &c);
}

typedef struct {
  dsp_tensor *x;
  const int32_t *pos;
  const dsp_bf16 *cos, *sin;
  int64_t half;
  int vec;
} rope_ctx;
static void rope_range(const void *p, int64_t t0, int64_t t1) {
  const rope_ctx *rc = p;
  const dsp_tensor *x = rc->x;
  const int64_t N = x->shape[1], cs = x->stride[2], half = rc->half;
  for (int64_t t = t0; t < t1; t++) {
    const dsp_bf16 *c = rc->cos + (int64_t)rc->pos[t] * half, *s = rc->sin + (int64_t)rc->pos[t] * half;
    for (int64_t n = 0; n < N; n++) {
      dsp_bf16 *row = (dsp_bf16 *)x->data + t * x->stride[0] + n * x->stride[1];
      if (rc->vec) {
        if (rc->vec == 2) dsp_cpu_rope_avx512(row, c, s, half);
        else dsp_cpu_rope_avx2(row, c, s, half);
        continue;
      }
      for (int64_t i = 0; i < half; i++) {
        const float a = dsp_bf16_to_f32(row[i * cs]), b = dsp_bf16_to_f32(row[(i + half) * cs]);
        const float ci = dsp_bf16_to_f32(c[i]), si = dsp_bf16_to_f32(s[i]);
        row[i * cs] = dsp_f32_to_bf16(dsp_round_bf16(a * ci) - dsp_round_bf16(b * si));
        row[(i + half) * cs] = dsp_f32_to_bf16(dsp_round_bf16(b * ci) + dsp_round_bf16(a * si));
      }
    }
  }
}
void dsp_cpu_rope(dsp_tensor *x, const int32_t *pos, const dsp_bf16 *cos, const dsp_bf16 *sin, int64_t half) {
  const int64_t T = x->shape[0], N = x->shape[1];
  const rope_ctx c = {.x = x, .pos = pos, .cos = cos, .sin = sin, .half = half,
                      .vec = x->stride[2] == 1 ? vec_level() : 0};
  run_items(T, T * N * half > 16384, rope_range, &c);
}

typedef struct {
  const dsp_tensor *a, *b, *out;
  int vec;
} pair_ctx; /* an elementwise op of two [M, N] views */
static void add_range(const void *p, int64_t i0, int64_t i1) {
  const pair_ctx *c = p;
  const dsp_tensor *a = c->a, *b = c->b, *out = c->out;
  const int64_t N = a->shape[1];
  for (int64_t i = i0; i < i1; i++) {
    const dsp_bf16 *ar = (const dsp_bf16 *)a->data + i * a->stride[0], *br = (const dsp_bf16 *)b->data + i * b->stride[0];
    dsp_bf16 *o = (dsp_bf16 *)out->data + i * out->stride[0];
    if (c->vec) {
      if (c->vec == 2) dsp_cpu_add_avx512(ar, br, o, N);
      else dsp_cpu_add_avx2(ar, br, o, N);
      continue;
    }
    for (int64_t j = 0; j < N; j++)
      o[j * out->stride[1]] =
          dsp_f32_to_bf16(dsp_bf16_to_f32(ar[j * a->stride[1]]) + dsp_bf16_to_f32(br[j * b->stride[1]]));
  }
}
void dsp_cpu_add(const dsp_tensor *a, const dsp_tensor *b, dsp_tensor *out) {
  const int64_t M = a->shape[0], N = a->shape[1];
  const pair_ctx c = {.a = a, .b = b, .out = out,
                      .vec = a->stride[1] == 1 && b->stride[1] == 1 && out->stride[1] == 1 ? vec_level() : 0};
  run_items(M, M * N > 16384, add_range, &c);
}

static void silu_range(const void *p, int64_t i0, int64_t i1) {
  const pair_ctx *c = p;
  const dsp_tensor *g = c->a, *u = c->b, *out = c->out;
  const int64_t N = g->shape[1];
  for (int64_t i = i0; i < i1; i++) {
    const dsp_bf16 *gr = (const dsp_bf16 *)g->data + i * g->stride[0], *ur = (const dsp_bf16 *)u->data + i * u->stride[0];
    dsp_bf16 *o = (dsp_bf16 *)out->data + i * out->stride[0];
    if (c->vec) {
      if (c->vec == 2) dsp_cpu_silu_mul_avx512(gr, ur, o, N);
      else dsp_cpu_silu_mul_avx2(gr, ur, o, N);
      continue;
    }
    for (int64_t j = 0; j < N; j++) {
      const float x = dsp_bf16_to_f32(gr[j * g->stride[1]]);
      const float s = dsp_round_bf16(x / (1.0f + dsp_cpu_expf(-x)));
      o[j * out->stride[1]] = dsp_f32_to_bf16(s * dsp_bf16_to_f32(ur[j * u->stride[1]]));
    }
  }
}
void dsp_cpu_silu_mul(const dsp_tensor *g, const dsp_tensor *u, dsp_tensor *out) {
  const int64_t M = g->shape[0], N = g->shape[1];
  const pair_ctx c = {.a = g, .b = u, .out = out,
                      .vec = g->stride[1] == 1 && u->stride[1] == 1 && out->stride[1] == 1 ? vec_level() : 0};
  run_items(M, M * N > 4096, silu_range, &c); /* each value an exact expf: the team pays from about 3000 */
}

void dsp_cpu_scatter_rows(const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst) {
  const int64_t T = src->shape[0], W = src->shape[1];
  const size_t es = dsp_dtype_size(src->dtype);
  for (int64_t t = 0; t < T; t++) {
    const char *s = (const char *)src->data + (size_t)(t * src->stride[0]) * es;
    char *d = (char *)dst->data + (size_t)(idx[t] * dst->stride[0]) * es;
    if (src->stride[1] == 1 && dst->stride[1] == 1) memcpy(d, s, (size_t)W * es);
    else
      for (int64_t c = 0; c < W; c++) memcpy(d + (size_t)(c * dst->stride[1]) * es, s + (size_t)(c * src->stride[1]) * es, es);
  }
}

void dsp_cpu_gather_rows(const dsp_tensor *src, const int64_t *idx, dsp_tensor *dst) {
  const int64_t T = dst->shape[0], W = dst->shape[1];
  for (int64_t t = 0; t < T; t++) {
    const dsp_bf16 *s = (const dsp_bf16 *)src->data + idx[t] * src->stride[0];
    dsp_bf16 *d = (dsp_bf16 *)dst->data + t * dst->stride[0];
    for (int64_t c = 0; c < W; c++) d[c * dst->stride[1]] = s[c * src->stride[1]];
  }
}
