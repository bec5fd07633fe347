/* Sweep of cuBLASLt configurations for the LM-head product (cuda/lm_head.h):
 * out[m][n] = a[m][k] . w[n][k], bf16 operands, fp32 accumulate, bf16 out,
 * arranged as lm_head.cu arranges it (cuBLASLt's M = vocabulary rows, N =
 * token rows). Every algorithm id, tile, stage count and cluster shape that
 * cuBLASLt accepts single-pass (split-K 1, no reduction, workspace <= 4 MiB)
 * is timed once; the fastest 12 and the head's four choices (the heuristic's
 * first; the fixed sm_90 configuration; the own wgmma kernel, the head's default,
 * in clusters of two and in single blocks, compared value by value with cuBLASLt) are then timed again in rounds that alternate between them (medians), so
 * the card's power-cap clock drift falls on all of them alike. Question it
 * answers: does a tile whose token side fits M exactly (224 = 32 x 7) beat the
 * pinned 256x128 tile, which pads 224 token rows to 256?
 * BENCH_LM_ALL=1 prints every configuration's single timing.
 * Where NVML answers (bench_power.h), the fastest 4 and the head's choices
 * then each run back to back for ~1.2 s, three times: joules per product, mean watts, and
 * the time per product the card's power limit allows under that sustained load.
 * The head's choices' "once" column is one product after 0.3 s idle (full clock).
 * The energy table also has the own kernel's parts (M <= 224): its tensor-
 * core work alone, its data movement alone, and the weight and activation
 * boxes alone (bench/support/gemm_parts.h), and the joules over the
 * card's idle power: which part of a product's energy goes where.
 * --sweep 0 leaves cuBLASLt's configurations out (the head's choices only: for profilers).
 * usage: bench_lm [--m 224] [--n 163840] [--k 7168] [--rounds 5] [--reps 5] [--sweep 1] */
#define _POSIX_C_SOURCE 200809L
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_power.h"
#include "bench_cuda_util.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "support/gemm_parts.h"

#define MAXCFG 4096
#define NHEAD 3 /* the head's LM choices timed beside the sweep */
#define OWN 1   /* the first of them that is the own kernel */
static const int head_choice[NHEAD] = {DSP_GEMM_PINNED, DSP_GEMM_WGMMA, DSP_GEMM_WGMMA_SINGLE};
static const char *head_name[NHEAD] = {"cuBLASLt pinned (heuristic's first)", "own wgmma kernel (head default)",
                                       "own wgmma kernel, single blocks"};
static int64_t kdim;

/* One product by head choice c (c >= NHEAD: part c - NHEAD + 1 of the own kernel in single blocks,
   lm_wgmma.h: the energy split). */
static dsp_status run_head(dsp_cuda_gemm *lm, int c, const void *a, const void *w, void *o, int64_t m, int64_t n,
                           cudaStream_t s) {
  if (c >= NHEAD) return dsp_bench_gemm_wg_part(a, w, o, m, n, kdim, n, c - NHEAD + 1, s);
  return dsp_cuda_gemm_run(lm, a, kdim, w, o, m, n, s);
}
#define WS_LIMIT ((size_t)4 << 20)

typedef struct {
  cublasLtMatmulAlgo_t algo;
  int id;
  uint32_t tile, stages;
  uint16_t cluster;
  size_t ws;
  float once, med;
} config;

static cublasLtHandle_t lt;
static cublasLtMatmulDesc_t op;
static cublasLtMatrixLayout_t la, lb, ld;
static void *dw, *da, *dout, *dws;
static cudaStream_t st;
static cudaEvent_t e0, e1;

static float time_algo(const cublasLtMatmulAlgo_t *algo, size_t ws, int reps) {
  const float alpha = 1.0f, beta = 0.0f;
  float t[64];
  if (reps > 64) reps = 64;
  for (int r = 0; r < reps; r++) {
    CK(cudaEventRecord(e0, st));
    CKB(cublasLtMatmul(lt, op, &alpha, dw, la, da, lb, &beta, dout, ld, dout, ld, algo, dws, ws, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t[r], e0, e1));
  }
  return median(t, reps);
}

