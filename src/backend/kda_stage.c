/* Staging a KDA batch (backend/ops.h, dsp_op_kda_stage): the same for every
 * backend. The arrays and the two maps are built in a host image laid out as
 * the backend buffer will be, then uploaded in one copy. */
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/layout.h"
#include "core/status.h"
#include "kernels/cpu/kda.h"

typedef struct {
  int32_t *cu, *slot, *token_slot, *tok_seq, *chunk_first;
  uint8_t *has;
} stage_parts;

static dsp_status layout(int64_t S, int64_t T, stage_parts *p, dsp_layout_entry e[6], size_t *total) {
  size_t b[4];
  DSP_TRY(dsp_layout_bytes(S + 1, 1, 1, 4, "kda stage: cu_seqlens", &b[0]));
  DSP_TRY(dsp_layout_bytes(S, 1, 1, 4, "kda stage: slots", &b[1]));
  DSP_TRY(dsp_layout_bytes(T, 1, 1, 4, "kda stage: token maps", &b[2]));
  DSP_TRY(dsp_layout_bytes(S, 1, 1, 1, "kda stage: has_state", &b[3]));
  const dsp_layout_entry l[6] = {{(void **)&p->cu, b[0]},         {(void **)&p->slot, b[1]},
                                 {(void **)&p->token_slot, b[2]}, {(void **)&p->tok_seq, b[2]},
                                 {(void **)&p->chunk_first, b[0]}, {(void **)&p->has, b[3]}};
  memcpy(e, l, sizeof l);
  DSP_TRY(dsp_layout_total(e, 6, total));
  *total += DSP_LAYOUT_ALIGN - 1;
  return DSP_OK;
}

dsp_status dsp_op_kda_stage_bytes(int32_t max_seqs, int64_t max_tokens, size_t *bytes) {
  if (!bytes || max_seqs < 0 || max_tokens < 0) return dsp_fail(DSP_ERR_ARG, "kda stage bytes: bad argument");
  stage_parts p;
  dsp_layout_entry e[6];
  return layout(max_seqs, max_tokens, &p, e, bytes);
}

/* A device pointer at the host pointer's offset in the image. */
static void *at(void *dev, const void *host_base, const void *host) {
  return (char *)dev + ((const char *)host - (const char *)host_base);
}

dsp_status dsp_op_kda_stage(dsp_backend *be, int dev, const dsp_kda_seqs *s, int32_t num_slots, void *buf,
                            size_t bytes, dsp_kda_staged *out) {
  if (!be || !s || !buf || !out) return dsp_fail(DSP_ERR_ARG, "kda stage: NULL argument");
  int64_t T = 0;
  DSP_TRY(dsp_kda_seqs_check(s, num_slots, &T));
  const int32_t S = s->num_seqs;
  stage_parts h;
  dsp_layout_entry e[6];
  size_t need = 0;
  DSP_TRY(layout(S, T, &h, e, &need));
  if (need > bytes)
    return dsp_fail(DSP_ERR_NOMEM, "kda stage: %zu bytes for %d sequences of %lld tokens; the buffer has %zu", need,
                    (int)S, (long long)T, bytes);
  char *image = malloc(need);
  if (!image) return dsp_fail(DSP_ERR_NOMEM, "kda stage: %zu bytes of host memory", need);
  char *base = dsp_layout_align(image);
  dsp_layout_carve(base, e, 6);
  h.cu[0] = 0;
  h.chunk_first[0] = 0;
  for (int32_t n = 0; n < S; n++) {
    const int32_t t0 = s->cu_seqlens ? s->cu_seqlens[n] : n, t1 = s->cu_seqlens ? s->cu_seqlens[n + 1] : n + 1;
    h.cu[n + 1] = t1;
    h.slot[n] = s->slot[n];
    h.has[n] = s->has_state ? s->has_state[n] : 1;
    h.chunk_first[n + 1] = h.chunk_first[n] + (t1 - t0 + DSP_KDA_CHUNK - 1) / DSP_KDA_CHUNK;
    for (int32_t t = t0; t < t1; t++) h.tok_seq[t] = n;
  }
  for (int64_t t = 0; t < T; t++) h.token_slot[t] = s->token_slot ? s->token_slot[t] : -1;
  char *dbase = dsp_layout_align(buf);
  const size_t used = need - (DSP_LAYOUT_ALIGN - 1);
  const dsp_status st = dsp_op_upload(be, dev, dbase, base, used);
  if (st == DSP_OK) {
    *out = (dsp_kda_staged){
        .seqs = {.num_seqs = S,
                 .cu_seqlens = s->cu_seqlens ? at(dbase, base, h.cu) : NULL,
                 .slot = at(dbase, base, h.slot),
                 .has_state = s->has_state ? at(dbase, base, h.has) : NULL,
                 .write_final = s->write_final,
                 .token_slot = s->token_slot ? at(dbase, base, h.token_slot) : NULL},
        .tok_seq = at(dbase, base, h.tok_seq),
        .chunk_first = at(dbase, base, h.chunk_first),
        .tokens = T,
        .chunks = h.chunk_first[S],
        .num_slots = num_slots};
  }
  free(image);
  return st;
}
