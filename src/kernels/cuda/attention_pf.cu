/* GQA attention for long runs of rows on one slot (prefill) on the tensor cores,
 * with the tensor-core form's bits (attention_tc.cu's head gives every order):
 * q.k in the same 16-dim mma steps, z per 128-key chunk as 32 lane partials
 * over keys 128c + i + 32u and the same xor tree, p.v per chunk in 16-key
 * mma groups onto +0, the chunks added in order. That form keeps a run's
 * scores in shared memory (a cluster's), which bounds its cache and lets 32
 * (row, head) pairs at most share a key load; here the scores are computed
 * three times instead (max, z, then p and p.v), so a block's 16 W pairs share
 * every K and V tile staged in shared memory and a cache of any length fits.
 * A warp owns 16 pairs (one m-tile) and all D dims of their outputs. Its
 * score fragment holds, per row, keys 2q, 2q + 1 of each 8-key tile: tile j of
 * a chunk is u = j / 4, t = j % 4 of the lane partials i = 8t + 2q + e, so the
 * tree's xor steps 16 and 8 are the thread's own t pairs, 4 and 2 its quad
 * (lane xor 2, 1), 1 its e pair. */
#include <stdint.h>

#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/common/launch.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/sync.cuh"
#include "kernels/cuda/layers.h"

#define PF_TILE 32   /* keys per staged K / V tile: four make one 128-key chunk */
#define PF_WARPS 4   /* 64 pairs a block */
#define PF_STAGES 2  /* K (and in the last pass V) tiles in flight; with the totals 70 KB at D 128, three blocks an SM */
#define PF_CPT (128 / PF_TILE) /* staged tiles a 128-key chunk */

/* K rows 16 words apart modulo the 32 banks: a quarter warp's two rows of 16-byte loads take all banks once. */
__host__ __device__ constexpr int pf_kpitch(int D) { return (D / 2) % 32 == 0 ? D + 32 : D; }
/* K and V tiles, PF_STAGES each ([PF_TILE][D + pad]; q is staged in the value tiles before they are first filled),
   then the fp32 p.v totals, a warp's 16 pairs x D in its lanes' fragment order: in shared memory, not registers, so
   the kernel fits 168 registers and three blocks (12 warps) an SM, where 245 registers held it to two */
static size_t pf_smem(int64_t D) {
  return (size_t)PF_STAGES * PF_TILE * (pf_kpitch((int)D) + D + 8) * 2 + (size_t)PF_WARPS * 16 * D * 4;
}

/* s = bf16(bf16(q.k) x scale) with the hardware rounding: the contract's bits (a NaN score is passed over by the
   max and gives a NaN p, whose payload the output's own rounding makes canonical) */
__device__ __forceinline__ float pf_score(float acc, float scale) {
  return dsp_dev_round_bf16_hw(__fmul_rn(dsp_dev_round_bf16_hw(acc), scale));
}
/* Scores of N consecutive 8-key tiles of the staged K from tile nt0 for this thread's rows g, g + 8 (e >> 1) and
 * keys 2q, 2q + 1 (e & 1): each tile's sum runs the tensor-core form's k steps in order; the N chains are
 * interleaved so consecutive mma are independent (a tile at a time, each mma waited on the one before). */
template <int N, int DC, int KP>
__device__ __forceinline__ void pf_qk(const uint16_t *kt, int nt0, int g, int q, const uint32_t (&qa)[DC][2][4],
                                      float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int c = 0; c < DC; c++) {
    uint4 kw[N];
#pragma unroll
    for (int n = 0; n < N; n++) kw[n] = *(const uint4 *)(kt + ((nt0 + n) * 8 + g) * KP + 32 * c + 8 * q);
#pragma unroll
    for (int n = 0; n < N; n++)
      dsp_mma16816(acc[n], qa[c][0][0], qa[c][0][1], qa[c][0][2], qa[c][0][3], kw[n].x, kw[n].y);
#pragma unroll
    for (int n = 0; n < N; n++)
      dsp_mma16816(acc[n], qa[c][1][0], qa[c][1][1], qa[c][1][2], qa[c][1][3], kw[n].z, kw[n].w);
  }
}

