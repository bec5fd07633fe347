/* The bf16 NT GEMM: the own wgmma kernel, cuBLASLt's pinned algorithm, or the
 * strict fmaf chain. See gemm.h for the contract and why one algorithm is pinned. */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/launch.cuh"
#include "kernels/cuda/common/slices.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_small.h"
#include "kernels/cuda/gemm_wgmma.h"
extern "C" {
#include "core/env.h"
}

#define LM_MAXCAND 16

struct dsp_cuda_gemm {
  int64_t n, k;
  int strict;
  int wg;      /* the own warpgroup kernel (gemm_wgmma.h) runs the product */
  int cluster; /* its cluster size: 0 its default, 1 single blocks */
  int split;   /* K split over clusters of this many blocks (1: none) */
  int small;   /* products of up to DSP_GEMM_SMALL_MAX_M rows run on the mma.sync kernel (gemm_small.h) */
  int slices;  /* K slices (dsp_cuda_gemm_slice; 1: one sum over K) */
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la; /* w: [k x n] column-major (row-major [n][k]), used transposed */
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulAlgo_t cand[LM_MAXCAND]; /* every split-K-free candidate that runs this N, heuristic order */
  size_t cand_ws[LM_MAXCAND];
  int ncand, forced;
  size_t ws_limit;  /* workspace the candidates may ask for (0 on the first try) */
  void *ws;         /* the chosen algorithm's workspace, ws_bytes (NULL when 0) */
  size_t ws_bytes;
  char desc[320];
};

/* ---- strict: the CPU's per-element chain on CUDA cores ------------------------
 * A 64 x 64 output tile per 256-thread block, 4 x 4 outputs per thread. K runs
 * in slabs of 32 staged through shared memory as fp32; within and across slabs
 * every output's accumulator sees k = 0, 1, ..., K-1 in order, one fmaf each,
 * starting from +0 (zero-filled tails add +0 * +0, which leaves a chain that
 * started at +0 unchanged). Any K and strides: 16-byte loads where the rows
 * allow them, element loads otherwise (the same values, the same chain).
 * SL: K in slices of ks columns (a multiple of the slab), each slice's chain
 * from +0 and the slices' sums added by the tree (slices.cuh), as the CPU. */
#define LM_TILE 64
#define LM_KSLAB 32

template <bool SL>
__global__ void __launch_bounds__(256) lm_strict_kernel(const uint16_t *__restrict__ a, long long lda,
                                                        const uint16_t *__restrict__ w, void *__restrict__ out,
                                                        int m, int n, int k, long long ldo, int vec, int f32, int ks,
                                                        unsigned long long merges) {
  __shared__ __align__(16) float as[LM_KSLAB][LM_TILE];
  __shared__ __align__(16) float ws[LM_KSLAB][LM_TILE];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.y * LM_TILE, n0 = blockIdx.x * LM_TILE;
  const int lr = tid >> 2, lc = (tid & 3) * 8; /* this thread stages row lr, columns lc..lc+7 */
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  constexpr int DEP = SL ? DSP_SLICE_DEPTH : 1;
  float stk[DEP][16];
  int sp = 0;

  for (int k0 = 0; k0 < k; k0 += LM_KSLAB) {
    if (SL && k0 && k0 % ks == 0) /* slice k0 / ks - 1 is done */
      dsp_slice_close<16, DEP>(&acc[0][0], stk, sp, (int)((merges >> (4 * (k0 / ks - 1))) & 15u));
    uint16_t pa[8], pw[8];
    const bool ra = m0 + lr < m, rw = n0 + lr < n;
    if (vec) {
      /* k % 8 == 0 and aligned rows: an 8-wide piece is either all inside K or all outside */
      uint4 va = make_uint4(0, 0, 0, 0), vw = make_uint4(0, 0, 0, 0);
      if (ra && k0 + lc < k) va = *(const uint4 *)(a + (size_t)(m0 + lr) * (size_t)lda + k0 + lc);
      if (rw && k0 + lc < k) vw = *(const uint4 *)(w + (size_t)(n0 + lr) * (size_t)k + k0 + lc);
      memcpy(pa, &va, 16);
      memcpy(pw, &vw, 16);
    } else {
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const int kk = k0 + lc + j;
        pa[j] = ra && kk < k ? a[(size_t)(m0 + lr) * (size_t)lda + kk] : 0;
        pw[j] = rw && kk < k ? w[(size_t)(n0 + lr) * (size_t)k + kk] : 0;
      }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
      as[lc + j][lr] = __uint_as_float((uint32_t)pa[j] << 16);
      ws[lc + j][lr] = __uint_as_float((uint32_t)pw[j] << 16);
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < LM_KSLAB; kk++) {
      const float4 av = *(const float4 *)&as[kk][ty * 4];
      const float4 wv = *(const float4 *)&ws[kk][tx * 4];
      const float ai[4] = {av.x, av.y, av.z, av.w}, wj[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(ai[i], wj[j], acc[i][j]);
    }
    __syncthreads();
  }
  if (SL) {
    dsp_slice_close<16, DEP>(&acc[0][0], stk, sp, (int)((merges >> (4 * (k / ks - 1))) & 15u));
#pragma unroll
    for (int v = 0; v < 16; v++) acc[v >> 2][v & 3] = stk[0][v];
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int mm = m0 + ty * 4 + i;
    if (mm >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int nn = n0 + tx * 4 + j;
      if (nn < n) dsp_dev_store_sum(out, (size_t)mm * (size_t)ldo + nn, acc[i][j], f32);
    }
  }
}

