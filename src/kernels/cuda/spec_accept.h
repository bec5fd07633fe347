/* Speculative sampling's acceptance on the device (backend/ops.h,
 * dsp_op_accept): the same bits as kernels/cpu/spec_accept.c. */
#ifndef DSP_KERNELS_CUDA_SPEC_ACCEPT_H
#define DSP_KERNELS_CUDA_SPEC_ACCEPT_H
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t toff, qoff, draft; /* slot i's row offsets into the target's and the draft's logits, its draft */
} dsp_cu_accept_slot;
typedef struct {
  uint64_t seed;
  int64_t pos; /* the position of draft 0 */
  float temp;
  int32_t ndraft;
} dsp_cu_accept_seq;

/* The device workspace's bytes for S sequences of G slots over V ids. */
size_t dsp_cu_accept_ws_bytes(int64_t V, int32_t S, int32_t G);
/* slots [S G] and seqs [S] are device copies (inside ws, as dsp_cu_accept_layout places them); out [2 S]
 * (device): accepted, residual (-1: all accepted). */
typedef struct {
  dsp_cu_accept_slot *slots;
  dsp_cu_accept_seq *seqs;
  int32_t *out;
  void *scratch;
} dsp_cu_accept_layout;
dsp_cu_accept_layout dsp_cu_accept_layout_of(void *ws, int64_t V, int32_t S, int32_t G);
cudaError_t dsp_cu_accept(const uint16_t *tlog, const uint16_t *qlog, int64_t V, int32_t S, int32_t G,
                          const dsp_cu_accept_layout *L, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
