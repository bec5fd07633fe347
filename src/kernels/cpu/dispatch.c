/* Run-time choice of the product path, thread counts, per-thread scratch and
 * the widening of A (bf16 -> fp32 tiles, exact). */
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/env.h"
#include "core/status.h"
#include "kernels/cpu/amx_detect.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/matmul.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dsp_cpu_isa g_chosen;
static atomic_int g_forced = -1, g_forced_dot = -1;
static int g_have_dot, g_dot;

static void isa_detect(void) {
  const int avx512 = dsp_cpu_isa_supported(DSP_CPU_ISA_AVX512);
  dsp_cpu_isa best = avx512 ? DSP_CPU_ISA_AVX512 : dsp_cpu_isa_supported(DSP_CPU_ISA_AVX2) ? DSP_CPU_ISA_AVX2
                                                                                          : DSP_CPU_ISA_SCALAR;
  /* vdpbf16ps: offered only where it gave the chain's bits on every check input (kernel_bf16dot.c) */
  g_have_dot = avx512 && __builtin_cpu_supports("avx512bf16") && dsp_cpu_dot_check();
  const char *want = dsp_env_get()->cpu_kernel;
  int isa = -1;
  g_dot = g_have_dot && (!strcmp(want, "auto") || !strcmp(want, "chain") || !strcmp(want, "avx512bf16") ||
                         !strcmp(want, "amx"));
  if (!strcmp(want, "avx512bf16")) {
    isa = DSP_CPU_ISA_AVX512;
    if (!g_have_dot) {
      fprintf(stderr, "dspark: DSPARK_CPU_KERNEL=avx512bf16: this CPU lacks AVX-512 BF16 or its vdpbf16ps does not "
                      "give the fmaf chain's bits; using auto\n");
      isa = -1;
    }
  } else if (!strcmp(want, "avx512")) isa = DSP_CPU_ISA_AVX512;
  else if (!strcmp(want, "avx2")) isa = DSP_CPU_ISA_AVX2;
  else if (!strcmp(want, "scalar")) isa = DSP_CPU_ISA_SCALAR;
  else if (!strcmp(want, "amx") && !dsp_cpu_amx_usable())
    fprintf(stderr, "dspark: DSPARK_CPU_KERNEL=amx: this CPU or OS lacks AMX tiles; the avx512/avx2 chain runs\n");
  if (isa >= 0 && !dsp_cpu_isa_supported((dsp_cpu_isa)isa)) {
    fprintf(stderr, "dspark: DSPARK_CPU_KERNEL=%s: this CPU lacks it; using auto\n", want);
    isa = -1;
  }
  g_chosen = isa >= 0 ? (dsp_cpu_isa)isa : best;
}

int dsp_cpu_dot_current(void) {
  pthread_once(&g_once, isa_detect);
  const int f = atomic_load(&g_forced_dot);
  return f >= 0 ? f : g_dot;
}

dsp_cpu_isa dsp_cpu_isa_current(void) {
  pthread_once(&g_once, isa_detect);
  int f = atomic_load(&g_forced);
  return f >= 0 ? (dsp_cpu_isa)f : g_chosen;
}

const char *dsp_cpu_kernel_name(void) {
  switch (dsp_cpu_isa_current()) {
    case DSP_CPU_ISA_AVX512: return dsp_cpu_dot_current() ? "avx512bf16" : "avx512f";
    case DSP_CPU_ISA_AVX2: return "avx2";
    default: return "scalar";
  }
}

dsp_status dsp_cpu_kernel_force(const char *name) {
  pthread_once(&g_once, isa_detect);
  int isa, dot = 0;
  if (!name || !strcmp(name, "auto")) isa = -1, dot = -1;
  else if (!strcmp(name, "avx512bf16")) isa = DSP_CPU_ISA_AVX512, dot = 1;
  else if (!strcmp(name, "avx512")) isa = DSP_CPU_ISA_AVX512;
  else if (!strcmp(name, "avx2")) isa = DSP_CPU_ISA_AVX2;
  else if (!strcmp(name, "scalar")) isa = DSP_CPU_ISA_SCALAR;
  else return dsp_fail(DSP_ERR_ARG, "cpu kernel '%s': expected auto, avx512bf16, avx512, avx2 or scalar", name);
  if ((isa >= 0 && !dsp_cpu_isa_supported((dsp_cpu_isa)isa)) || (dot > 0 && !g_have_dot))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cpu kernel '%s': this CPU lacks it", name);
  atomic_store(&g_forced, isa);
  atomic_store(&g_forced_dot, dot);
  return DSP_OK;
}

dsp_cpu_tile_fn dsp_cpu_tile_for(dsp_cpu_isa isa) {
  return isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_tile_avx512 : isa == DSP_CPU_ISA_AVX2 ? dsp_cpu_tile_avx2 : dsp_cpu_tile_scalar;
}

dsp_cpu_tile2_fn dsp_cpu_tile2_for(dsp_cpu_isa isa) {
  return isa == DSP_CPU_ISA_AVX512 ? dsp_cpu_tile2_avx512 : isa == DSP_CPU_ISA_AVX2 ? dsp_cpu_tile2_avx2 : NULL;
}