/* ---- cuBLASLt ------------------------------------------------------------------ */
static dsp_status make_layout(cublasLtMatrixLayout_t *l, uint64_t rows, uint64_t cols, int64_t ld) {
  DSP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(l, CUDA_R_16BF, rows, cols, ld));
  return DSP_OK;
}

/* Runs the check for the pinned algorithm on an (m x n) problem. */
static dsp_status algo_check(dsp_cuda_gemm *lm, const cublasLtMatmulAlgo_t *algo, int64_t m, int64_t n, int64_t ldo,
                             int *ok, size_t *ws) {
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  dsp_status s = make_layout(&la, (uint64_t)lm->k, (uint64_t)n, lm->k);
  if (s == DSP_OK) s = make_layout(&lb, (uint64_t)lm->k, (uint64_t)m, lm->k);
  if (s == DSP_OK) s = make_layout(&ld, (uint64_t)n, (uint64_t)m, ldo);
  *ok = 0;
  if (s == DSP_OK) {
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    cublasStatus_t st = cublasLtMatmulAlgoCheck(lm->lt, lm->op, la, lb, ld, ld, algo, &r);
    *ok = st == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= lm->ws_limit;
    if (ws) *ws = r.workspaceSize;
  }
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  return s;
}

/* The heuristic's candidates for an (m x n) problem, best first. Each is made
 * single-pass (split-K 1, no reduction: a config the heuristic chose with
 * split-K is rewritten, and it counts in lm->forced) and kept when it needs no
 * workspace and passes the check on this head's own N. */
static dsp_status pick_algo(dsp_cuda_gemm *lm, int64_t m, int64_t n, int *found) {
  *found = 0;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  dsp_status s = make_layout(&la, (uint64_t)lm->k, (uint64_t)n, lm->k);
  if (s == DSP_OK) s = make_layout(&lb, (uint64_t)lm->k, (uint64_t)m, lm->k);
  if (s == DSP_OK) s = make_layout(&ld, (uint64_t)n, (uint64_t)m, n);
  cublasLtMatmulHeuristicResult_t res[LM_MAXCAND];
  int nres = 0;
  if (s == DSP_OK) {
    uint64_t ws = lm->ws_limit;
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(lm->lt, lm->op, la, lb, ld, ld, pref, LM_MAXCAND, res, &nres);
    if (st != CUBLAS_STATUS_SUCCESS) nres = 0; /* "no algorithm" is an answer here, not a failure */
  }
  lm->ncand = 0;
  lm->forced = 0;
  for (int i = 0; i < nres && s == DSP_OK; i++) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    cublasLtMatmulAlgo_t algo = res[i].algo;
    int32_t splitk = 1;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    if (splitk > 1) {
      const int32_t one = 1;
      const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof one) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof none) !=
              CUBLAS_STATUS_SUCCESS)
        continue;
    }
    int ok = 0;
    size_t need = 0;
    s = algo_check(lm, &algo, 256, lm->n, lm->n, &ok, &need);
    if (s == DSP_OK && ok && lm->ncand < LM_MAXCAND) {
      lm->forced += splitk > 1;
      lm->cand_ws[lm->ncand] = need;
      lm->cand[lm->ncand++] = algo;
    }
  }
  if (lm->ncand) {
    lm->algo = lm->cand[0];
    lm->ws_bytes = lm->cand_ws[0];
    *found = 1;
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  return s;
}

