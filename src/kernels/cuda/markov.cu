/* Fused Markov step: instance dispatch, the sampled tail's noise, the token
 * select, and the probes for cooperative and programmatic (PDL) launches
 * inside CUDA graphs (see markov.h). */
#include <string.h>

#include "core/philox.h"
#include "kernels/cuda/common/check.h"
#include "kernels/cuda/common/devmath.cuh"
#include "kernels/cuda/markov.h"
#include "kernels/cuda/markov_wgmma.cuh"

typedef dsp_status (*mk_family_fn)(const dsp_mk_args *, const dsp_mk_launch *, cudaStream_t, int, size_t *, int *);

static mk_family_fn mk_family(int sampling, int strict, int ring) {
  if (strict) return sampling ? dsp_mk_launch_sx : dsp_mk_launch_gx;
  if (ring) return sampling ? dsp_mk_ring_s : dsp_mk_ring_g;
  return sampling ? dsp_mk_launch_s : dsp_mk_launch_g;
}

dsp_status dsp_cuda_markov_prepare(int bq, int sampling, int strict, int ring, size_t *smem, int *blocks_per_sm,
                                   int *stages) {
  dsp_mk_args a;
  memset(&a, 0, sizeof a);
  a.bq = bq;
  int occ[2] = {0, 0};
  DSP_TRY(mk_family(sampling, strict, ring && !strict)(&a, NULL, 0, 1, smem, occ));
  *blocks_per_sm = occ[0];
  *stages = ring && !strict ? occ[1] : 0;
  return DSP_OK;
}

dsp_status dsp_cuda_markov_launch(const dsp_mk_args *a, const dsp_mk_launch *l, cudaStream_t s) {
  size_t smem;
  int occ[2];
  return mk_family(l->sampling, l->strict, l->ring && !l->strict)(a, l, s, 0, &smem, occ);
}

/* Block (x, r = k * bq + b, segment): a strip of row r's ids, one noise value per thread and pass. */
__global__ void mk_noise_kernel(const dsp_mk_args a, float *noise) {
  const int r = blockIdx.y, b = r % a.bq, seg = blockIdx.z;
  const float T = a.temp[b];
  if (!(T > 0.0f)) return;
  const uint64_t seed = a.seed[b];
  const int64_t p = a.pos[b] + 1 + r / a.bq, id0 = (int64_t)(a.seg_rank0 + seg) * a.vr;
  float *out = noise + (size_t)seg * a.seg_stride + (size_t)r * a.ld;
  for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < a.vr && id0 + l < a.vocab;
       l += (int64_t)gridDim.x * blockDim.x)
    out[l] = dsp_gumbel(seed, p, id0 + l);
}

dsp_status dsp_cuda_markov_noise(const dsp_mk_args *a, int32_t steps, float *noise, cudaStream_t s) {
  if (steps < 1 || a->bq < 1 || a->nseg < 1) return dsp_fail(DSP_ERR_ARG, "cuda markov noise: empty launch");
  const int64_t strips = (a->vr + 255) / 256;
  const dim3 grid((unsigned)(strips < 1024 ? strips : 1024), (unsigned)(steps * a->bq), (unsigned)a->nseg);
  mk_noise_kernel<<<grid, 256, 0, s>>>(*a, noise);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

__global__ void mk_select_kernel(const unsigned long long *keys, int nranks, int bq, int32_t *tokens) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= bq) return;
  unsigned long long best = 0ull;
  for (int r = 0; r < nranks; r++) {
    const unsigned long long v = keys[(size_t)r * bq + b];
    best = v > best ? v : best;
  }
  tokens[b] = best ? (int32_t)dsp_dev_key_id(best) : 0;
}