template <int DC, int W>
__global__ void __launch_bounds__(32 * W, 12 / W) k_attention_pf(dsp_cu_attention_args a) {
  dsp_dev_launch_dependents();
  dsp_dev_grid_wait();
  constexpr int D = 32 * DC, KP = pf_kpitch(D), VP = D + 8, QP = D + 8, NP = 16 * W, NT = D / 8, NTH = 32 * W;
  constexpr int TT = PF_TILE / 8; /* 8-key tiles a staged tile */
  static_assert(NP * QP <= PF_STAGES * PF_TILE * VP, "q fits the value tiles");
  static_assert(NTH % (D / 8) == 0 && PF_TILE % (NTH / (D / 8)) == 0, "a thread copies whole 16-byte columns");
  extern __shared__ __align__(16) unsigned char pf_sm[];
  uint16_t *ks = (uint16_t *)pf_sm, *vs = ks + PF_STAGES * PF_TILE * KP, *qs = vs;
  float *tots = (float *)(vs + PF_STAGES * PF_TILE * VP); /* [W][NT x 4][32]: a thread's totals a lane apart */
  __shared__ int nks[NP];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int group = (int)(a.q.heads / a.kv_heads);
  const int64_t ts = a.kv_stride, rb = a.rows_per_block;
  /* blocks in order of work, the KV heads innermost: a causal run's last rows (the most keys) of every head
     first, so the blocks started last are the shortest */
  const int64_t nkv = a.kv_heads, tiles = gridDim.x / nkv, kvh = blockIdx.x % nkv, h0 = kvh * group;
  const int64_t t0 = (tiles - 1 - (int64_t)(blockIdx.x / nkv)) * rb;
  const int64_t tend = t0 + rb < a.q.rows ? t0 + rb : a.q.rows;
  const float scale = a.scale;
  /* the max of the scores: of the raw sums, rounded once, where the scale is positive and finite (the
     roundings and the product are then monotonic, so they commute with the max) */
  const bool mono = scale > 0.0f && scale < INFINITY;
  /* this thread's copies: 16-byte column cr of rows rr, rr + NTH / (D / 8), ... of a tile */
  const int cr = tid % (D / 8), rr = tid / (D / 8);
  constexpr int RSTEP = NTH / (D / 8);
  for (int64_t r0 = t0; r0 < tend;) {
    const int64_t slot = dsp_att_slot(a, r0), re = dsp_att_run_end(a, r0, tend);
    const int np = (int)(re - r0) * group;
    if (tid < NP) nks[tid] = tid < np ? (int)dsp_att_keys(a, r0 + tid / group) : 0;
    dsp_att_stage_q<D, QP>(a, qs, r0, h0, np, NP, group, tid, NTH);
    __syncthreads();
    int nkmax = 1;
    for (int p = 0; p < np; p++) nkmax = nks[p] > nkmax ? nks[p] : nkmax;
    const int pa = 16 * warp + g, na = nks[pa], nb = nks[pa + 8];
    int wmax = na > nb ? na : nb, wmin = na < nb ? na : nb; /* the warp's longest pair (tiles past it are skipped)
                                                               and shortest (tiles before it need no mask) */
    for (int o = 16; o > 0; o >>= 1) {
      const int y = __shfl_xor_sync(0xffffffffu, wmax, o), y2 = __shfl_xor_sync(0xffffffffu, wmin, o);
      wmax = y > wmax ? y : wmax, wmin = y2 < wmin ? y2 : wmin;
    }
    /* q fragments as the tensor-core form takes them: k step 2c + u reads words 2u, 2u + 1 of the 16-byte piece
       at dims 32c + 8q (loaded a word at a time, so each fragment's four registers are allocated together) */
    uint32_t qa[DC][2][4];
    const volatile uint32_t *qw = (const volatile uint32_t *)qs; /* volatile: not merged into 8-byte loads */
#pragma unroll
    for (int c = 0; c < DC; c++)
#pragma unroll
      for (int u = 0; u < 2; u++) {
        const int w = 16 * c + 4 * q + 2 * u;
        qa[c][u][0] = qw[pa * (QP / 2) + w], qa[c][u][1] = qw[(pa + 8) * (QP / 2) + w];
        qa[c][u][2] = qw[pa * (QP / 2) + w + 1], qa[c][u][3] = qw[(pa + 8) * (QP / 2) + w + 1];
      }
    __syncthreads(); /* q is read before the first value tile (issued up to PF_STAGES - 1 steps early) lands on it */
    const uint16_t *kb = a.k + (slot * a.max_len) * ts + kvh * D + 8 * cr, *vb = a.v + (slot * a.max_len) * ts + kvh * D + 8 * cr;
    /* steps: the K tiles for the max, again for z, then K and V tiles for p and p.v; keys past the run's are zeros */
    const int ntl = (nkmax + PF_TILE - 1) / PF_TILE, nsteps = 3 * ntl;
    /* steps are issued in order, so the next one's number and tile are counted, not divided out of s */
    int is = 0, itl = 0;
    auto issue = [&]() { /* a group for every step, empty past the last, so the waits count steps */
      if (is < nsteps) {
        const int k0 = itl * PF_TILE, st = is % PF_STAGES;
        const uint32_t kd = dsp_att_saddr(ks + (st * PF_TILE + rr) * KP + 8 * cr), vd = dsp_att_saddr(vs + (st * PF_TILE + rr) * VP + 8 * cr);
#pragma unroll
        for (int j = 0; j < PF_TILE / RSTEP; j++) {
          const int key = k0 + rr + j * RSTEP;
          const bool ok = key < nkmax;
          const int64_t off = (int64_t)(ok ? key : 0) * ts;
          dsp_cp16(kd + j * RSTEP * KP * 2, kb + off, ok);
          if (is >= 2 * ntl) dsp_cp16(vd + j * RSTEP * VP * 2, vb + off, ok);
        }
      }
      dsp_cp_commit();
      is++, itl = itl + 1 == ntl ? 0 : itl + 1;
    };
    auto step = [&]() {
      issue();
      dsp_cp_wait<PF_STAGES - 1>();
      __syncthreads();
    };
    for (int i = 0; i < PF_STAGES - 1; i++) issue();

    float mx[2] = {-INFINITY, -INFINITY};
    for (int tl = 0; tl < ntl; tl++) {
      step();
      const int kt0 = tl * PF_TILE;
      if (kt0 < wmax) {
        float acc[TT][4];
        pf_qk<TT, DC, KP>(ks + (tl % PF_STAGES) * PF_TILE * KP, 0, g, q, qa, acc);
        if (mono && kt0 + PF_TILE <= wmin) { /* every key of the tile inside every pair of the warp: no mask */
#pragma unroll
          for (int nt = 0; nt < TT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], acc[nt][e]);
        } else {
#pragma unroll
          for (int nt = 0; nt < TT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) { /* fmaxf, as the comparison, passes over a NaN */
              const int h = e >> 1, key = kt0 + nt * 8 + 2 * q + (e & 1);
              const float x = key < (h ? nb : na) ? (mono ? acc[nt][e] : pf_score(acc[nt][e], scale)) : -INFINITY;
              mx[h] = fmaxf(mx[h], x);
            }
        }
      }
      __syncthreads(); /* every warp has read this step's tiles before they are refilled */
    }
#pragma unroll
    for (int h = 0; h < 2; h++) { /* the max per row: the quad's keys (exact in any order) */
      for (int o = 1; o <= 2; o <<= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
      if (mono) mx[h] = pf_score(mx[h], scale);
    }

    float z[2] = {0.0f, 0.0f}, zc[2][4][2];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int t = 0; t < 4; t++) zc[h][t][0] = zc[h][t][1] = 0.0f;
    for (int tl = 0; tl < ntl; tl++) {
      const int s = ntl + tl, kt0 = tl * PF_TILE;
      step();
      if (kt0 < wmax) {
        float acc[TT][4];
        pf_qk<TT, DC, KP>(ks + (s % PF_STAGES) * PF_TILE * KP, 0, g, q, qa, acc);
        if (kt0 + PF_TILE <= wmin) { /* no key of the tile masked */
#pragma unroll
          for (int nt = 0; nt < TT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
              zc[e >> 1][nt & 3][e & 1] =
                  __fadd_rn(zc[e >> 1][nt & 3][e & 1], expf(__fsub_rn(pf_score(acc[nt][e], scale), mx[e >> 1])));
        } else {
#pragma unroll
          for (int nt = 0; nt < TT; nt++) /* keys in increasing order onto each lane partial (a masked key adds +0) */
#pragma unroll
            for (int e = 0; e < 4; e++) {
              const int h = e >> 1, key = kt0 + nt * 8 + 2 * q + (e & 1);
              const float x = expf(__fsub_rn(pf_score(acc[nt][e], scale), mx[h]));
              zc[h][nt & 3][e & 1] = __fadd_rn(zc[h][nt & 3][e & 1], key < (h ? nb : na) ? x : 0.0f);
            }
        }
      }
      if (tl % PF_CPT == PF_CPT - 1 || tl == ntl - 1) /* a chunk's tree: xor 16 and 8 over t, 4 and 2 the quad, 1 over e; z in order */
#pragma unroll
        for (int h = 0; h < 2; h++) {
          float w[2];
#pragma unroll
          for (int e = 0; e < 2; e++) {
            w[e] = __fadd_rn(__fadd_rn(zc[h][0][e], zc[h][2][e]), __fadd_rn(zc[h][1][e], zc[h][3][e]));
            w[e] = __fadd_rn(w[e], __shfl_xor_sync(0xffffffffu, w[e], 2));
            w[e] = __fadd_rn(w[e], __shfl_xor_sync(0xffffffffu, w[e], 1));
#pragma unroll
            for (int t = 0; t < 4; t++) zc[h][t][e] = 0.0f;
          }
          z[h] = __fadd_rn(z[h], __fadd_rn(w[0], w[1]));
        }
      __syncthreads();
    }

    const dsp_dev_divisor dz[2] = {dsp_dev_divisor_of(z[0]), dsp_dev_divisor_of(z[1])};
    float cacc[NT][4], *tw = tots + warp * NT * 4 * 32 + lane;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) tw[(4 * n + e) * 32] = cacc[n][e] = 0.0f;
    for (int tl = 0; tl < ntl; tl++) {
      const int s = 2 * ntl + tl, kt0 = tl * PF_TILE;
      step();
      const uint16_t *kt = ks + (s % PF_STAGES) * PF_TILE * KP, *vt = vs + (s % PF_STAGES) * PF_TILE * VP;
#pragma unroll 1
      for (int k32 = 0; k32 < PF_TILE / 32; k32++) { /* 32 keys: four score tiles, then two 16-key p.v groups */
        if (kt0 + k32 * 32 >= wmax) break;
        float sc[4][4];
        pf_qk<4, DC, KP>(kt, 4 * k32, g, q, qa, sc);
        uint32_t af[2][4]; /* p as A fragments: group kg's keys k0 + 2q + (e & 1) (tile 2kg), + 8 (tile 2kg + 1) */
        uint32_t slow = 0; /* a p off the division's fast path: these 32 keys' p again through __fdiv_rn */
#pragma unroll
        for (int n = 0; n < 4; n++) {
          float pv[4];
#pragma unroll
          for (int e = 0; e < 4; e++) {
            uint32_t fast;
            sc[n][e] = expf(__fsub_rn(pf_score(sc[n][e], scale), mx[e >> 1]));
            pv[e] = dsp_dev_div_fast(sc[n][e], dz[e >> 1], fast);
            slow |= fast ^ 1u;
          }
          af[n >> 1][2 * (n & 1)] = dsp_dev_bf16x2_hw(pv[0], pv[1]);
          af[n >> 1][2 * (n & 1) + 1] = dsp_dev_bf16x2_hw(pv[2], pv[3]);
        }
        if (slow || kt0 + k32 * 32 + 32 > wmin) { /* or a key of the 32 masked: the masks are applied there */
#pragma unroll
          for (int n = 0; n < 4; n++) {
            float pv[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
              const int h = e >> 1, key = kt0 + k32 * 32 + n * 8 + 2 * q + (e & 1);
              pv[e] = key < (h ? nb : na) ? __fdiv_rn(sc[n][e], z[h]) : 0.0f;
            }
            af[n >> 1][2 * (n & 1)] = dsp_dev_bf16x2_hw(pv[0], pv[1]);
            af[n >> 1][2 * (n & 1) + 1] = dsp_dev_bf16x2_hw(pv[2], pv[3]);
          }
        }
#pragma unroll
        for (int kg = 0; kg < 2; kg++)
#pragma unroll
          for (int n2 = 0; n2 < NT / 2; n2++) {
            uint32_t bv[4];
            dsp_ldsm4_t(bv, dsp_att_saddr(vt + (k32 * 32 + kg * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * VP + n2 * 16 +
                                     (lane >> 4) * 8));
            dsp_mma16816(cacc[2 * n2], af[kg][0], af[kg][1], af[kg][2], af[kg][3], bv[0], bv[1]);
            dsp_mma16816(cacc[2 * n2 + 1], af[kg][0], af[kg][1], af[kg][2], af[kg][3], bv[2], bv[3]);
          }
      }
      if (tl % PF_CPT == PF_CPT - 1 || tl == ntl - 1) /* a chunk ends: its p.v onto the total, in order */
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
          for (int e = 0; e < 4; e++)
            tw[(4 * n + e) * 32] = __fadd_rn(tw[(4 * n + e) * 32], cacc[n][e]), cacc[n][e] = 0.0f;
      __syncthreads();
    }
    uint16_t *ob = (uint16_t *)a.out.data + r0 * a.out.s_row + h0 * a.out.s_head;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int pair = pa + 8 * h;
      if (pair < np) {
        uint16_t *o = ob + (pair / group) * a.out.s_row + (pair % group) * a.out.s_head;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
          for (int e = 0; e < 2; e++) o[(int64_t)(n * 8 + 2 * q + e) * a.out.s_dim] = dsp_dev_bf16_bits(tw[(4 * n + 2 * h + e) * 32]);
      }
    }
    r0 = re;
  }
}

