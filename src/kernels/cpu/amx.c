/* The AMX product driver and tile loop (order and exceptions in amx.h).
 * Per thread: a range of 16-column blocks; per 16-row chunk of A and group of
 * four blocks, four fp32 accumulator tiles (tmm0-3) walk the k blocks in
 * order, A's block in tmm4, the weight's in tmm5/tmm6. Then the outputs whose
 * rows the guard rejects are recomputed with the fmaf chain. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/slices.h"

/* Memory clobbers: the tile loads read buffers this file has just written. */
#define T_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(base)), "r"((long)(stride)) : "memory")
#define T_STORE(t, base, stride) \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void *)(base)), "r"((long)(stride)) : "memory")
#define T_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define T_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_cfg;

static void configure(int mr) {
  tile_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 7; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = (uint8_t)(t < 5 ? mr : 16); /* C0-3 and A: mr rows; B: 16 k pairs */
  }
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}

typedef struct {
  const dsp_tensor *a;
  const dsp_cpu_amx *w;
  dsp_tensor *c;
  dsp_cpu_store_fn store;
  const uint16_t *as; /* A as tiles read it: rows of lda elements, K padded to 32 */
  int64_t lda;
  const int16_t *ga; /* A rows' guards: [slices][M], each over its K slice */
  int fixups;        /* some output may need the chain */
} job;

/* How far ahead of the tiles being read the weight's lines are prefetched into
 * L2. A thread's blocks are one sequential stream; without it a one-row product
 * streamed a DRAM-resident weight 20-40% slower than the chain (which prefetches
 * its next block); 4 to 256 KiB all measured about the same, 8 KiB is two k
 * steps of a group of four blocks. */
#define AMX_PREFETCH_BYTES 8192

/* The tiles of one group of g <= 4 blocks from block j over the rows at m0, k blocks [t0, t1) from +0, stored to
 * buf as two [16][32] halves (the layout the epilogues take); end: the end of the calling thread's blocks (no
 * prefetch past it). */
static void accumulate(const job *jb, int64_t m0, int64_t j, int g, int64_t t0, int64_t t1, float *buf,
                       const char *end) {
  const dsp_cpu_amx *w = jb->w;
  const uint16_t *a = jb->as + m0 * jb->lda;
  const long sa = (long)(jb->lda * 2);
  T_ZERO(0);
  T_ZERO(1);
  T_ZERO(2);
  T_ZERO(3);
  const size_t step = 512; /* the next block's tile at the same t */
  for (int64_t t = t0; t < t1; t++) {
    const uint16_t *b = w->data + dsp_cpu_amx_tile(w, j, t);
    const char *pf = (const char *)b + AMX_PREFETCH_BYTES;
    for (int l = 0; l < 16 * g && pf + 64 * l < end; l++) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
    T_LOAD(4, a + t * 32, sa);
    T_LOAD(5, b, 64);
    T_DP(0, 4, 5);
    if (g > 1) {
      T_LOAD(6, b + step, 64);
      T_DP(1, 4, 6);
    }
    if (g > 2) {
      T_LOAD(5, b + 2 * step, 64);
      T_DP(2, 4, 5);
    }
    if (g > 3) {
      T_LOAD(6, b + 3 * step, 64);
      T_DP(3, 4, 6);
    }
  }
  T_STORE(0, buf, 128);
  T_STORE(1, buf + 16, 128);
  T_STORE(2, buf + 512, 128);
  T_STORE(3, buf + 528, 128);
}

/* The group's outputs from buf into c. */
static void store_group(const job *jb, int64_t m0, int mr, int64_t j, int g, const float *buf) {
  const dsp_cpu_amx *w = jb->w;
  const dsp_tensor *c = jb->c;
  const size_t es = dsp_dtype_size(c->dtype);
  for (int h = 0; h < 2 && 2 * h < g; h++) {
    const int64_t n0 = (j + 2 * h) * 16, left = w->n - n0, mine = 16 * (g - 2 * h);
    const int ncols = (int)(left < mine ? left : mine < 32 ? mine : 32); /* never a block of another thread */
    char *c0 = (char *)c->data + (size_t)(m0 * c->stride[0] + n0 * c->stride[1]) * es;
    jb->store(buf + 512 * h, mr, ncols, c0, c->dtype, c->stride[0], c->stride[1]);
  }
}

