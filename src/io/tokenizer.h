/* Byte-level BPE tokenizer read from a Hugging Face tokenizer.json, as Qwen2 and
 * Qwen3 ship it. Encoding gives the ids `tokenizers` gives for
 * encode(text, add_special_tokens=False); decoding gives the bytes its ByteLevel
 * decoder produces before the final lossy UTF-8 conversion.
 *
 * Accepted: model BPE (vocab ids 0..N-1 without holes; merges as "a b" strings
 * or [a, b] pairs; unk_token, fuse_unk, ignore_merges), normalizer null or NFC,
 * pre_tokenizer ByteLevel (use_regex true: GPT-2's split) or a Sequence of
 * Split (Regex, Isolated, not inverted) steps ending in ByteLevel, decoder
 * ByteLevel, post_processor null or ByteLevel, added_tokens with their
 * lstrip / rstrip / single_word / normalized flags. Anything else that would
 * change ids (another model, dropout, byte_fallback, a subword prefix,
 * add_prefix_space, truncation, padding, unknown fields) is refused with
 * DSP_ERR_UNSUPPORTED naming the field; inconsistent files with DSP_ERR_FORMAT.
 *
 * Text that is not valid UTF-8 is encoded as if each maximal invalid
 * subsequence were U+FFFD, exactly as Python's bytes.decode("utf-8",
 * "replace") reads it. A handle is immutable after loading: any number of
 * threads may encode and decode with it at once. */
#ifndef DSP_IO_TOKENIZER_H
#define DSP_IO_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#include "dspark.h"

typedef struct dsp_tokenizer dsp_tokenizer;

/* DSP_ERR_IO when the file cannot be read; on failure *out is NULL. */
dsp_status dsp_tokenizer_load(const char *path, dsp_tokenizer **out);
/* `label` names the source in error messages (NULL: "tokenizer.json"). */
dsp_status dsp_tokenizer_load_memory(const char *json, size_t len, const char *label, dsp_tokenizer **out);
void dsp_tokenizer_free(dsp_tokenizer *t);

/* Largest id + 1 (vocab entries plus added tokens outside the vocab). */
int64_t dsp_tokenizer_vocab_size(const dsp_tokenizer *t);

/* ids: caller buffer of cap entries; *n gets the count needed. When cap is too
 * small the first cap ids are written and DSP_ERR_RANGE is returned with *n set. */
dsp_status dsp_tokenizer_encode(const dsp_tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap,
                                size_t *n);
/* The concatenated bytes of the tokens (not NUL-terminated, possibly invalid
 * UTF-8 at token boundaries); *len gets the length needed, DSP_ERR_RANGE when
 * cap is too small or an id is outside [0, vocab_size). */
dsp_status dsp_tokenizer_decode(const dsp_tokenizer *t, const int32_t *ids, size_t n, char *buf, size_t cap,
                                size_t *len);
/* What tokenizers' decode gives: the tokens' bytes (special added tokens
 * left out with skip_special) as UTF-8, each maximal ill-formed subpart
 * replaced by U+FFFD; NUL-terminated, malloc'd (the caller frees *text). */
dsp_status dsp_tokenizer_text(const dsp_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                              size_t *len);
/* One token's bytes, for streaming; the pointer lives as long as the handle. */
dsp_status dsp_tokenizer_token_bytes(const dsp_tokenizer *t, int32_t id, const char **bytes, size_t *len);
/* Id of an exact token string (an added token's content, else a vocab entry in
 * its byte-level spelling, e.g. "Ġthe"); -1 if none. */
int32_t dsp_tokenizer_find(const dsp_tokenizer *t, const char *token);
/* 1 when id is an added token marked special (<|im_end|>...), else 0. */
int dsp_tokenizer_is_special(const dsp_tokenizer *t, int32_t id);

#endif