dsp_status dsp_cuda_markov_select(const unsigned long long *keys, int nranks, int bq, int32_t *tokens,
                                  cudaStream_t s) {
  mk_select_kernel<<<(bq + 127) / 128, 128, 0, s>>>(keys, nranks, bq, tokens);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

size_t dsp_cuda_markov_packed_elems(int64_t rows) { return (size_t)((rows + 63) / 64) * 64 * DSP_MK_RP; }

/* One thread per k pair (4 bytes) of the packed buffer: chunk c (rows
 * 64 c .. 64 c + 63, zero past the end) is a 32 KB tile in wgmma's layout
 * (markov_wgmma.cuh: wg_pair), read as it is by ring kernel 5's products and
 * by ring kernel 4's fragment loads. */
__global__ void mk_pack_kernel(const uint16_t *w2, int64_t rows, uint16_t *packed, int64_t pairs) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int64_t r = i / (DSP_MK_RP / 2);
  const int k = (int)(i % (DSP_MK_RP / 2)) * 2;
  const uint32_t v = r < rows ? *(const uint32_t *)(w2 + r * DSP_MK_RP + k) : 0u;
  *(uint32_t *)((unsigned char *)(packed + (r / 64) * 64 * DSP_MK_RP) + wg_pair(64, (int)(r % 64), k)) = v;
}

dsp_status dsp_cuda_markov_pack_w2(const uint16_t *w2, int64_t rows, uint16_t *packed, cudaStream_t s) {
  const int64_t pairs = (int64_t)(dsp_cuda_markov_packed_elems(rows) / 2);
  mk_pack_kernel<<<(unsigned)((pairs + 255) / 256), 256, 0, s>>>(w2, rows, packed, pairs);
  DSP_CUDA_TRY_LAUNCH();
  return DSP_OK;
}

__global__ void mk_probe_kernel(int *x) {
  if (x) *x = 1;
}

/* The probe's launch under test: waits for the kernel before it, as the tail kernels do. */
__global__ void mk_probe_dep_kernel(int *x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (x) *x = 2;
}

/* Captures a launch with the cooperative (coop) and programmatic (pdl: after a
 * plain kernel) attributes into a graph, instantiates and replays it; 1 when
 * all of it works and the launch ran. */
static int mk_probe_graph(cudaStream_t s, int coop, int pdl) {
  int *x = NULL;
  if (cudaMalloc((void **)&x, sizeof *x) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaGraph_t g = NULL;
  int ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (ok) {
    if (pdl) mk_probe_kernel<<<1, 32, 0, s>>>(x);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(32);
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    cfg.attrs = attr;
    if (coop) {
      attr[cfg.numAttrs].id = cudaLaunchAttributeCooperative;
      attr[cfg.numAttrs++].val.cooperative = 1;
    }
    if (pdl) {
      attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
    }
    const cudaError_t e1 = cudaLaunchKernelEx(&cfg, mk_probe_dep_kernel, x);
    const cudaError_t e2 = cudaStreamEndCapture(s, &g);
    ok = e1 == cudaSuccess && e2 == cudaSuccess && g != NULL;
  }
  int got = 0;
  if (ok) {
    cudaGraphExec_t ge = NULL;
    ok = cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
    if (ok)
      ok = cudaGraphLaunch(ge, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess &&
           cudaMemcpy(&got, x, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess && got == 2;
    if (ge) cudaGraphExecDestroy(ge);
  }
  if (g) cudaGraphDestroy(g);
  cudaFree(x);
  cudaGetLastError(); /* a refused capture leaves a non-sticky error behind */
  return ok;
}

int dsp_cuda_markov_coop_capturable(cudaStream_t s) {
  int dev = 0, coop = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess ||
      !coop) {
    cudaGetLastError();
    return 0;
  }
  return mk_probe_graph(s, 1, 0);
}

int dsp_cuda_markov_pdl_capturable(cudaStream_t s, int coop) {
  int dev = 0, cc = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cc < 9) {
    cudaGetLastError();
    return 0;
  }
  return mk_probe_graph(s, coop, 1);
}
