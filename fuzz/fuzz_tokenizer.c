/* libFuzzer target for the tokenizer. Each input is used twice:
 *  1. as a tokenizer.json: loading either fails cleanly (no handle) or gives a
 *     handle that encodes the input itself and decodes every id it gave;
 *  2. as text for two fixed tokenizers (all 256 byte symbols, a few merges,
 *     Qwen's regex, NFC, added tokens): the plain one must give back exactly
 *     the text's NFC (after U+FFFD repair), the one whose added tokens strip
 *     whitespace must at least decode what it encodes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/status.h"
#include "io/tokenizer.h"
#include "io/tokenizer_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char QWEN_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

static size_t spell(const char *raw, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = dsp_tok_byte_to_cp((uint8_t)raw[i]);
    if (cp < 0x80) out[o++] = (char)cp;
    else out[o++] = (char)(0xC0 | cp >> 6), out[o++] = (char)(0x80 | (cp & 0x3F));
  }
  out[o] = 0;
  return o;
}

static json_t *added(int id, const char *content, int lstrip, int rstrip, int single, int norm) {
  return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", single,
                   "lstrip", lstrip, "rstrip", rstrip, "normalized", norm, "special", 1);
}

static dsp_tokenizer *fixed(int strip) {
  static const char *const merges[][2] = {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"i", "n"}, {" ", " "},
                                          {"\xc3", "\xa9"}, {"1", "2"}, {"'", "s"}, {"\xe4\xb8", "\xad"},
                                          {"\xe4", "\xb8"}};
  json_t *vocab = json_object(), *ml = json_array();
  char s[64];
  for (int b = 0; b < 256; b++) {
    char raw = (char)b;
    spell(&raw, 1, s);
    json_object_set_new(vocab, s, json_integer(b));
  }
  int next = 256;
  for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++) {
    char a[32], b[32], ab[64];
    spell(merges[i][0], strlen(merges[i][0]), a);
    spell(merges[i][1], strlen(merges[i][1]), b);
    snprintf(ab, sizeof ab, "%s%s", a, b);
    json_object_set_new(vocab, ab, json_integer(next++));
    json_array_append_new(ml, json_pack("[s, s]", a, b));
  }
  /* The plain tokenizer's added tokens end in '|', which nothing composes
   * with: NFC of the pieces between them is then NFC of the whole text
   * ("<|im_end|>" + U+0338 would not be: '>' + U+0338 is U+226F). */
  json_t *at = strip ? json_pack("[o, o]", added(next, "<|im_end|>", 0, 0, 0, 0), added(next + 1, "<|im_start|>", 0, 0, 0, 0))
                     : json_pack("[o, o]", added(next, "<|im_end|", 0, 0, 0, 0), added(next + 1, "<|im_start|", 0, 0, 0, 0));
  if (strip) {
    json_array_append_new(at, added(next + 2, "<m>", 1, 1, 0, 0));
    json_array_append_new(at, added(next + 3, "[w]", 0, 0, 1, 0));
    json_array_append_new(at, added(next + 4, "cafe\xcc\x81", 0, 1, 0, 1));
  }
  json_t *j = json_pack(
      "{s:o, s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}, s:{s:s},"
      " s:{s:s, s:o, s:o}}",
      "added_tokens", at, "normalizer", "type", "NFC", "pre_tokenizer", "type", "Sequence", "pretokenizers", "type",
      "Split", "pattern", "Regex", QWEN_PATTERN, "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
      "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "decoder", "type", "ByteLevel", "model", "type", "BPE",
      "vocab", vocab, "merges", ml);
  char *text = j ? json_dumps(j, 0) : NULL;
  json_decref(j);
  dsp_tokenizer *t = NULL;
  if (!text || dsp_tokenizer_load_memory(text, strlen(text), "fixed", &t) != DSP_OK) {
    fprintf(stderr, "fuzz_tokenizer: fixed tokenizer: %s\n", dsp_error_message());
    abort();
  }
  free(text);
  return t;
}

/* Encodes (first into a buffer that is too small when there is anything to
 * encode, to walk that path), decodes, returns the bytes (caller frees). */
static char *round_trip(const dsp_tokenizer *t, const char *s, size_t n, size_t *len) {
  size_t need = 0;
  int32_t one;
  dsp_status st = dsp_tokenizer_encode(t, s, n, &one, 1, &need);
  if (st != DSP_OK && st != DSP_ERR_RANGE) return NULL; /* e.g. a fuzzed regex over its match limit */
  if (st == DSP_OK && need > 1) abort();
  int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
  size_t again = 0;
  if (!ids || dsp_tokenizer_encode(t, s, n, ids, need, &again) != DSP_OK || again != need) abort();
  if (need && ids[0] != one) abort();
  size_t bytes = 0;
  if (dsp_tokenizer_decode(t, ids, need, NULL, 0, &bytes) != (bytes ? DSP_ERR_RANGE : DSP_OK)) abort();
  char *out = malloc(bytes + 1);
  if (!out || dsp_tokenizer_decode(t, ids, need, out, bytes, len) != DSP_OK || *len != bytes) abort();
  for (size_t i = 0; i < need; i++) {
    const char *b;
    size_t l;
    if (ids[i] < 0 || ids[i] >= dsp_tokenizer_vocab_size(t) || dsp_tokenizer_token_bytes(t, ids[i], &b, &l) != DSP_OK)
      abort();
  }
  free(ids);
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static dsp_tokenizer *plain, *strip;
  if (!plain) {
    plain = fixed(0);
    strip = fixed(1);
  }
  const char *s = (const char *)data;

  dsp_tokenizer *t = NULL;
  if (dsp_tokenizer_load_memory(s, size, "fuzz", &t) == DSP_OK) {
    size_t len;
    free(round_trip(t, s, size < 4096 ? size : 4096, &len));
    dsp_tokenizer_find(t, "a");
    dsp_tokenizer_free(t);
  } else if (t) {
    abort(); /* a failed load hands out no handle */
  }

  /* The plain tokenizer keeps every byte: decode(encode(x)) is NFC(x). */
  char *fixed_text = NULL, *want = NULL;
  size_t fl = size, wl;
  const char *v = s;
  if (dsp_tok_utf8_valid_prefix(s, size) != size) {
    if (dsp_tok_utf8_replace(s, size, &fixed_text, &fl) != DSP_OK) abort();
    v = fixed_text;
  }
  if (dsp_tok_nfc(v, fl, &want, &wl) != DSP_OK) abort();
  size_t len;
  char *got = round_trip(plain, s, size, &len);
  if (!got || len != wl || memcmp(got, want, wl) != 0) abort();
  free(got);
  if (want != v) free(want);
  free(fixed_text);

  got = round_trip(strip, s, size, &len);
  if (!got) abort();
  free(got);
  return 0;
}
