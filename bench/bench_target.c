/* bench_target: plain decoding with the Qwen3 target through the public API:
 * prefill and decode rates per batch size against the floor of reading the
 * weights once per decode step (bytes over the measured copy bandwidth).
 * Prompts are synthetic ids (prompt b, position i: (i * 7919 + b * 104729 +
 * 13) % vocab), so a peer (bench/hf_peer_target.py) runs the same ones.
 *
 * usage: bench_target --model DIR [--backend cpu|cuda] [--prompt P] [--new N]
 *                     [--batch 1,4,16] [--ids]   (--ids: print batch 1's ids) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "support/ceilings.h"
#include "tool_common.h"
#ifdef DSPARK_HAVE_CUDA_BENCH
#include <cuda_runtime.h>
#endif

#define TRY(x)                                                                           \
  do {                                                                                   \
    if ((x) != DSP_OK) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, dsp_error_message());   \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

/* Device-to-device copy rate of the first GPU, GB/s (read + write counted once each). */
static double gpu_copy_gbps(void) {
#ifdef DSPARK_HAVE_CUDA_BENCH
  const size_t n = (size_t)1 << 30;
  void *a, *b;
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) return 0.0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e0, 0);
  for (int i = 0; i < 10; i++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1, 0);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaFree(a), cudaFree(b);
  return 2.0 * 10 * (double)n / (ms * 1e-3) / 1e9;
#else
  return 0.0;
#endif
}

static int32_t g_count;
static int32_t g_ids[4096];
static void keep(void *ctx, int32_t seq, const int32_t *ids, int32_t n) {
  (void)ctx;
  for (int32_t i = 0; seq == 0 && i < n && g_count < 4096; i++) g_ids[g_count++] = ids[i];
}

int main(int argc, char **argv) {
  const char *model = NULL, *batches = "1,4,16";
  int64_t P = 128, N = 128;
  int print_ids = 0;
  dsp_tool_backend bk;
  dsp_tool_backend_init(&bk);
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int used = 1, br;
    if (!strcmp(o, "--model") && v) model = v;
    else if (!strcmp(o, "--prompt") && v) { if (dsp_tool_parse_i64(o, v, 1, 1 << 20, &P)) return 2; }
    else if (!strcmp(o, "--new") && v) { if (dsp_tool_parse_i64(o, v, 2, 1 << 20, &N)) return 2; }
    else if (!strcmp(o, "--batch") && v) batches = v;
    else if (!strcmp(o, "--ids")) { print_ids = 1; used = 0; }
    else if ((used = 0, br = dsp_tool_backend_option(&bk, o, v, &used)) != 1) { if (br < 0) return 2; }
    else {
      fprintf(stderr, "usage: bench_target --model DIR [--backend cpu|cuda] [--prompt P] [--new N] [--batch 1,4,16] [--ids]\n");
      return 2;
    }
    i += used;
  }
  if (!model) {
    fprintf(stderr, "bench_target: --model is required\n");
    return 2;
  }
  int32_t bs[16], nb = 0;
  for (const char *p = batches; *p && nb < 16;) {
    bs[nb++] = (int32_t)strtol(p, (char **)&p, 10);
    if (*p == ',') p++;
  }
  int32_t bmax = 1;
  for (int i = 0; i < nb; i++) bmax = bs[i] > bmax ? bs[i] : bmax;
  dsp_comm *comm;
  TRY(dsp_comm_auto_create(&comm));
  dsp_backend *be;
  TRY(dsp_tool_backend_create(&bk, comm, &be));
  dsp_target_options o = {.max_seqs = bmax, .max_len = (int32_t)(P + N), .max_tokens = (int32_t)(P * bmax)};
  dsp_target *t;
  TRY(dsp_target_load(be, model, &o, &t));
  const dsp_target_info *in = dsp_target_info_of(t);
  fprintf(stderr, "%s\n", dsp_target_report(t));
  const double H = (double)in->hidden, D = (double)in->head_dim, I = (double)in->intermediate;
  const double per_layer = H * (in->heads + 2.0 * in->kv_heads) * D + in->heads * D * H + 3.0 * H * I;
  const double wbytes = 2.0 * ((double)in->layers * per_layer + (double)in->vocab * H);
  const double gbps = bk.kind == DSP_BACKEND_CUDA ? gpu_copy_gbps() : dsp_cpu_measure_copy_gbps();
  int32_t **prompts = malloc((size_t)bmax * sizeof *prompts), *lens = malloc((size_t)bmax * 4);
  for (int32_t b = 0; b < bmax; b++) {
    prompts[b] = malloc((size_t)P * 4);
    lens[b] = (int32_t)P;
    for (int64_t i = 0; i < P; i++) prompts[b][i] = (int32_t)((i * 7919 + b * 104729 + 13) % in->vocab);
  }
  printf("# bench_target: %s, %s backend, prompt %lld, new %lld; weights %.2f GB, copy %.0f GB/s\n", model,
         bk.kind == DSP_BACKEND_CUDA ? "cuda" : "cpu", (long long)P, (long long)N, wbytes / 1e9, gbps);
  printf("| batch | prefill ms | prefill tok/s | decode ms/step | decode tok/s | floor ms/step | of floor |\n");
  printf("|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < nb; i++) {
    const int32_t B = bs[i];
    dsp_generate_options go = {.max_new = (int32_t)N, .ignore_eos = 1};
    dsp_generate_stats st;
    g_count = 0;
    /* a warm-up run, then the measured one */
    TRY(dsp_generate(t, B, (const int32_t *const *)prompts, lens, &go, keep, NULL, NULL, &st));
    g_count = 0;
    TRY(dsp_generate(t, B, (const int32_t *const *)prompts, lens, &go, keep, NULL, NULL, &st));
    const double step = st.decode_ms / (double)st.decode_calls;
    /* floor: the weights once per step, plus the KV cache read at the mean length */
    const double kv = 2.0 * 2.0 * (double)in->layers * in->kv_heads * D * (double)B * (P + N / 2.0);
    const double floor_ms = gbps > 0 ? (wbytes + kv) / (gbps * 1e9) * 1e3 : 0.0;
    printf("| %d | %.2f | %.0f | %.3f | %.1f | %.3f | %.0f%% |\n", B, st.prefill_ms,
           (double)st.prompt_tokens / (st.prefill_ms * 1e-3), step, (double)B / (step * 1e-3), floor_ms,
           floor_ms > 0 ? 100.0 * floor_ms / step : 0.0);
    if (print_ids && B == 1) {
      printf("ids:");
      for (int32_t k = 0; k < g_count; k++) printf(" %d", g_ids[k]);
      printf("\n");
    }
    fflush(stdout);
  }
  for (int32_t b = 0; b < bmax; b++) free(prompts[b]);
  free(prompts), free(lens);
  dsp_target_free(t);
  dsp_backend_free(be);
  dsp_comm_free(comm);
  return 0;
}
