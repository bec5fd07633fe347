/* The arguments of speculative sampling's acceptance, shared by the host
 * kernel that reads them (kernels/cpu/spec_accept.h) and the backend ops that
 * take them (backend/ops.h: dsp_op_accept, whose CUDA form unpacks them into
 * kernels/cuda/spec_accept.h's device structs, and dsp_op_accept_host). */
#ifndef DSP_KERNELS_ACCEPT_ARGS_H
#define DSP_KERNELS_ACCEPT_ARGS_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Speculative sampling's acceptance (docs/CONTRACTS.md, "Verification") for
 * nseq sequences: sequence r verified ndraft[r] <= gamma drafts d_i =
 * drafts[r gamma + i] at positions pos[r] + i; slot i's rows of vocab BF16
 * logits start toff[r gamma + i] elements into tlog (the target's, p) and
 * qoff[...] into qlog (the draft's corrected logits, q), both backend memory.
 * accepted[r] counts the drafts accepted; residual[r] is the draw from
 * normalize(max(p - q, 0)) at the first rejection, or -1 after a full accept
 * (the caller's bonus: the target's own draw). The other arrays are host
 * memory; ws (backend memory) and hs (host memory from dsp_op_host_alloc)
 * hold dsp_op_accept_workspace's bytes for up to max_seqs x gamma slots. */
typedef struct {
  const dsp_bf16 *tlog, *qlog;
  int64_t vocab;
  int32_t nseq, gamma;
  const int64_t *toff, *qoff, *drafts, *pos;
  const int32_t *ndraft;
  const float *temp;
  const uint64_t *seed;
  int32_t *accepted, *residual;
  void *ws, *hs;
  size_t ws_bytes, hs_bytes;
} dsp_op_accept_args;

#ifdef __cplusplus
}
#endif
#endif