static void describe_algo(dsp_cuda_gemm *lm, const char *how) {
  int32_t id = -1;
  uint32_t tile = 0, stages = 0;
  uint16_t cluster = 0;
  size_t got;
  cublasLtMatmulAlgoConfigGetAttribute(&lm->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&lm->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&lm->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got);
  cublasLtMatmulAlgoConfigGetAttribute(&lm->algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                       &got);
  snprintf(lm->desc, sizeof lm->desc,
           "cublasLt algo %d tile %u stages %u cluster %u, split-K 1, workspace %zu B (%s; %d candidates, %d with "
           "split-K rewritten to 1)",
           (int)id, tile, stages, (unsigned)cluster, lm->ws_bytes, how, lm->ncand, lm->forced);
}

/* The own kernel's tile check, once per (device, K): its answer depends on nothing else, and a model creates
 * many weights of a few K. */
static dsp_status wg_check_once(int64_t k, long long *cmp, long long *dif, long long *scmp, long long *sdif) {
  struct seen_check {
    int dev;
    int64_t k;
    long long cmp, dif, scmp, sdif; /* the token tiles', then the mma.sync kernel's against them */
  };
  static seen_check seen[32];
  static int nseen;
  static std::mutex mu;
  int dev = 0;
  DSP_CUDA_TRY(cudaGetDevice(&dev));
  {
    std::lock_guard<std::mutex> g(mu);
    for (int i = 0; i < nseen; i++)
      if (seen[i].dev == dev && seen[i].k == k) {
        *cmp = seen[i].cmp, *dif = seen[i].dif, *scmp = seen[i].scmp, *sdif = seen[i].sdif;
        return DSP_OK;
      }
  }
  DSP_TRY(dsp_cuda_gemm_wg_check(k, cmp, dif));
  *scmp = *sdif = 0;
  if (*dif == 0) DSP_TRY(dsp_cuda_gemm_small_check(k, scmp, sdif));
  if (*sdif && dsp_env_get()->verbose)
    fprintf(stderr, "dspark: cuda gemm: the mma.sync kernel differs from the wgmma kernel in %lld of %lld values at K "
                    "%lld; not used\n", *sdif, *scmp, (long long)k);
  std::lock_guard<std::mutex> g(mu);
  if (nseen < 32) seen[nseen++] = seen_check{dev, k, *cmp, *dif, *scmp, *sdif};
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_gemm_create(int64_t n, int64_t k, int strict, int choice, dsp_cuda_gemm **out) {
  *out = NULL;
  if (n < 1 || k < 1) return dsp_fail(DSP_ERR_SHAPE, "cuda gemm: N %lld and K %lld must be positive", (long long)n, (long long)k);
  if (n > INT32_MAX || k > INT32_MAX)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm: N %lld / K %lld exceed 2^31", (long long)n, (long long)k);
  dsp_cuda_gemm *lm = (dsp_cuda_gemm *)calloc(1, sizeof *lm);
  if (!lm) return dsp_fail(DSP_ERR_NOMEM, "cuda gemm: out of memory");
  lm->n = n;
  lm->k = k;
  lm->strict = strict;
  lm->slices = 1;
  *out = lm;
  if (strict || n % 8 || k % 8) { /* the tensor-core kernels need 16-byte rows */
    lm->strict = 1;
    snprintf(lm->desc, sizeof lm->desc, strict ? "strict fmaf chain (CUDA cores, bitwise = CPU)"
                                               : "strict fmaf chain (N or K not a multiple of 8)");
    return DSP_OK;
  }
  dsp_status s = DSP_OK;
  cublasStatus_t st = cublasLtCreate(&lm->lt);
  if (st != CUBLAS_STATUS_SUCCESS)
    s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cublasLtCreate: %s", __FILE__, __LINE__, cublasLtGetStatusString(st));
  if (s == DSP_OK) {
    st = cublasLtMatmulDescCreate(&lm->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulDescSetAttribute(lm->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulDescSetAttribute(lm->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (st != CUBLAS_STATUS_SUCCESS)
      s = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cublasLt matmul descriptor: %s", __FILE__, __LINE__,
                   cublasLtGetStatusString(st));
  }
  if (s == DSP_OK) s = make_layout(&lm->la, (uint64_t)k, (uint64_t)n, k);
  int found = 0;
  /* canonical shape first: the choice then depends on K alone (shard and batch invariance) */
  if (s == DSP_OK) s = pick_algo(lm, 256, 65536, &found);
  if (s == DSP_OK && found) describe_algo(lm, "pinned, chosen for K alone");
  if (s == DSP_OK && !found) {
    s = pick_algo(lm, 256, n, &found);
    if (s == DSP_OK && found) describe_algo(lm, "pinned, chosen for this N: not shard-invariant across TP sizes");
  }
  if (s == DSP_OK && !found) {
    /* some shapes (large K) get no workspace-free kernel: allow a bounded workspace,
     * still single-pass (split-K 1); the tests check batch and shard invariance */
    lm->ws_limit = (size_t)64 << 20;
    s = pick_algo(lm, 256, 65536, &found);
    if (s == DSP_OK && found) describe_algo(lm, "pinned, chosen for K alone, with workspace");
    if (s == DSP_OK && !found) {
      s = pick_algo(lm, 256, n, &found);
      if (s == DSP_OK && found) describe_algo(lm, "pinned, chosen for this N, with workspace");
    }
  }
  if (s == DSP_OK && choice != DSP_GEMM_PINNED && dsp_cuda_gemm_wg_supported(k)) {
    long long cmp = 0, dif = 0, scmp = 0, sdif = 0;
    s = wg_check_once(k, &cmp, &dif, &scmp, &sdif);
    if (s == DSP_OK && dif == 0) {
      lm->wg = 1;
      lm->small = scmp > 0 && sdif == 0;
      lm->cluster = choice == DSP_GEMM_WGMMA_SINGLE ? 1 : 0;
      lm->split = choice == DSP_GEMM_WGMMA_SPLIT && dsp_env_get()->gemm_split ? dsp_cuda_gemm_wg_split_choice(n, k) : 1;
      if (lm->split > 1)
        snprintf(lm->desc, sizeof lm->desc,
                 "own wgmma kernel, 128 x 112 tiles, K split over clusters of %d (k groups in order within each "
                 "part, parts added by the halving tree)", lm->split);
      else
        snprintf(lm->desc, sizeof lm->desc,
                 "own wgmma kernel, 64 x 32/64/112/128 and 128 x 112/128/224/256 (vocabulary x token) tiles, %s, k groups in order (token-tile and "
                 "cluster check: %lld values, 0 differ)%s",
                 lm->cluster == 1 ? "single blocks" : "clusters of 2 where they fill the device", cmp,
                 lm->small ? "; up to 32 rows on mma.sync, 16-row strips (checked against it: 0 differ)" : "");
      return DSP_OK;
    }
    if (s == DSP_OK) /* the token tiles disagree here: batch invariance needs one kernel, keep cuBLASLt */
      fprintf(stderr, "dspark: cuda gemm: own kernel's token tiles differ in %lld of %lld values; using cuBLASLt\n",
              dif, cmp);
  }
  if (s == DSP_OK && found && lm->ws_limit) {
    size_t most = 0;
    for (int i = 0; i < lm->ncand; i++) most = lm->cand_ws[i] > most ? lm->cand_ws[i] : most;
    if (most) {
      cudaError_t e = cudaMalloc(&lm->ws, most);
      if (e != cudaSuccess) {
        cudaGetLastError();
        s = dsp_fail(DSP_ERR_NOMEM, "cuda gemm: %zu bytes of cuBLASLt workspace: %s", most, cudaGetErrorString(e));
      }
      lm->ws_bytes = most;
    }
  }
  if (s == DSP_OK && !found) {
    /* no single-pass tensor-core algorithm: the strict kernel is always valid */
    lm->strict = 1;
    snprintf(lm->desc, sizeof lm->desc, "strict fmaf chain (cuBLASLt offered no split-K-free algorithm)");
  }
  if (s != DSP_OK) {
    dsp_cuda_gemm_free(lm);
    *out = NULL;
  }
  return s;
}

extern "C" dsp_status dsp_cuda_gemm_prepare(dsp_cuda_gemm *lm, int64_t m) {
  if (lm->strict || lm->wg) return DSP_OK;
  int ok = 0;
  size_t need = 0;
  DSP_TRY(algo_check(lm, &lm->algo, m, lm->n, lm->n, &ok, &need));
  if (need > lm->ws_bytes) ok = 0;
  if (!ok)
    return dsp_fail(DSP_ERR_DEVICE, "cuda gemm: the pinned %s does not run M = %lld rows", lm->desc,
                    (long long)m);
  return DSP_OK;
}

static dsp_status run(dsp_cuda_gemm *lm, const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t ldo,
                      int f32, cudaStream_t s) {
  if (m < 1) return DSP_OK;
  if (lda < lm->k || ldo < lm->n)
    return dsp_fail(DSP_ERR_ARG, "cuda gemm: lda %lld < K %lld or ldo %lld < N %lld", (long long)lda, (long long)lm->k,
                    (long long)ldo, (long long)lm->n);
  if (lm->strict) {
    const int vec = lm->k % 8 == 0 && lda % 8 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)w % 16 == 0;
    dim3 grid((unsigned)((lm->n + LM_TILE - 1) / LM_TILE), (unsigned)((m + LM_TILE - 1) / LM_TILE));
    const int sl = lm->slices > 1;
    (sl ? lm_strict_kernel<true> : lm_strict_kernel<false>)<<<grid, 256, 0, s>>>(
        (const uint16_t *)a, (long long)lda, (const uint16_t *)w, out, (int)m, (int)lm->n, (int)lm->k, (long long)ldo,
        vec, f32, (int)(lm->k / lm->slices), sl ? dsp_slice_merges(lm->slices) : 0ull);
    DSP_CUDA_TRY_LAUNCH();
    return DSP_OK;
  }
  if (lda % 8 || ldo % 8 || (uintptr_t)a % 16 || (uintptr_t)w % 16 || (uintptr_t)out % 16)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm: the tensor-core kernels need lda (%lld) and ldo (%lld) multiples "
                    "of 8 and 16-byte aligned operands", (long long)lda, (long long)ldo);
  /* captured products launch programmatically: a graph replays forwards, whose weights no kernel writes */
  const int pdl = dsp_cuda_pdl(s);
  /* K slices: the few-row kernel keeps the slices' tree in registers; past its rows, one block per slice of a
     cluster, the parts added by the same tree (dsp_cuda_gemm_slice took the slices only where both run) */
  if (lm->slices > 1) {
    if (lm->small && m <= DSP_GEMM_SMALL_MAX_M && dsp_env_get()->gemm_small != 0)
      return dsp_cuda_gemm_small_run(a, lda, w, out, m, lm->n, lm->k, ldo, lm->slices, pdl, NULL, f32, s);
    return dsp_cuda_gemm_wg_split_run(a, lda, w, out, m, lm->n, lm->k, ldo, lm->slices, pdl, f32, s);
  }
  if (lm->wg && lm->split > 1)
    return dsp_cuda_gemm_wg_split_run(a, lda, w, out, m, lm->n, lm->k, ldo, lm->split, pdl, f32, s);
  /* few rows: the warp-level kernel where it gives the warpgroup kernel's bits (never when a tile is forced). Its
   * warps each own a 16-row strip, so a product has 4x more chains in flight than the 64-row tiles: at M 1 and 8
   * it took 10-30% less on every Qwen3-8B product (bench/RESULTS.md, twenty-second session), at M 32 up to 23% */
  const int small = dsp_env_get()->gemm_small;
  if (lm->wg && lm->small && m <= DSP_GEMM_SMALL_MAX_M && !dsp_env_get()->gemm_tile && small != 0)
    return dsp_cuda_gemm_small_run(a, lda, w, out, m, lm->n, lm->k, ldo, 1, pdl, NULL, f32, s);
  if (lm->wg) return dsp_cuda_gemm_wg_run(a, lda, w, out, m, lm->n, lm->k, ldo, 0, lm->cluster, pdl, f32, s);
  if (f32)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm: fp32 outputs run on the own kernels, not on %s (N %lld, K %lld)",
                    lm->desc, (long long)lm->n, (long long)lm->k);
  cublasLtMatrixLayout_t lb = NULL, ld = NULL;
  dsp_status st = make_layout(&lb, (uint64_t)lm->k, (uint64_t)m, lda);
  if (st == DSP_OK) st = make_layout(&ld, (uint64_t)lm->n, (uint64_t)m, ldo);
  if (st == DSP_OK) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t e = cublasLtMatmul(lm->lt, lm->op, &alpha, w, lm->la, a, lb, &beta, out, ld, out, ld, &lm->algo,
                                      lm->ws, lm->ws_bytes, s);
    if (e != CUBLAS_STATUS_SUCCESS)
      st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cublasLtMatmul (M %lld, N %lld, K %lld): %s", __FILE__, __LINE__,
                    (long long)m, (long long)lm->n, (long long)lm->k, cublasLtGetStatusString(e));
  }
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  return st;
}