#define PF_KERNELS(X) X(1) X(2) X(4)

extern "C" int dsp_cu_attention_pf_config(dsp_cu_attention_args *a, int row_group, int sms, size_t smem_limit,
                                          int need) {
  const int64_t D = a->q.dim, Hkv = a->kv_heads;
  if ((D != 32 && D != 64 && D != 128) || Hkv < 1 || a->q.heads % Hkv || a->kv_stride % 8 || ((uintptr_t)a->k & 15) ||
      ((uintptr_t)a->v & 15) || pf_smem(D) > smem_limit)
    return 0;
  const int64_t group = a->q.heads / Hkv, np = 16 * PF_WARPS;
  if (group > np) return 0;
  int64_t rb = np / group;
  const int64_t blocks = (a->q.rows + rb - 1) / rb * Hkv;
  /* runs long enough to fill a block's pairs and enough blocks to fill the SMs; or any call where the
     tensor-core form cannot hold the cache (need 1); need 2: also runs of one m-tile or more whose blocks, a run
     each, fill the SMs (a batch's verify or draft block, where the one-row kernel's scores over the whole cache
     leave it one block an SM) */
  const int rg = row_group > 1 ? row_group : 1;
  const int short_runs = need == 2 && rg * group >= 16 && rg * group < np && (a->q.rows + rg - 1) / rg * Hkv >= sms;
  if (need != 1 && !short_runs && (row_group * group < np || blocks < sms)) return 0;
  /* short runs (decode over a long cache): a block per run, so the runs spread over the SMs (a launch choice) */
  if (row_group * group < np) rb = rg;
  a->rows_per_block = (int)rb, a->heads_per_block = (int)group, a->pairs = (int)np, a->key_split = 1;
  a->warps = PF_WARPS;
  a->q_vec = a->q.s_dim == 1 && a->q.s_row % 8 == 0 && a->q.s_head % 8 == 0 && !((uintptr_t)a->q.data & 15);
  return 1;
}

extern "C" cudaError_t dsp_cu_attention_pf_prepare(size_t smem_limit) {
#define PF_SET(dc) \
  if (const cudaError_t e = dsp_att_optin((const void *)k_attention_pf<dc, PF_WARPS>, smem_limit)) return e;
  PF_KERNELS(PF_SET)
#undef PF_SET
  return cudaSuccess;
}

extern "C" void dsp_cu_attention_pf(const dsp_cu_attention_args *a, cudaStream_t s) {
  const int dc = (int)(a->q.dim / 32);
  void (*k)(dsp_cu_attention_args) = NULL;
#define PF_PICK(d_) \
  if (dc == d_) k = k_attention_pf<d_, PF_WARPS>;
  PF_KERNELS(PF_PICK)
#undef PF_PICK
  if (a->q.rows <= 0 || !k) return;
  const int64_t tiles = (a->q.rows + a->rows_per_block - 1) / a->rows_per_block;
  dsp_launch(k, dim3((unsigned)(tiles * a->kv_heads)), dim3(32 * PF_WARPS), pf_smem(a->q.dim), s, *a);
}