/* One group of g <= 4 blocks from block j over rows m0 .. m0+mr-1. */
static void group(const job *jb, int64_t m0, int mr, int64_t j, int g, float *buf, const char *end) {
  accumulate(jb, m0, j, g, 0, jb->w->kb, buf, end);
  store_group(jb, m0, mr, j, g, buf);
}

/* The chain for output (m, n) over k [k0, k1), the weight read back from its tiles. */
__attribute__((target("fma"))) static float chain_at(const job *jb, int64_t m, int64_t n, int64_t k0, int64_t k1) {
  const dsp_cpu_amx *w = jb->w;
  const dsp_tensor *a = jb->a;
  const uint16_t *ar = (const uint16_t *)a->data + m * a->stride[0];
  float acc = 0.0f;
  for (int64_t k = k0; k < k1; k++) {
    uint32_t ua = (uint32_t)ar[k * a->stride[1]] << 16, uw = (uint32_t)dsp_cpu_amx_at(w, n, k) << 16;
    float fa, fw;
    memcpy(&fa, &ua, 4);
    memcpy(&fw, &uw, 4);
    acc = fmaf(fa, fw, acc);
  }
  return acc;
}

static void fix(const job *jb, int64_t n0, int64_t n1) {
  const dsp_tensor *c = jb->c;
  const int64_t M = jb->a->shape[0];
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = n0; n < n1; n++) {
      if (jb->ga[m] + jb->w->guard[n] >= DSP_CPU_GUARD_MIN) continue;
      const float v = chain_at(jb, m, n, 0, jb->w->k);
      const size_t off = (size_t)(m * c->stride[0] + n * c->stride[1]);
      if (c->dtype == DSP_BF16) ((uint16_t *)c->data)[off] = dsp_cpu_out_bf16(v);
      else ((float *)c->data)[off] = dsp_cpu_out_f32(v);
    }
}

/* slices.h's tree step 16 lanes at a time (every AMX CPU has AVX-512; n is a multiple of 32) */
__attribute__((target("avx512f"))) static void add512(float *l, const float *r, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(l + i, _mm512_add_ps(_mm512_loadu_ps(l + i), _mm512_loadu_ps(r + i)));
}

/* group() for a weight in K slices: each slice's blocks from +0 into its own buffer (sbuf: slices x 1024
 * floats), the outputs that slice's guards reject by the chain over the slice, then the tree, then the store. */
static void group_sliced(const job *jb, int64_t m0, int mr, int64_t j, int g, float *sbuf, const char *end) {
  const dsp_cpu_amx *w = jb->w;
  const int ns = w->slices;
  const int64_t kbs = w->kb / ns, ks = w->k / ns, M = jb->a->shape[0];
  for (int s = 0; s < ns; s++) {
    float *buf = sbuf + (size_t)s * 1024;
    accumulate(jb, m0, j, g, s * kbs, (s + 1) * kbs, buf, end);
    if (!jb->fixups) continue;
    const int16_t *gw = w->guard + (size_t)s * (size_t)w->n, *ga = jb->ga + (size_t)s * (size_t)M;
    for (int b = 0; b < g; b++)
      for (int c = 0; c < 16; c++) {
        const int64_t n = (j + b) * 16 + c;
        if (n >= w->n) break;
        for (int r = 0; r < mr; r++)
          if (ga[m0 + r] + gw[n] < DSP_CPU_GUARD_MIN)
            buf[(b / 2) * 512 + r * 32 + (b % 2) * 16 + c] = chain_at(jb, m0 + r, n, s * ks, (s + 1) * ks);
      }
  }
  /* only the rows' floats are written: [mr][32] in each half */
  dsp_cpu_slice_tree_with(sbuf, 1024, 0, ns, (size_t)mr * 32, add512);
  dsp_cpu_slice_tree_with(sbuf + 512, 1024, 0, ns, (size_t)mr * 32, add512);
  store_group(jb, m0, mr, j, g, sbuf);
}