extern "C" dsp_status dsp_cuda_gemm_run(dsp_cuda_gemm *lm, const void *a, int64_t lda, const void *w, void *out,
                                        int64_t m, int64_t ldo, cudaStream_t s) {
  return run(lm, a, lda, w, out, m, ldo, 0, s);
}

extern "C" dsp_status dsp_cuda_gemm_run_f32(dsp_cuda_gemm *lm, const void *a, int64_t lda, const void *w, float *out,
                                            int64_t m, int64_t ldo, cudaStream_t s) {
  return run(lm, a, lda, w, out, m, ldo, 1, s);
}

extern "C" dsp_status dsp_cuda_gemm_slice(dsp_cuda_gemm *lm, int slices, int *taken) {
  *taken = 0;
  if (slices < 2 || lm->slices > 1) {
    *taken = slices < 2 || lm->slices == slices;
    if (slices >= 2 && !*taken)
      return dsp_fail(DSP_ERR_ARG, "cuda gemm: a weight in %d K slices cannot take %d", lm->slices, slices);
    return DSP_OK;
  }
  if (lm->strict) *taken = slices <= 16 && lm->k % ((int64_t)slices * LM_KSLAB) == 0; /* the CPU's rule */
  else
    *taken = lm->wg && (slices == 2 || slices == 4 || slices == 8) && lm->k % ((int64_t)slices * 64) == 0 &&
             dsp_cuda_gemm_wg_split_runs(slices);
  const size_t used = strlen(lm->desc);
  if (*taken) {
    lm->slices = slices;
    snprintf(lm->desc + used, sizeof lm->desc - used, ", %d K slices", slices);
  } else {
    snprintf(lm->desc + used, sizeof lm->desc - used, ", one sum over K (%d slices of K %lld do not run here)",
             slices, (long long)lm->k);
  }
  return DSP_OK;
}

extern "C" const char *dsp_cuda_gemm_describe(const dsp_cuda_gemm *lm) { return lm->desc; }

extern "C" void dsp_cuda_gemm_free(dsp_cuda_gemm *lm) {
  if (!lm) return;
  if (lm->ws) cudaFree(lm->ws);
  if (lm->la) cublasLtMatrixLayoutDestroy(lm->la);
  if (lm->op) cublasLtMatmulDescDestroy(lm->op);
  if (lm->lt) cublasLtDestroy(lm->lt);
  free(lm);
}