int dsp_cpu_threads_resolve(int nthreads) {
  if (nthreads > 0) return nthreads;
  int t = dsp_env_get()->threads;
  return t > 0 ? t : omp_get_max_threads();
}

/* ---- per-thread scratch: freed when its thread exits -------------------- */
typedef struct {
  void *p;
  size_t cap;
} scratch;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void scratch_drop(void *v) {
  scratch *s = v;
  free(s->p);
  free(s);
}

static void scratch_key(void) { DSP_ASSERT(pthread_key_create(&g_key, scratch_drop) == 0); }

void *dsp_cpu_scratch(size_t bytes) {
  if (bytes < 64) bytes = 64; /* never NULL for an empty request */
  pthread_once(&g_key_once, scratch_key);
  scratch *s = pthread_getspecific(g_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (pthread_setspecific(g_key, s)) {
      free(s);
      return NULL;
    }
  }
  if (s->cap < bytes) {
    size_t cap = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, cap);
    if (!p) return NULL;
    free(s->p);
    s->p = p;
    s->cap = cap;
  }
  return s->p;
}

static size_t a_part(int64_t m, int64_t k) { return ((size_t)dsp_cpu_mtiles(m) * DSP_CPU_MR * (size_t)k + 15) & ~(size_t)15; }

size_t dsp_cpu_a_floats(int64_t m, int64_t k) {
  const size_t g = ((size_t)dsp_cpu_mtiles(m) * sizeof(int16_t) + 63) / 64 * 16;
  return dsp_cpu_dot_current() ? 2 * a_part(m, k) + g : a_part(m, k);
}

dsp_cpu_kernels dsp_cpu_kernels_for(float *abuf, int64_t m, int64_t k) {
  const dsp_cpu_isa isa = dsp_cpu_isa_current();
  dsp_cpu_kernels kn = {.ap = abuf, .fn = dsp_cpu_tile_for(isa), .fn2 = dsp_cpu_tile2_for(isa)};
  if (dsp_cpu_dot_current()) {
    kn.aq = abuf + a_part(m, k), kn.dot = dsp_cpu_tile_dot, kn.dot2 = dsp_cpu_tile2_dot;
    kn.tguard = (const int16_t *)(const void *)(abuf + 2 * a_part(m, k));
  }
  return kn;
}

void dsp_cpu_prepare_a(const dsp_tensor *a, const struct dsp_cpu_packed *w, const dsp_cpu_kernels *kn) {
  const int64_t tiles = dsp_cpu_mtiles(a->shape[0]), k = a->shape[1];
  int chain = !kn->dot;
  if (kn->dot) {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; t++)
      dsp_cpu_pair_tile(a, t, (uint32_t *)(void *)(kn->aq + t * DSP_CPU_MR * k), (int16_t *)kn->tguard + t);
    /* after the loop's barrier every thread reads the same guards, so all or none run the next loop */
    for (int64_t t = 0; t < tiles; t++) chain |= kn->tguard[t] + w->guard_min < DSP_CPU_GUARD_MIN;
  }
  if (chain) {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; t++) dsp_cpu_widen_tile(a, t, (float *)kn->ap + t * DSP_CPU_MR * k);
  }
}

static void prepare_a_own(const dsp_tensor *a, const struct dsp_cpu_packed *w, const dsp_cpu_kernels *kn) {
  const int64_t tiles = dsp_cpu_mtiles(a->shape[0]), k = a->shape[1];
  int chain = !kn->dot;
  for (int64_t t = 0; kn->dot && t < tiles; t++) {
    dsp_cpu_pair_tile(a, t, (uint32_t *)(void *)(kn->aq + t * DSP_CPU_MR * k), (int16_t *)kn->tguard + t);
    chain |= kn->tguard[t] + w->guard_min < DSP_CPU_GUARD_MIN;
  }
  for (int64_t t = 0; chain && t < tiles; t++) dsp_cpu_widen_tile(a, t, (float *)kn->ap + t * DSP_CPU_MR * k);
}

dsp_cpu_kernels dsp_cpu_team_a(const dsp_tensor *a, const struct dsp_cpu_packed *w, const dsp_cpu_kernels *kn,
                               float *abuf, size_t a_floats, int own) {
  if (!own) {
    dsp_cpu_prepare_a(a, w, kn);
    return *kn;
  }
  const dsp_cpu_kernels mine =
      dsp_cpu_kernels_for(abuf + (size_t)omp_get_thread_num() * a_floats, a->shape[0], a->shape[1]);
  prepare_a_own(a, w, &mine);
  return mine;
}

void dsp_cpu_widen_tile(const dsp_tensor *a, int64_t t, float *out) {
  int64_t m0 = t * DSP_CPU_MR, k = a->shape[1];
  int mr = (int)(a->shape[0] - m0 < DSP_CPU_MR ? a->shape[0] - m0 : DSP_CPU_MR);
  for (int i = 0; i < mr; i++) {
    const dsp_bf16 *row = (const dsp_bf16 *)a->data + (m0 + i) * a->stride[0];
    for (int64_t kk = 0; kk < k; kk++) out[kk * mr + i] = dsp_bf16_to_f32(row[kk * a->stride[1]]);
  }
}