dsp_status dsp_cpu_amx_matmul_nt(const dsp_tensor *a, const dsp_cpu_amx *w, dsp_tensor *c, int nthreads) {
  if (!a || !w || !c) return dsp_fail(DSP_ERR_ARG, "cpu amx matmul: NULL argument");
  if (!dsp_cpu_amx_usable()) return dsp_fail(DSP_ERR_UNSUPPORTED, "cpu amx matmul: this CPU or OS lacks AMX tiles");
  if (a->dtype != DSP_BF16 || (c->dtype != DSP_BF16 && c->dtype != DSP_F32))
    return dsp_fail(DSP_ERR_DTYPE, "cpu amx matmul: a is %s, c %s: expected BF16 and BF16 or F32",
                    dsp_dtype_name(a->dtype), dsp_dtype_name(c->dtype));
  char sa[64], sc[64];
  if (a->ndim != 2 || c->ndim != 2 || a->shape[1] != w->k || c->shape[0] != a->shape[0] || c->shape[1] != w->n)
    return dsp_fail(DSP_ERR_SHAPE, "cpu amx matmul: a %s, weight [%lld, %lld], c %s: expected a [M, K], c [M, N]",
                    dsp_shape_str(a, sa, sizeof sa), (long long)w->n, (long long)w->k, dsp_shape_str(c, sc, sizeof sc));
  const int64_t M = a->shape[0], K = w->k;
  if (M == 0) return DSP_OK;
  if (!a->data || !c->data) return dsp_fail(DSP_ERR_ARG, "cpu amx matmul: a view without data");

  /* A as the tiles read it: in place where rows are contiguous and K is whole
   * blocks, else a zero-padded copy; and the rows' guards */
  const int direct = a->stride[1] == 1 && K % 32 == 0;
  const int64_t lda = direct ? a->stride[0] : w->kb * 32;
  const size_t copy = direct ? 0 : (size_t)(M * lda) * 2;
  const int ns = w->slices > 1 ? w->slices : 1;
  const int64_t ks = K / ns;
  char *scratch = dsp_cpu_scratch(copy + (size_t)(ns * M) * sizeof(int16_t) + 64);
  if (!scratch) return dsp_fail(DSP_ERR_NOMEM, "cpu amx matmul: cannot allocate scratch for %lld x %lld",
                                (long long)M, (long long)K);
  uint16_t *as = (uint16_t *)scratch;
  int16_t *ga = (int16_t *)(scratch + ((copy + 63) & ~(size_t)63));
  int16_t gmin = 255;
  for (int64_t m = 0; m < M; m++) {
    const uint16_t *row = (const uint16_t *)a->data + m * a->stride[0];
    for (int sl = 0; sl < ns; sl++) {
      const int16_t v = dsp_cpu_row_guard(row + sl * ks * a->stride[1], ks, a->stride[1]);
      ga[sl * M + m] = v;
      if (v < gmin) gmin = v;
    }
    if (!direct) {
      for (int64_t k = 0; k < K; k++) as[m * lda + k] = row[k * a->stride[1]];
      memset(as + m * lda + K, 0, (size_t)(lda - K) * 2);
    }
  }
  const dsp_cpu_isa isa = dsp_cpu_isa_current();
  job jb = {.a = a, .w = w, .c = c, .store = isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_store_avx512 : dsp_cpu_store_scalar,
            .as = direct ? (const uint16_t *)a->data : as, .lda = lda, .ga = ga,
            .fixups = gmin + w->guard_min < DSP_CPU_GUARD_MIN};
  const int threads = dsp_cpu_threads_resolve(nthreads);
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t groups = (w->nb + 3) / 4, j0 = groups * id / nt * 4, j1e = groups * (id + 1) / nt * 4;
    const int64_t j1 = j1e < w->nb ? j1e : w->nb;
    float buf[2 * 16 * 32] __attribute__((aligned(64)));
    /* a sliced weight's partials: at most 64 KiB of this thread's stack, 64-byte aligned for the epilogue */
    float sraw[ns > 1 ? ns * 1024 + 16 : 1];
    float *sbuf = (float *)(((uintptr_t)sraw + 63) & ~(uintptr_t)63);
    const char *end = (const char *)(w->data + (size_t)(j1 * w->kb) * 512); /* a group's tiles end where the next begins */
    int cfg_rows = -1;
    for (int64_t m0 = 0; m0 < M && j0 < j1; m0 += 16) {
      const int mr = (int)(M - m0 < 16 ? M - m0 : 16);
      if (mr != cfg_rows) configure(cfg_rows = mr);
      for (int64_t j = j0; j < j1; j += 4) {
        const int g = (int)(j1 - j < 4 ? j1 - j : 4);
        if (ns > 1) group_sliced(&jb, m0, mr, j, g, sbuf, end);
        else group(&jb, m0, mr, j, g, buf, end);
      }
    }
    if (cfg_rows >= 0) __asm__ volatile("tilerelease" ::);
    if (ns == 1 && jb.fixups && j0 < j1) fix(&jb, j0 * 16, j1 * 16 < w->n ? j1 * 16 : w->n);
  }
  return DSP_OK;
}
