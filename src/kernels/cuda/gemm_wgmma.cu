/* The bf16 NT GEMM on the warpgroup tensor cores: the product's entry points
 * and its token-tile and cluster check (gemm_wgmma.h). */
#include "kernels/cuda/gemm_wgmma_kernel.cuh"


extern "C" int dsp_cuda_gemm_wg_supported(int64_t k) {
  if (k < LW_BK || k % LW_BK || k > INT32_MAX) return 0;
  const lw_dev dv = lw_device();
  return dv.ok && lw_stages<256>(dv.optin) >= 2 && lw_stages<64, 1, 64>(dv.optin) >= 2;
}

/* The operands both entry points need: this device, K in 64s, 8-element strides, 16-byte alignment. */
static dsp_status wg_operands(const lw_dev &dv, const void *a, int64_t lda, const void *w, int64_t n, int64_t k,
                              int64_t ldo) {
  if (!dv.ok || k % LW_BK || ldo % 8 || ldo < n || lda % 8 || lda < k || (uintptr_t)a % 16 || (uintptr_t)w % 16)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "cuda gemm (wgmma): not supported here (K %lld, lda %lld, ldo %lld)",
                    (long long)k, (long long)lda, (long long)ldo);
  return DSP_OK;
}

extern "C" dsp_status dsp_cuda_gemm_wg_run(const void *a, int64_t lda, const void *w, void *out, int64_t m, int64_t n,
                                           int64_t k, int64_t ldo, int nt, int cluster, int pdl, int f32,
                                           cudaStream_t s) {
  if (m < 1) return DSP_OK;
  const lw_dev &dv = lw_dev_once();
  DSP_TRY(wg_operands(dv, a, lda, w, n, k, ldo));
  if (nt == 0) nt = dsp_cuda_gemm_wg_tile(m, n);
  if (cluster == 0)
    cluster = nt == 32    ? lw_default_cluster<32, 64>(dv, s)
              : nt == 64  ? lw_default_cluster<64, 64>(dv, s)
              : nt == 112 ? lw_default_cluster<112>(dv, s)
              : nt == 128 ? lw_default_cluster<128>(dv, s)
              : nt == (112 | DSP_WG_NARROW) ? lw_default_cluster<112, 64>(dv, s)
              : nt == (128 | DSP_WG_NARROW) ? lw_default_cluster<128, 64>(dv, s)
              : nt == 224 ? lw_default_cluster<224>(dv, s)
                          : lw_default_cluster<256>(dv, s);
  if (cluster != 1 && cluster != 2)
    return dsp_fail(DSP_ERR_ARG, "cuda gemm (wgmma): cluster %d (1 or 2)", cluster);
  if (nt == 32) return cluster == 2 ? lw_launch<32, 2, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                                    : lw_launch<32, 1, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (nt == 64) return cluster == 2 ? lw_launch<64, 2, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                                    : lw_launch<64, 1, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (nt == 112) return cluster == 2 ? lw_launch<112, 2>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                                     : lw_launch<112, 1>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (nt == 128) return cluster == 2 ? lw_launch<128, 2>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                                     : lw_launch<128, 1>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (nt == (112 | DSP_WG_NARROW))
    return cluster == 2 ? lw_launch<112, 2, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                        : lw_launch<112, 1, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (nt == (128 | DSP_WG_NARROW))
    return cluster == 2 ? lw_launch<128, 2, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                        : lw_launch<128, 1, 0, 1, 64>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (nt == 224) return cluster == 2 ? lw_launch<224, 2>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                                     : lw_launch<224, 1>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (nt == 256) return cluster == 2 ? lw_launch<256, 2>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32)
                                     : lw_launch<256, 1>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  return dsp_fail(DSP_ERR_ARG, "cuda gemm (wgmma): token tile %#x (32, 64, 112, 128, 224 or 256; 112 or 128 narrow)", nt);
}

