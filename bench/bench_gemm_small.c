/* The few-row GEMM (kernels/cuda/gemm_small.h) at Qwen3-8B's decode shapes, by launch shape.
 *
 * Per product shape, `layers` distinct weights (so that nothing stays in the 50 MB L2 between products, as in a
 * decode step) are multiplied one after another inside one captured CUDA graph, launched programmatically (PDL)
 * as the model's graphs launch them; the graph is replayed and the time per product printed against its byte
 * floor (the weight, activation and output bytes over the device copy rate measured in the same run). Each
 * launch shape (consumer warps a block, boxes of [64 k] a stage, stages) is checked bit for bit against the
 * kernel's own pick; the shape "wg" runs the warpgroup kernel (gemm_wgmma.h) instead, which products of more rows
 * take, so the two compare at the same M. Question it answers: what bounds a product whose strips give each SM
 * only two or three warps (the 4096-row products), which shape of the ring streams it fastest, and up to how many
 * rows the few-row kernel beats the warpgroup one. The shapes "sl" and "sp" run a weight in --slices K slices
 * (gemm.h, dsp_cuda_gemm_slice) on the few-row kernel and on the cluster split: what the TP-invariant order costs;
 * their bits are compared with each other's (the same tree), not with the one sum over K.
 * usage: bench_gemm_small [--m 1,8] [--layers 8] [--reps 20] [--slices 8] [--shapes C:SB:ST|wg|sl|sp,...]
 * (0 = the kernel's pick) */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda_util.h"
#include "kernels/cuda/gemm_small.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "support/rates.h"

typedef struct {
  const char *name;
  int64_t n, k;
} shape;