/* n products back to back (a cuBLASLt algorithm, or the head's product when lm
 * is set): joules per product, mean watts and wall ms per product. */
static void energy_run(const bench_power *pw, const cublasLtMatmulAlgo_t *algo, size_t ws, dsp_cuda_gemm *lm, int c,
                       int64_t M, int64_t N, int n, double *j, double *w, double *ms) {
  const float alpha = 1.0f, beta = 0.0f;
  struct timespec t0, t1;
  CK(cudaStreamSynchronize(st));
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const double e0 = bench_power_joules(pw);
  for (int i = 0; i < n; i++) {
    if (lm)
      CKD(run_head(lm, c, da, dw, dout, M, N, st));
    else
      CKB(cublasLtMatmul(lt, op, &alpha, dw, la, da, lb, &beta, dout, ld, dout, ld, algo, dws, ws, st));
  }
  CK(cudaStreamSynchronize(st));
  const double e1 = bench_power_joules(pw);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double wall = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  *j = (e1 - e0) / n;
  *w = (e1 - e0) / wall;
  *ms = wall / n * 1e3;
}

static int by_once(const void *x, const void *y) {
  float a = ((const config *)x)->once, b = ((const config *)y)->once;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  long M = 224, N = 163840, K = 7168, rounds = 5, reps = 5, sweep = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    long *d = !strcmp(argv[i], "--m") ? &M : !strcmp(argv[i], "--n") ? &N : !strcmp(argv[i], "--k") ? &K
              : !strcmp(argv[i], "--rounds") ? &rounds : !strcmp(argv[i], "--reps") ? &reps
              : !strcmp(argv[i], "--sweep") ? &sweep : NULL;
    if (!d) {
      fprintf(stderr, "bench_lm: unknown option %s\n", argv[i]);
      return 2;
    }
    *d = atol(argv[i + 1]);
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("bench_lm: no CUDA device\n");
    return 77;
  }
  if (M < 1 || N < 8 || K < 8 || N % 8 || K % 8 || rounds < 1 || rounds > 50 || reps < 1 || reps > 64) {
    fprintf(stderr, "bench_lm: m >= 1, n and k positive multiples of 8, rounds 1..50, reps 1..64\n");
    return 2;
  }
  const size_t nw = (size_t)N * K, na = (size_t)M * K;
  uint16_t *h = malloc(nw * 2);
  if (!h) return 1;
  CK(cudaMalloc(&dw, nw * 2));
  CK(cudaMalloc(&da, na * 2));
  CK(cudaMalloc(&dout, (size_t)M * N * 2));
  CK(cudaMalloc(&dws, WS_LIMIT));
  fill(h, nw, 1, 0.05f);
  CK(cudaMemcpy(dw, h, nw * 2, cudaMemcpyHostToDevice));
  fill(h, na, 2, 1.0f);
  CK(cudaMemcpy(da, h, na * 2, cudaMemcpyHostToDevice));
  free(h);
  CK(cudaStreamCreate(&st));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  CKB(cublasLtCreate(&lt));
  CKB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CKB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, K));
  CKB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)K, (uint64_t)M, K));
  CKB(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, N));

  int ids[256], nid = 0;
  CKB(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, 256, ids, &nid));
  static config cfg[MAXCFG];
  int ncfg = 0, tried = 0;
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                               CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1};
  for (int a = 0; a < nid; a++) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, ids[a], &base) != CUBLAS_STATUS_SUCCESS)
      continue;
    size_t sz = 0;
    uint32_t tiles[1024], stages[256];
    int nt = 1, ns = 1;
    tiles[0] = CUBLASLT_MATMUL_TILE_UNDEFINED;
    stages[0] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
    if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_TILE_IDS, NULL, 0, &sz) == CUBLAS_STATUS_SUCCESS &&
        sz > 0 && sz <= sizeof tiles) {
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sz, &sz);
      nt = (int)(sz / 4);
    }
    if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_STAGES_IDS, NULL, 0, &sz) ==
            CUBLAS_STATUS_SUCCESS &&
        sz > 0 && sz <= sizeof stages) {
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sz, &sz);
      ns = (int)(sz / 4);
    }
    for (int t = 0; t < nt; t++)
      for (int s = 0; s < ns; s++)
        for (int c = 0; c < 4 && ncfg < MAXCFG; c++) {
          cublasLtMatmulAlgo_t al = base;
          const int32_t one = 1;
          const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
          cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], 4);
          cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[s], 4);
          cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, 4);
          cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, 4);
          if (cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &clusters[c], 2) !=
                  CUBLAS_STATUS_SUCCESS &&
              c > 0)
            continue;
          tried++;
          cublasLtMatmulHeuristicResult_t r;
          if (cublasLtMatmulAlgoCheck(lt, op, la, lb, ld, ld, &al, &r) != CUBLAS_STATUS_SUCCESS ||
              r.workspaceSize > WS_LIMIT)
            continue;
          config *q = &cfg[ncfg++];
          q->algo = al;
          q->id = ids[a];
          q->tile = tiles[t];
          q->stages = stages[s];
          q->cluster = clusters[c];
          q->ws = r.workspaceSize;
        }
  }
  if (!sweep) ncfg = 0;
  kdim = K;
  printf("bench_lm: M %ld (tokens), N %ld (vocabulary), K %ld; %d algorithm ids, %d configurations tried, %d "
         "accepted single-pass\n",
         M, N, K, nid, tried, ncfg);
  /* the head's pinned configuration, through the head's own code (left out where it
     does not run this M, e.g. a square reference shape) */
  dsp_cuda_gemm *lms[NHEAD] = {NULL, NULL, NULL};
  for (int c = 0; c < NHEAD; c++) {
    CKD(dsp_cuda_gemm_create(N, K, 0, head_choice[c], &lms[c]));
    if (dsp_cuda_gemm_prepare(lms[c], M) != DSP_OK || (c >= OWN && !strstr(dsp_cuda_gemm_describe(lms[c]), "own"))) {
      printf("%s: left out (%s)\n", head_name[c], c >= OWN ? dsp_cuda_gemm_describe(lms[c]) : dsp_error_message());
      dsp_cuda_gemm_free(lms[c]);
      lms[c] = NULL;
      continue;
    }
    printf("%s: %s\n", head_name[c], dsp_cuda_gemm_describe(lms[c]));
  }
  fflush(stdout);
  /* the own kernel (clusters of two, single blocks) against cuBLASLt's pinned product, value by value */
  for (int c = OWN; c < NHEAD && lms[0]; c++) {
    if (!lms[c]) continue;
    const size_t no = (size_t)M * (size_t)N;
    uint16_t *h = malloc(2 * no * sizeof *h);
    if (!h) return 1;
    CKD(dsp_cuda_gemm_run(lms[0], da, K, dw, dout, M, N, st));
    CK(cudaMemcpyAsync(h, dout, no * 2, cudaMemcpyDeviceToHost, st));
    CK(cudaMemsetAsync(dout, 0xFF, no * 2, st));
    CKD(dsp_cuda_gemm_run(lms[c], da, K, dw, dout, M, N, st));
    CK(cudaMemcpyAsync(h + no, dout, no * 2, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    size_t dif = 0, nan = 0;
    for (size_t i = 0; i < no; i++) {
      const int n0 = (h[i] & 0x7FFF) > 0x7F80, n1 = (h[no + i] & 0x7FFF) > 0x7F80;
      nan += n1;
      dif += n0 != n1 || (!n0 && h[i] != h[no + i]);
    }
    printf("%s vs cuBLASLt pinned: %zu values, %zu differ, %zu NaN\n", head_name[c], no, dif, nan);
    free(h);
  }

  /* the head's choices at full clock: each timed once after 0.3 s idle */
  float head_once[NHEAD] = {0};
  for (int c = 0; c < NHEAD; c++) {
    if (!lms[c]) continue;
    CKD(run_head(lms[c], c, da, dw, dout, M, N, st));
    CK(cudaStreamSynchronize(st));
    usleep(300000);
    CK(cudaEventRecord(e0, st));
    CKD(run_head(lms[c], c, da, dw, dout, M, N, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&head_once[c], e0, e1));
  }
  /* pass 1: every accepted configuration once (after one untimed run) */
  int ok = 0;
  for (int i = 0; i < ncfg; i++) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t e = cublasLtMatmul(lt, op, &alpha, dw, la, da, lb, &beta, dout, ld, dout, ld, &cfg[i].algo, dws,
                                      cfg[i].ws, st);
    if (e != CUBLAS_STATUS_SUCCESS || cudaStreamSynchronize(st) != cudaSuccess) {
      cudaGetLastError();
      cfg[i].once = 1e30f;
      continue;
    }
    usleep(3000); /* let the power controller settle: each config starts from similar clocks */
    cfg[i].once = time_algo(&cfg[i].algo, cfg[i].ws, 1);
    ok++;
  }
  qsort(cfg, (size_t)ncfg, sizeof *cfg, by_once);
  if (getenv("BENCH_LM_ALL")) /* every configuration's single timing, fastest first */
    for (int i = 0; i < ncfg; i++)
      printf("all: algo %d tile %u stages %u cluster %u ws %zu: %.3f ms\n", cfg[i].id, cfg[i].tile, cfg[i].stages,
             (unsigned)cfg[i].cluster, cfg[i].ws, cfg[i].once);
  const int top = ncfg < 12 ? ncfg : 12;
  /* pass 2: the fastest `top` and the two head choices, alternating in rounds */
  float *tm = calloc((size_t)(top + NHEAD) * (size_t)rounds, sizeof *tm);
  if (!tm) return 1;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < top; i++) tm[i * rounds + r] = time_algo(&cfg[i].algo, cfg[i].ws, (int)reps);
    for (int c = 0; c < NHEAD; c++) {
      if (!lms[c]) continue;
      float t[64];
      for (int q = 0; q < reps; q++) {
        CK(cudaEventRecord(e0, st));
        CKD(run_head(lms[c], c, da, dw, dout, M, N, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[q], e0, e1));
      }
      tm[(top + c) * rounds + r] = median(t, (int)reps);
    }
  }
  const double gflop = 2.0 * (double)M * (double)N * (double)K * 1e-9;
  printf("%d ran; fastest %d, then %ld rounds x %ld launches alternating (medians of round medians):\n", ok, top,
         rounds, reps);
  printf("%-6s %-6s %-7s %-8s %-6s %10s %10s %9s\n", "algo", "tile", "stages", "cluster", "ws", "once ms",
         "median ms", "TFLOP/s");
  for (int i = 0; i < top + NHEAD; i++) {
    if (i >= top && !lms[i - top]) continue;
    float med = median(&tm[i * rounds], (int)rounds);
    if (i < top)
      printf("%-6d %-6u %-7u %-8u %-6zu %10.3f %10.3f %9.1f\n", cfg[i].id, cfg[i].tile, cfg[i].stages,
             (unsigned)cfg[i].cluster, cfg[i].ws, cfg[i].once, med, gflop / med);
    else
      printf("%-38s %10.3f %10.3f %9.1f\n", head_name[i - top], (double)head_once[i - top], med, gflop / med);
  }
  printf("tile ids: cublasLtMatmulTile_t (e.g. 24 = 256x128, 414 = 128x224, 509 = 256x224); cluster: "
         "cublasLtClusterShape_t (0 auto, 2 1x1x1, 3 2x1x1, 5 1x2x1)\n");
  bench_power pw;
  if (bench_power_open(&pw, 0)) {
    /* entries: cuBLASLt's fastest 4, the head's choices, then the own kernel's parts (lm_wgmma.h) */
    enum { NPART = 4, EPASS = 3 };
    static const char *part_name[NPART] = {"own single: tensor-core work alone", "own single: data movement alone",
                                           "own single: weight boxes alone", "own single: activation boxes alone"};
    const double lim = bench_power_limit_w(&pw);
    const int ne = top < 4 ? top : 4, np = lms[OWN] && M <= 224 ? NPART : 0, nent = ne + NHEAD + np;
    double ej[EPASS][4 + NHEAD + NPART], ew[EPASS][4 + NHEAD + NPART], ems[EPASS][4 + NHEAD + NPART];
    CK(cudaStreamSynchronize(st));
    usleep(500000);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const double i0 = bench_power_joules(&pw);
    usleep(1000000);
    const double i1 = bench_power_joules(&pw);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double idle_w = (i1 - i0) / ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    for (int p = 0; p < EPASS; p++)
      for (int x = 0; x < nent; x++) {
        const int i = (x + p * 3) % nent; /* each pass starts elsewhere: no entry always follows the same one */
        ej[p][i] = -1.0;
        if (i >= ne && i < ne + NHEAD && !lms[i - ne]) continue;
        const double t = i < ne ? (double)median(&tm[i * rounds], (int)rounds)
                         : i < ne + NHEAD ? (double)median(&tm[(top + i - ne) * rounds], (int)rounds) : 0.7;
        const int n = (int)(1.2 / (1e-3 * t));
        usleep(200000);
        energy_run(&pw, i < ne ? &cfg[i].algo : NULL, i < ne ? cfg[i].ws : 0,
                   i < ne ? NULL : i < ne + NHEAD ? lms[i - ne] : lms[OWN],
                   i < ne ? 0 : i < ne + NHEAD ? i - ne : i - ne, M, N, n > 0 ? n : 1, &ej[p][i],
                   &ew[p][i], &ems[p][i]);
      }
    printf("energy (NVML): each entry back to back for ~1.2 s after 0.2 s idle, %d passes in rotated order "
           "(medians); power limit %.0f W, idle %.0f W:\n",
           EPASS, lim, idle_w);
    printf("%-38s %9s %8s %9s %10s %9s %12s\n", "configuration", "J each", "pJ/flop", "mean W", "ms each",
           "limit ms", "J over idle");
    for (int i = 0; i < nent; i++) {
      if (ej[0][i] < 0) continue;
      float j3[EPASS], w3[EPASS], m3[EPASS];
      for (int p = 0; p < EPASS; p++) j3[p] = (float)ej[p][i], w3[p] = (float)ew[p][i], m3[p] = (float)ems[p][i];
      const double j = median(j3, EPASS), w = median(w3, EPASS), ms = median(m3, EPASS);
      char name[64];
      if (i < ne)
        snprintf(name, sizeof name, "algo %d tile %u stages %u cluster %u", cfg[i].id, cfg[i].tile, cfg[i].stages,
                 (unsigned)cfg[i].cluster);
      else
        snprintf(name, sizeof name, "%s", i < ne + NHEAD ? head_name[i - ne] : part_name[i - ne - NHEAD]);
      printf("%-38s %9.4f %8.3f %9.0f %10.3f %9.3f %12.4f\n", name, j, j / (gflop * 1e9) * 1e12, w, ms,
             lim > 0 ? j / lim * 1e3 : 0.0, j - idle_w * ms * 1e-3);
    }
  } else {
    printf("energy: NVML not available, not measured\n");
  }
  for (int c = 0; c < NHEAD; c++) dsp_cuda_gemm_free(lms[c]);
  return 0;
}
