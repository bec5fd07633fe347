/* What plain and speculative decoding share: the checks of a request, the
 * end-of-sequence test and the chunked prefill. */
#ifndef DSP_DECODE_GEN_COMMON_H
#define DSP_DECODE_GEN_COMMON_H
#include "dspark.h"

/* extra: cache positions a sequence needs beyond prompt + max_new - 1 (a verify block's);
 * any_count: more prompts than slots are fine (they wait for a free slot). */
dsp_status dsp_gen_check(const dsp_target *t, int32_t nseq, const int32_t *const *prompts, const int32_t *lens,
                         const dsp_generate_options *o, int32_t extra, int any_count);
int dsp_gen_is_eos(const dsp_target *t, const dsp_generate_options *o, int64_t id);
/* Resets slots 0 .. nseq-1 and runs the prompts in calls of at most
 * max_tokens tokens; first[q]: the token drawn after prompt q. */
dsp_status dsp_gen_prefill(dsp_target *t, int32_t nseq, const int32_t *const *prompts, const int32_t *lens,
                           const dsp_generate_options *o, int64_t *first, dsp_generate_stats *st);

#endif