int main(int argc, char **argv) {
  const char *mlist = "1,8", *slist = "0:0:0,0:2:4,0:4:6,4:0:0";
  long layers = 8, reps = 20, slices = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--m")) mlist = argv[i + 1];
    else if (!strcmp(argv[i], "--shapes")) slist = argv[i + 1];
    else if (!strcmp(argv[i], "--layers")) layers = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--slices")) slices = atol(argv[i + 1]);
    else {
      fprintf(stderr, "bench_gemm_small: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (argc % 2 == 0 || layers < 1 || layers > 64 || reps < 1 || (slices != 2 && slices != 4 && slices != 8)) {
    fprintf(stderr, "usage: bench_gemm_small [--m 1,8] [--layers 8] [--reps 20] [--slices 2|4|8] "
                    "[--shapes C:SB:ST|wg|sl|sp,...]\n");
    return 2;
  }
  int32_t ms[8];
  int nm = 0;
  int32_t mmax = 0;
  if (dsp_bench_batches(mlist, ms, 8, &nm, &mmax) || mmax > DSP_GEMM_SMALL_MAX_M) {
    fprintf(stderr, "bench_gemm_small: --m takes up to 8 row counts of 1..%d\n", DSP_GEMM_SMALL_MAX_M);
    return 2;
  }
  int cfg[16][3], ncfg = 0;
  for (const char *p = slist; *p && ncfg < 16;) {
    const int word = p[0] && p[1] && (p[2] == ',' || !p[2]);
    if (word && !strncmp(p, "wg", 2)) cfg[ncfg][0] = -1, cfg[ncfg][1] = cfg[ncfg][2] = 0;
    else if (word && !strncmp(p, "sl", 2)) cfg[ncfg][0] = -2, cfg[ncfg][1] = cfg[ncfg][2] = 0;
    else if (word && !strncmp(p, "sp", 2)) cfg[ncfg][0] = -3, cfg[ncfg][1] = cfg[ncfg][2] = 0;
    else if (sscanf(p, "%d:%d:%d", &cfg[ncfg][0], &cfg[ncfg][1], &cfg[ncfg][2]) != 3) {
      fprintf(stderr, "bench_gemm_small: --shapes takes C:SB:ST triples, wg, sl or sp\n");
      return 2;
    }
    ncfg++;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  const shape shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate/up", 24576, 4096}, {"down", 4096, 12288}};
  dsp_backend *be = NULL;
  const dsp_backend_config bc = {.kind = DSP_BACKEND_CUDA};
  CKD(dsp_backend_create(&bc, &be));
  const double gbps = dsp_bench_copy_rate(be) * 1e-9; /* the backend's copy, as the model benchmarks' floors */
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs; copy %.0f GB/s (measured now); %ld distinct weights a product, graph replay, PDL\n",
         prop.name, prop.multiProcessorCount, gbps, layers);
  printf("| product | M | C:SB:ST | us | floor us | x floor | bits |\n|---|---|---|---|---|---|---|\n");
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const int64_t N = shapes[si].n, K = shapes[si].k;
    const size_t wn = (size_t)(N * K);
    const int64_t MM = DSP_GEMM_SMALL_MAX_M;
    uint16_t *h = malloc(wn * 2 > (size_t)(MM * K) * 2 ? wn * 2 : (size_t)(MM * K) * 2);
    uint16_t *ref = malloc((size_t)(MM * N) * 2), *got = malloc((size_t)(MM * N) * 2);
    uint16_t *tree = malloc((size_t)(MM * N) * 2); /* the first sliced shape's outputs */
    if (!h || !ref || !got || !tree) return 1;
    void *w[64], *a, *o;
    fill(h, wn, 11 + si, 0.05f);
    for (long l = 0; l < layers; l++) {
      CK(cudaMalloc(&w[l], wn * 2));
      CK(cudaMemcpy(w[l], h, wn * 2, cudaMemcpyHostToDevice));
    }
    fill(h, (size_t)(MM * K), 5, 1.0f);
    CK(cudaMalloc(&a, (size_t)(MM * K) * 2));
    CK(cudaMemcpy(a, h, (size_t)(MM * K) * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&o, (size_t)(MM * N) * 2));
    for (int mi = 0; mi < nm; mi++) {
      const int64_t M = ms[mi];
      const double floor_us = (double)(wn + M * K + M * N) * 2 / (gbps * 1e9) * 1e6;
      int trees = 0, refs = 0; /* sliced and plain shapes so far: the first of each is the reference */
      for (int c = 0; c < ncfg; c++) {
        const int sliced = cfg[c][0] <= -2;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (long l = 0; l < layers; l++)
          if (cfg[c][0] == -1) CKD(dsp_cuda_gemm_wg_run(a, K, w[l], o, M, N, K, N, 0, 0, 1, 0, s));
          else if (cfg[c][0] == -2) CKD(dsp_cuda_gemm_small_run(a, K, w[l], o, M, N, K, N, (int)slices, 1, NULL, 0, s));
          else if (cfg[c][0] == -3) CKD(dsp_cuda_gemm_wg_split_run(a, K, w[l], o, M, N, K, N, (int)slices, 1, 0, s));
          else
            CKD(dsp_cuda_gemm_small_run(a, K, w[l], o, M, N, K, N, 1, 1,
                                        &(dsp_gemm_small_shape){cfg[c][0], cfg[c][1], cfg[c][2]}, 0, s));
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(sliced ? (trees ? got : tree) : (refs ? got : ref), o, (size_t)(M * N) * 2,
                      cudaMemcpyDeviceToHost));
        double t[5];
        for (int r = 0; r < 5; r++) {
          CK(cudaEventRecord(e0, s));
          for (long i = 0; i < reps; i++) CK(cudaGraphLaunch(ge, s));
          CK(cudaEventRecord(e1, s));
          CK(cudaEventSynchronize(e1));
          float ms_;
          CK(cudaEventElapsedTime(&ms_, e0, e1));
          t[r] = (double)ms_ * 1e3 / (double)(reps * layers);
        }
        const double us = dsp_bench_median(t, 5);
        const int same = sliced ? !trees || !memcmp(tree, got, (size_t)(M * N) * 2)
                                : !refs || !memcmp(ref, got, (size_t)(M * N) * 2);
        const char *bits = sliced ? (!trees ? "tree ref" : same ? "same tree" : "DIFFER")
                                  : (!refs ? "ref" : same ? "same" : "DIFFER");
        trees += sliced, refs += !sliced;
        char how[32];
        if (cfg[c][0] == -1) snprintf(how, sizeof how, "wgmma");
        else if (cfg[c][0] == -2) snprintf(how, sizeof how, "%ld slices", slices);
        else if (cfg[c][0] == -3) snprintf(how, sizeof how, "split %ld", slices);
        else snprintf(how, sizeof how, "%d:%d:%d", cfg[c][0], cfg[c][1], cfg[c][2]);
        printf("| %s %lld x %lld | %lld | %s | %.2f | %.2f | %.2f | %s |\n", shapes[si].name, (long long)N,
               (long long)K, (long long)M, how, us, floor_us, us / floor_us, bits);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
      }
    }
    for (long l = 0; l < layers; l++) CK(cudaFree(w[l]));
    CK(cudaFree(a));
    CK(cudaFree(o));
    free(h), free(ref), free(got), free(tree);
  }
  dsp_backend_free(be);
  return 0;
}