/* Past 64 rows: waves of tiles times a tile's time, 0.6 for 112 tokens against 1 for 224 (an H200's
 * per-k-block times, bench/RESULTS.md, sixteenth session), 256 / 224 for 256 and 128 / 112 of 112's for 128
 * (assumed in proportion to their columns). The narrow tiles (64 weight rows, half the products) cost 13 and 15,
 * assumed 0.6 of their wide forms': they take about 0.9, bound like them by what each SM takes in from L2, yet
 * on an H100 at 96-256 rows auto came within 1% of the best forced tile on every Qwen3-8B product
 * (bench/RESULTS.md, forty-eighth session). Ties go to the earlier entry. A prefill's 2048 rows: 8 tiles of 256
 * against 10 of 224, whose third wave over 132 SMs is 42% full at N 4096. A batch-32 verify's 256 rows: two
 * tiles of 128 with no row wasted, where 224 wastes 192 rows of its second tile; at N 4096 those are 64 tiles on
 * 132 SMs, the narrow 128 makes them 128. */
static_assert(DSP_WG_NARROW == DSP_ENV_GEMM_NARROW, "DSPARK_GEMM_TILE's narrow tiles are this kernel's");
extern "C" int dsp_cuda_gemm_wg_tile(int64_t m, int64_t n) {
  const int t = dsp_env_get()->gemm_tile;
  if (t) return t;
  if (m <= 64) return m <= 32 ? 32 : 64;
  const int64_t sms = lw_dev_once().sms > 0 ? lw_dev_once().sms : 1;
  /* per k block, in 35ths of a 224 tile's */
  const int tiles[6] = {112, 128, 224, 256, 112 | DSP_WG_NARROW, 128 | DSP_WG_NARROW}, cost[6] = {21, 24, 35, 40, 13, 15};
  int best = 0;
  long long bc = -1;
  for (int i = 0; i < 6; i++) {
    const int nt = tiles[i] & ~DSP_WG_NARROW, bm = tiles[i] & DSP_WG_NARROW ? 64 : LW_BM;
    const long long c = ((m + nt - 1) / nt * ((n + bm - 1) / bm) + sms - 1) / sms * cost[i];
    if (bc < 0 || c < bc) bc = c, best = i;
  }
  return tiles[best];
}

/* Rounds of tiles per cluster times (k blocks per tile + the hand-over of a
 * split tile, counted as 12 k blocks: fitted to the H200's per-shape times,
 * bench/RESULTS.md, fourteenth session). */
static long long split_cost(int64_t nvt, int64_t nkb, int sk, int clusters) {
  if (clusters < 1 || nkb < 4 * sk || nkb % sk) return -1;
  return (long long)((nvt + clusters - 1) / clusters) * (nkb / sk + (sk > 1 ? 12 : 0));
}

extern "C" int dsp_cuda_gemm_wg_split_choice(int64_t n, int64_t k) {
  if (!dsp_cuda_gemm_wg_supported(k) || n < 1) return 1;
  const lw_dev &dv = lw_dev_once();
  const int64_t nvt = (n + LW_BM - 1) / LW_BM, nkb = k / LW_BK;
  /* unsplit: the default instance, pairs of vocabulary tiles per cluster where it uses them */
  const int cl = lw_default_cluster<112>(dv, 0);
  long long best = split_cost((nvt + cl - 1) / cl, nkb, 1, dv.sms / cl);
  int pick = 1;
  /* a split must be strictly cheaper than none; among splits, ties go to the larger */
  const int res[3] = {lw_split_resident<112, 8>(dv), lw_split_resident<112, 4>(dv), lw_split_resident<112, 2>(dv)};
  for (int i = 0; i < 3; i++) {
    const long long c = split_cost(nvt, nkb, 8 >> i, res[i]);
    if (c >= 0 && (best < 0 || c < best)) best = c, pick = 8 >> i;
  }
  return pick;
}

extern "C" int dsp_cuda_gemm_wg_split_runs(int split) {
  const lw_dev &dv = lw_dev_once();
  if (!dv.ok) return 0;
  return split == 2 ? lw_split_resident<112, 2>(dv) > 0
         : split == 4 ? lw_split_resident<112, 4>(dv) > 0
         : split == 8 ? lw_split_resident<112, 8>(dv) > 0
                      : 0;
}

extern "C" dsp_status dsp_cuda_gemm_wg_split_run(const void *a, int64_t lda, const void *w, void *out, int64_t m,
                                                 int64_t n, int64_t k, int64_t ldo, int split, int pdl, int f32,
                                                 cudaStream_t s) {
  if (m < 1) return DSP_OK;
  const lw_dev &dv = lw_dev_once();
  DSP_TRY(wg_operands(dv, a, lda, w, n, k, ldo));
  if (split == 2) return lw_launch<112, 1, 0, 2>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (split == 4) return lw_launch<112, 1, 0, 4>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  if (split == 8) return lw_launch<112, 1, 0, 8>(a, lda, w, out, m, n, k, ldo, dv, s, pdl, f32);
  return dsp_fail(DSP_ERR_ARG, "cuda gemm (wgmma): split %d (2, 4 or 8)", split);
}

#define NVAR 15 /* (token tile, cluster) pairs the check compares with (224, 2) */
extern "C" dsp_status dsp_cuda_gemm_wg_check(int64_t k, long long *compared, long long *differ) {
  const int64_t M = 224, N = 512;
  *compared = *differ = 0;
  uint16_t *buf = NULL;
  const size_t na = (size_t)(M * k), nw = (size_t)(N * k), no = (size_t)(M * N);
  DSP_CUDA_TRY(cudaMalloc(&buf, (na + nw + 2 * no) * 2));
  uint16_t *a = buf, *w = buf + na, *o1 = w + nw, *o2 = o1 + no;
  dsp_status st = DSP_OK;
  cudaStream_t s = NULL;
  uint16_t *h = (uint16_t *)malloc((NVAR + 1) * no * 2);
  if (!h) st = dsp_fail(DSP_ERR_NOMEM, "cuda gemm (wgmma) check: out of memory");
  if (st == DSP_OK && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cudaStreamCreate: %s", __FILE__, __LINE__,
                  cudaGetErrorString(cudaGetLastError()));
  if (st == DSP_OK) {
    dsp_check_fill<<<(unsigned)((na + 255) / 256), 256, 0, s>>>(a, na, 0x1234u);
    dsp_check_fill<<<(unsigned)((nw + 255) / 256), 256, 0, s>>>(w, nw, 0xBEEFu);
    st = dsp_cuda_gemm_wg_run(a, k, w, o1, M, N, k, N, 224, 2, 0, 0, s);
  }
  /* the other (token tile, cluster) pairs in turn against (224, 2) */
  const int other[NVAR][2] = {{112, 2}, {224, 1}, {112, 1}, {32, 2}, {32, 1}, {64, 2}, {64, 1}, {256, 2}, {256, 1},
                              {128, 2}, {128, 1}, {112 | DSP_WG_NARROW, 2}, {112 | DSP_WG_NARROW, 1},
                              {128 | DSP_WG_NARROW, 2}, {128 | DSP_WG_NARROW, 1}};
  for (int v = 0; v < NVAR && st == DSP_OK; v++) {
    st = dsp_cuda_gemm_wg_run(a, k, w, o2, M, N, k, N, other[v][0], other[v][1], 0, 0, s);
    if (st == DSP_OK && (cudaMemcpyAsync(h + (size_t)v * no, o2, no * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess))
      st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cuda gemm (wgmma) check: %s", __FILE__, __LINE__,
                    cudaGetErrorString(cudaGetLastError()));
  }
  if (st == DSP_OK && (cudaMemcpyAsync(h + NVAR * no, o1, no * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
                       cudaStreamSynchronize(s) != cudaSuccess))
    st = dsp_fail(DSP_ERR_DEVICE, "%s:%d: cuda gemm (wgmma) check: %s", __FILE__, __LINE__,
                  cudaGetErrorString(cudaGetLastError()));
  if (st == DSP_OK) {
    for (size_t v = 0; v < NVAR; v++)
      for (size_t i = 0; i < no; i++) *differ += h[v * no + i] != h[NVAR * no + i];
    *compared = NVAR * (long long)no;
  }
  if (s) cudaStreamDestroy(s);
  free(h);
  cudaFree(buf);
  return st;
}
