/* Tokenizer: small hand-checked encodings and every way loading refuses a
 * file. The test tokenizers are built here with jansson: the 256 byte symbols
 * as ids 0..255 in byte order (so an unmerged id is its byte), a few merged
 * tokens, Qwen's pre-tokenizer, NFC and special tokens. Expected ids follow
 * from GPT-2's byte table and the merge ranks by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/status.h"
#include "io/tokenizer.h"

static const char QWEN_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

/* GPT-2's table, from its definition: printable Latin-1 stays, the other 68
 * bytes take U+0100.. in order. */
static unsigned byte_cp(unsigned b) {
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
  unsigned n = 0;
  for (unsigned c = 0; c < b; c++) n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  return 0x100 + n;
}

/* Byte-level spelling of raw bytes. */
static void spell(const char *raw, char *out) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)raw; *p; p++) {
    unsigned cp = byte_cp(*p);
    if (cp < 0x80) out[o++] = (char)cp;
    else out[o++] = (char)(0xC0 | cp >> 6), out[o++] = (char)(0x80 | (cp & 0x3F));
  }
  out[o] = 0;
}

/* Merges of the test tokenizer, as raw text pairs: rank = position. Their
 * results get ids 256, 257, ... */
static const char *const MERGES[][2] = {
    {"b", "c"},   /* 256 "bc": outranks "a b" */
    {"a", "b"},   /* 257 "ab" */
    {" ", "a"},   /* 258 " a" */
    {"x", "x"},   /* 259 "xx" */
    {"'", "s"},   /* 260 "'s" */
    {"t", "'"},   /* 261 "t'": must never apply across the contraction split */
    {" a", "b"},  /* 262 " ab" */
    {"1", "2"},   /* 263 "12": digits are split one by one, so never used */
    {" ", " "},   /* 264 "  " */
};
#define N_MERGES (sizeof MERGES / sizeof MERGES[0])
enum { ID_BC = 256, ID_AB, ID_SP_A, ID_XX, ID_QS, ID_TQ, ID_SP_AB, ID_12, ID_SP2, N_VOCAB };
enum { ID_END = N_VOCAB, ID_START, ID_MASK, ID_W, ID_CAFE };

static json_t *added_token(int id, const char *content, int special, int lstrip, int rstrip, int single, int norm) {
  return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", single,
                   "lstrip", lstrip, "rstrip", rstrip, "normalized", norm, "special", special);
}

/* The test tokenizer as a JSON object; callers may edit it before loading. */
static json_t *base_json(void) {
  json_t *vocab = json_object();
  char s[64];
  for (unsigned b = 0; b < 256; b++) {
    char raw[2] = {(char)b, 0};
    if (b == 0) { /* spell() stops at NUL */
      unsigned cp = byte_cp(0);
      s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F)), s[2] = 0;
    } else {
      spell(raw, s);
    }
    json_object_set_new(vocab, s, json_integer(b));
  }
  json_t *merges = json_array();
  for (size_t i = 0; i < N_MERGES; i++) {
    char a[32], b[32], ab[64];
    spell(MERGES[i][0], a);
    spell(MERGES[i][1], b);
    snprintf(ab, sizeof ab, "%s%s", a, b);
    json_object_set_new(vocab, ab, json_integer(256 + (json_int_t)i));
    json_array_append_new(merges, json_pack("[s, s]", a, b));
  }
  json_t *added = json_pack("[o, o]", added_token(ID_END, "<|end|>", 1, 0, 0, 0, 0),
                            added_token(ID_START, "<|start|>", 1, 0, 0, 0, 0));
  return json_pack(
      "{s:s, s:n, s:n, s:o, s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
      " s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b},"
      " s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}}",
      "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer", "type", "NFC",
      "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", QWEN_PATTERN,
      "behavior", "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex",
      0, "post_processor", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "decoder",
      "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "model", "type", "BPE", "dropout",
      "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
      "ignore_merges", 0, "vocab", vocab, "merges", merges);
}

static dsp_status load_json(json_t *j, dsp_tokenizer **t) {
  char *s = json_dumps(j, 0);
  assert_non_null(s);
  dsp_status st = dsp_tokenizer_load_memory(s, strlen(s), "test.json", t);
  free(s);
  json_decref(j);
  return st;
}

static dsp_tokenizer *load_base(void) {
  dsp_tokenizer *t = NULL;
  json_t *j = base_json();
  assert_non_null(j);
  dsp_status st = load_json(j, &t);
  if (st != DSP_OK) fail_msg("load: %s", dsp_error_message());
  return t;
}

/* Encodes `text` and compares with the n expected ids. */
static void check_encode(const dsp_tokenizer *t, const char *text, size_t len, const int32_t *want, size_t n) {
  int32_t ids[256];
  size_t got;
  dsp_status st = dsp_tokenizer_encode(t, text, len, ids, 256, &got);
  if (st != DSP_OK) fail_msg("encode \"%s\": %s", text, dsp_error_message());
  if (got != n) {
    for (size_t i = 0; i < got; i++) print_message("%d ", (int)ids[i]);
    fail_msg("encode \"%s\": %zu ids, want %zu", text, got, n);
  }
  for (size_t i = 0; i < n; i++)
    if (ids[i] != want[i]) fail_msg("encode \"%s\": ids[%zu] = %d, want %d", text, i, (int)ids[i], (int)want[i]);
}
#define ENC(t, text, ...)                                                              \
  do {                                                                                 \
    const int32_t want_[] = {__VA_ARGS__};                                             \
    check_encode(t, text, sizeof(text) - 1, want_, sizeof want_ / sizeof want_[0]);    \
  } while (0)

static void test_byte_table_anchors(void **st) {
  (void)st;
  /* Well-known spellings: Ġ space, Ċ newline, ĉ tab, Ā NUL, ġ DEL, ł NBSP, Ń soft hyphen. */
  assert_int_equal(byte_cp(' '), 0x120);
  assert_int_equal(byte_cp('\n'), 0x10A);
  assert_int_equal(byte_cp('\t'), 0x109);
  assert_int_equal(byte_cp(0), 0x100);
  assert_int_equal(byte_cp(0x7F), 0x121);
  assert_int_equal(byte_cp(0xA0), 0x142);
  assert_int_equal(byte_cp(0xAD), 0x143);
  dsp_tokenizer *t = load_base();
  assert_int_equal(dsp_tokenizer_find(t, "\xc4\xa0"), ' '); /* "Ġ" */
  assert_int_equal(dsp_tokenizer_find(t, "\xc5\x83"), 0xAD); /* "Ń" */
  assert_int_equal(dsp_tokenizer_find(t, "\xc4\xa0" "a"), ID_SP_A);
  assert_int_equal(dsp_tokenizer_find(t, "<|end|>"), ID_END);
  assert_int_equal(dsp_tokenizer_find(t, "nope"), -1);
  assert_int_equal(dsp_tokenizer_vocab_size(t), N_VOCAB + 2);
  dsp_tokenizer_free(t);
}

static void test_merges_by_rank(void **st) {
  (void)st;
  dsp_tokenizer *t = load_base();
  ENC(t, "abc", 'a', ID_BC);              /* "b c" outranks "a b" */
  ENC(t, "ab", ID_AB);
  ENC(t, "xxx", ID_XX, 'x');              /* equal ranks: leftmost first */
  ENC(t, "xxxx", ID_XX, ID_XX);
  ENC(t, "ab ab", ID_AB, ' ', ID_AB);    /* "a b" outranks " a", and " " + "ab" is no merge */
  ENC(t, " a", ID_SP_A);
  ENC(t, " abc", ID_SP_A, ID_BC);         /* "b c" wins over " a b"'s second step */
  check_encode(t, "", 0, NULL, 0);
  dsp_tokenizer_free(t);
}

static void test_pre_tokenizer(void **st) {
  (void)st;
  dsp_tokenizer *t = load_base();
  ENC(t, "it's", 'i', 't', ID_QS);        /* "t '" would merge if the split let it */
  ENC(t, "IT'S", 'I', 'T', '\'', 'S');    /* (?i) splits, no merge for "'S" */
  ENC(t, "12", '1', '2');                 /* \p{N} one digit at a time */
  ENC(t, "a   a", 'a', ID_SP2, ID_SP_A);  /* \s+(?!\S) leaves the last space to the word */
  ENC(t, "x\r\n", 'x', '\r', '\n');
  ENC(t, "a\t\tb", 'a', '\t', '\t', 'b');
  dsp_tokenizer_free(t);
}

static void test_nfc_and_invalid_utf8(void **st) {
  (void)st;
  dsp_tokenizer *t = load_base();
  ENC(t, "e\xcc\x81", 0xC3, 0xA9);                  /* e + U+0301 -> U+00E9 */
  ENC(t, "\xe2\x84\xab", 0xC3, 0x85);               /* ANGSTROM SIGN -> U+00C5 */
  ENC(t, "\xff", 0xEF, 0xBF, 0xBD);                 /* one U+FFFD */
  ENC(t, "\xe2\x82", 0xEF, 0xBF, 0xBD);             /* truncated sequence: one U+FFFD */
  ENC(t, "\xe0\x80", 0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD); /* E0 80 is two bad subparts */
  ENC(t, "\xed\xa0\x80", 0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD); /* surrogate */
  dsp_tokenizer_free(t);
}

static void test_added_tokens(void **st) {
  (void)st;
  dsp_tokenizer *t = load_base();
  ENC(t, "a<|end|>b", 'a', ID_END, 'b');
  ENC(t, " <|end|> ", ' ', ID_END, ' ');
  ENC(t, "<|end|><|start|>", ID_END, ID_START);
  ENC(t, "<|end", '<', '|', 'e', 'n', 'd');
  assert_true(dsp_tokenizer_is_special(t, ID_END));
  assert_false(dsp_tokenizer_is_special(t, 'a'));
  assert_false(dsp_tokenizer_is_special(t, -1));
  dsp_tokenizer_free(t);

  /* lstrip / rstrip / single_word / normalized, as tokenizers applies them. */
  json_t *j = base_json();
  json_t *added = json_object_get(j, "added_tokens");
  json_array_append_new(added, added_token(ID_MASK, "<m>", 1, 1, 1, 0, 0));
  json_array_append_new(added, added_token(ID_W, "[W]", 0, 0, 0, 1, 0));
  json_array_append_new(added, added_token(ID_CAFE, "cafe\xcc\x81", 0, 0, 0, 0, 1)); /* matched as "café" */
  assert_int_equal(load_json(j, &t), DSP_OK);
  ENC(t, "a <m> b", 'a', ID_MASK, 'b');
  ENC(t, "a\t<m>\n\nb", 'a', ID_MASK, 'b');
  ENC(t, " [W] ", ' ', ID_W, ' ');
  ENC(t, "x[W]", 'x', '[', 'W', ']');
  ENC(t, "[W]x", '[', 'W', ']', 'x');
  ENC(t, "caf\xc3\xa9", ID_CAFE);
  ENC(t, "cafe\xcc\x81", ID_CAFE);
  const char *b;
  size_t n;
  assert_int_equal(dsp_tokenizer_token_bytes(t, ID_CAFE, &b, &n), DSP_OK);
  /* tokenizers decodes an added token through the byte table too when every
   * character of it is in the table, as "café" is: é stands for byte 0xE9. */
  assert_int_equal(n, 4);
  assert_memory_equal(b, "caf\xe9", 4);
  assert_int_equal(dsp_tokenizer_token_bytes(t, ID_MASK, &b, &n), DSP_OK);
  assert_int_equal(n, 3);
  assert_memory_equal(b, "<m>", 3);
  dsp_tokenizer_free(t);
}

static void test_decode(void **st) {
  (void)st;
  dsp_tokenizer *t = load_base();
  const int32_t ids[] = {'a', ID_SP_AB, ID_END, 0xC3, 0xA9, '\n'};
  char buf[64];
  size_t len;
  assert_int_equal(dsp_tokenizer_decode(t, ids, 6, buf, sizeof buf, &len), DSP_OK);
  assert_int_equal(len, 14);
  assert_memory_equal(buf, "a ab<|end|>\xc3\xa9\n", 14);
  /* too small: the length needed, RANGE */
  assert_int_equal(dsp_tokenizer_decode(t, ids, 6, buf, 5, &len), DSP_ERR_RANGE);
  assert_int_equal(len, 14);
  const int32_t bad[] = {'a', N_VOCAB + 2};
  assert_int_equal(dsp_tokenizer_decode(t, bad, 2, buf, sizeof buf, &len), DSP_ERR_RANGE);
  assert_non_null(strstr(dsp_error_message(), "ids[1]"));
  const char *b;
  assert_int_equal(dsp_tokenizer_token_bytes(t, ID_SP_A, &b, &len), DSP_OK);
  assert_int_equal(len, 2);
  assert_memory_equal(b, " a", 2);
  assert_int_equal(dsp_tokenizer_token_bytes(t, -1, &b, &len), DSP_ERR_RANGE);
  assert_int_equal(dsp_tokenizer_token_bytes(t, N_VOCAB + 2, &b, &len), DSP_ERR_RANGE);
  assert_int_equal(dsp_tokenizer_token_bytes(t, 0, &b, &len), DSP_OK);
  assert_int_equal(len, 1);
  assert_int_equal(b[0], 0);
  dsp_tokenizer_free(t);
}

static void test_encode_buffer(void **st) {
  (void)st;
  dsp_tokenizer *t = load_base();
  int32_t ids[2] = {-7, -7};
  size_t n = 99;
  assert_int_equal(dsp_tokenizer_encode(t, "a a a", 5, ids, 1, &n), DSP_ERR_RANGE);
  assert_int_equal(n, 3);
  assert_int_equal(ids[0], 'a');
  assert_int_equal(ids[1], -7);
  assert_non_null(strstr(dsp_error_message(), "3 ids"));
  assert_int_equal(dsp_tokenizer_encode(t, "a a a", 5, NULL, 0, &n), DSP_ERR_RANGE);
  assert_int_equal(n, 3);
  assert_int_equal(dsp_tokenizer_encode(t, NULL, 0, NULL, 0, &n), DSP_OK);
  assert_int_equal(n, 0);
  assert_int_equal(dsp_tokenizer_encode(t, NULL, 3, ids, 2, &n), DSP_ERR_ARG);
  assert_int_equal(dsp_tokenizer_encode(t, "a", 1, NULL, 2, &n), DSP_ERR_ARG);
  assert_int_equal(dsp_tokenizer_encode(NULL, "a", 1, ids, 2, &n), DSP_ERR_ARG);
  /* embedded NUL is a character like any other */
  assert_int_equal(dsp_tokenizer_encode(t, "a\0b", 3, ids, 2, &n), DSP_ERR_RANGE);
  assert_int_equal(n, 3);
  dsp_tokenizer_free(t);
}

/* ---- refusals ---------------------------------------------------------------- */

typedef void (*edit_fn)(json_t *j);

static json_t *model(json_t *j) { return json_object_get(j, "model"); }
static json_t *split(json_t *j) {
  return json_array_get(json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers"), 0);
}
static json_t *byte_level(json_t *j) {
  return json_array_get(json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers"), 1);
}
static json_t *added0(json_t *j) { return json_array_get(json_object_get(j, "added_tokens"), 0); }

static void e_model_type(json_t *j) { json_object_set_new(model(j), "type", json_string("WordPiece")); }
static void e_no_vocab(json_t *j) { json_object_del(model(j), "vocab"); }
static void e_no_merges(json_t *j) { json_object_del(model(j), "merges"); }
static void e_no_model(json_t *j) { json_object_del(j, "model"); }
static void e_merge_unknown(json_t *j) {
  json_array_append_new(json_object_get(model(j), "merges"), json_pack("[s, s]", "a", "zzz"));
}
static void e_merge_result_unknown(json_t *j) {
  json_array_append_new(json_object_get(model(j), "merges"), json_pack("[s, s]", "q", "q"));
}
static void e_merge_bad_string(json_t *j) {
  json_t *m = json_array();
  json_array_append_new(m, json_string("a b c"));
  json_object_set_new(model(j), "merges", m);
}
static void e_merge_mixed(json_t *j) { json_array_append_new(json_object_get(model(j), "merges"), json_string("a b")); }
static void e_merge_not_pair(json_t *j) {
  json_array_append_new(json_object_get(model(j), "merges"), json_pack("[s]", "a"));
}
static void e_dup_id(json_t *j) { json_object_set_new(json_object_get(model(j), "vocab"), "zz", json_integer(5)); }
static void e_hole(json_t *j) { json_object_set_new(json_object_get(model(j), "vocab"), "zz", json_integer(N_VOCAB + 5)); }
static void e_neg_id(json_t *j) { json_object_set_new(json_object_get(model(j), "vocab"), "a", json_integer(-1)); }
static void e_id_not_int(json_t *j) { json_object_set_new(json_object_get(model(j), "vocab"), "a", json_string("1")); }
static void e_byte_fallback(json_t *j) { json_object_set_new(model(j), "byte_fallback", json_true()); }
static void e_dropout(json_t *j) { json_object_set_new(model(j), "dropout", json_real(0.1)); }
static void e_prefix(json_t *j) { json_object_set_new(model(j), "continuing_subword_prefix", json_string("##")); }
static void e_suffix(json_t *j) { json_object_set_new(model(j), "end_of_word_suffix", json_string("</w>")); }
static void e_model_key(json_t *j) { json_object_set_new(model(j), "cache_capacity", json_integer(5)); }
static void e_unk_missing(json_t *j) { json_object_set_new(model(j), "unk_token", json_string("<unk>")); }
static void e_fuse_not_bool(json_t *j) { json_object_set_new(model(j), "fuse_unk", json_integer(1)); }
static void e_normalizer(json_t *j) { json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "NFKC")); }
static void e_pre_null(json_t *j) { json_object_set_new(j, "pre_tokenizer", json_null()); }
static void e_pre_type(json_t *j) { json_object_set_new(j, "pre_tokenizer", json_pack("{s:s}", "type", "Whitespace")); }
static void e_behavior(json_t *j) { json_object_set_new(split(j), "behavior", json_string("Removed")); }
static void e_invert(json_t *j) { json_object_set_new(split(j), "invert", json_true()); }
static void e_bad_regex(json_t *j) { json_object_set_new(split(j), "pattern", json_pack("{s:s}", "Regex", "(ab")); }
static void e_string_pattern(json_t *j) { json_object_set_new(split(j), "pattern", json_pack("{s:s}", "String", " ")); }
static void e_prefix_space(json_t *j) { json_object_set_new(byte_level(j), "add_prefix_space", json_true()); }
static void e_byte_level_first(json_t *j) {
  json_t *list = json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers");
  json_array_insert(list, 0, json_array_get(list, 1));
}
static void e_decoder_null(json_t *j) { json_object_set_new(j, "decoder", json_null()); }
static void e_decoder_type(json_t *j) { json_object_set_new(j, "decoder", json_pack("{s:s}", "type", "WordPiece")); }
static void e_post(json_t *j) { json_object_set_new(j, "post_processor", json_pack("{s:s}", "type", "TemplateProcessing")); }
static void e_truncation(json_t *j) { json_object_set_new(j, "truncation", json_pack("{s:i}", "max_length", 8)); }
static void e_padding(json_t *j) { json_object_set_new(j, "padding", json_pack("{s:s}", "strategy", "BatchLongest")); }
static void e_top_key(json_t *j) { json_object_set_new(j, "extra", json_true()); }
static void e_version(json_t *j) { json_object_set_new(j, "version", json_string("2.0")); }
static void e_added_id(json_t *j) { json_object_set_new(added0(j), "id", json_integer(N_VOCAB + 1)); }
static void e_added_vocab_id(json_t *j) {
  json_array_append_new(json_object_get(j, "added_tokens"), added_token(N_VOCAB + 2, "a", 1, 0, 0, 0, 0));
}
static void e_added_dup(json_t *j) {
  json_array_append_new(json_object_get(j, "added_tokens"), added_token(N_VOCAB + 2, "<|end|>", 1, 0, 0, 0, 0));
}
static void e_added_empty(json_t *j) { json_object_set_new(added0(j), "content", json_string("")); }
static void e_added_flag(json_t *j) { json_object_del(added0(j), "special"); }
static void e_added_key(json_t *j) { json_object_set_new(added0(j), "weight", json_integer(1)); }
static void e_added_not_array(json_t *j) { json_object_set_new(j, "added_tokens", json_object()); }
static void e_added_same_nfc(json_t *j) {
  json_t *a = json_object_get(j, "added_tokens");
  json_array_append_new(a, added_token(N_VOCAB + 2, "\xc3\xa9!", 0, 0, 0, 0, 1));
  json_array_append_new(a, added_token(N_VOCAB + 3, "e\xcc\x81!", 0, 0, 0, 0, 1));
}

static void test_refusals(void **st) {
  (void)st;
  static const struct {
    edit_fn edit;
    dsp_status want;
    const char *says; /* the message must name this */
  } cases[] = {
      {e_model_type, DSP_ERR_UNSUPPORTED, "model.type"},
      {e_no_vocab, DSP_ERR_MISSING, "model.vocab"},
      {e_no_merges, DSP_ERR_MISSING, "model.merges"},
      {e_no_model, DSP_ERR_MISSING, "model"},
      {e_merge_unknown, DSP_ERR_FORMAT, "model.merges[9]: \"zzz\" is not in the vocab"},
      {e_merge_result_unknown, DSP_ERR_FORMAT, "merged token \"qq\""},
      {e_merge_bad_string, DSP_ERR_FORMAT, "model.merges[0]"},
      {e_merge_mixed, DSP_ERR_FORMAT, "model.merges[9]"},
      {e_merge_not_pair, DSP_ERR_FORMAT, "model.merges[9]"},
      {e_dup_id, DSP_ERR_FORMAT, "id 5 is given to both"},
      {e_hole, DSP_ERR_FORMAT, "without holes"},
      {e_neg_id, DSP_ERR_FORMAT, "\"a\" has id -1"},
      {e_id_not_int, DSP_ERR_FORMAT, "not an integer"},
      {e_byte_fallback, DSP_ERR_UNSUPPORTED, "model.byte_fallback"},
      {e_dropout, DSP_ERR_UNSUPPORTED, "model.dropout"},
      {e_prefix, DSP_ERR_UNSUPPORTED, "model.continuing_subword_prefix"},
      {e_suffix, DSP_ERR_UNSUPPORTED, "model.end_of_word_suffix"},
      {e_model_key, DSP_ERR_UNSUPPORTED, "cache_capacity"},
      {e_unk_missing, DSP_ERR_FORMAT, "model.unk_token"},
      {e_fuse_not_bool, DSP_ERR_FORMAT, "model.fuse_unk"},
      {e_normalizer, DSP_ERR_UNSUPPORTED, "normalizer.type \"NFKC\""},
      {e_pre_null, DSP_ERR_UNSUPPORTED, "pre_tokenizer"},
      {e_pre_type, DSP_ERR_UNSUPPORTED, "pre_tokenizer.type \"Whitespace\""},
      {e_behavior, DSP_ERR_UNSUPPORTED, "pretokenizers[0].behavior"},
      {e_invert, DSP_ERR_UNSUPPORTED, "pretokenizers[0].invert"},
      {e_bad_regex, DSP_ERR_FORMAT, "pretokenizers[0].pattern.Regex: PCRE2"},
      {e_string_pattern, DSP_ERR_UNSUPPORTED, "pattern.String"},
      {e_prefix_space, DSP_ERR_UNSUPPORTED, "pretokenizers[1].add_prefix_space"},
      {e_byte_level_first, DSP_ERR_UNSUPPORTED, "pretokenizers[0]"},
      {e_decoder_null, DSP_ERR_UNSUPPORTED, "decoder"},
      {e_decoder_type, DSP_ERR_UNSUPPORTED, "decoder.type"},
      {e_post, DSP_ERR_UNSUPPORTED, "post_processor.type \"TemplateProcessing\""},
      {e_truncation, DSP_ERR_UNSUPPORTED, "truncation"},
      {e_padding, DSP_ERR_UNSUPPORTED, "padding"},
      {e_top_key, DSP_ERR_UNSUPPORTED, "unknown field \"extra\""},
      {e_version, DSP_ERR_UNSUPPORTED, "version"},
      {e_added_id, DSP_ERR_FORMAT, "added_tokens[0] \"<|end|>\": id"},
      {e_added_vocab_id, DSP_ERR_FORMAT, "its vocab entry"},
      {e_added_dup, DSP_ERR_FORMAT, "repeats added_tokens[0]"},
      {e_added_empty, DSP_ERR_FORMAT, "added_tokens[0].content is empty"},
      {e_added_flag, DSP_ERR_MISSING, "added_tokens[0].special"},
      {e_added_key, DSP_ERR_UNSUPPORTED, "\"weight\""},
      {e_added_not_array, DSP_ERR_FORMAT, "added_tokens"},
      {e_added_same_nfc, DSP_ERR_FORMAT, "matches the same text"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_t *j = base_json();
    cases[i].edit(j);
    dsp_tokenizer *t = (dsp_tokenizer *)&t; /* must come back NULL */
    dsp_status s = load_json(j, &t);
    if (s != cases[i].want)
      fail_msg("case %zu (%s): status %s, want %s: %s", i, cases[i].says, dsp_status_name(s),
               dsp_status_name(cases[i].want), dsp_error_message());
    assert_null(t);
    const char *m = dsp_error_message();
    if (!strstr(m, "test.json: ") || !strstr(m, cases[i].says))
      fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, m, cases[i].says);
  }
}

static void test_bad_text(void **st) {
  (void)st;
  static const char *const bad[] = {"", "{", "[]", "null", "{\"model\": 1}", "{} x", "{\"a\": 1, \"a\": 2}",
                                    "{\"version\": \"1.0\", \"version\": \"1.0\"}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dsp_tokenizer *t = NULL;
    assert_int_equal(dsp_tokenizer_load_memory(bad[i], strlen(bad[i]), "x.json", &t), DSP_ERR_FORMAT);
    assert_null(t);
    assert_non_null(strstr(dsp_error_message(), "x.json"));
  }
  /* a duplicate vocab key is a JSON error, not a silent overwrite */
  const char *dup = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"a\": 1}, \"merges\": []}}";
  dsp_tokenizer *t = NULL;
  assert_int_equal(dsp_tokenizer_load_memory(dup, strlen(dup), "d.json", &t), DSP_ERR_FORMAT);
  assert_non_null(strstr(dsp_error_message(), "duplicate"));
  assert_int_equal(dsp_tokenizer_load("/nonexistent/dir/tokenizer.json", &t), DSP_ERR_IO);
  assert_null(t);
  assert_non_null(strstr(dsp_error_message(), "/nonexistent/dir/tokenizer.json"));
  assert_int_equal(dsp_tokenizer_load_memory(NULL, 5, "n.json", &t), DSP_ERR_ARG);
  assert_int_equal(dsp_tokenizer_load_memory("{}", 2, "n.json", NULL), DSP_ERR_ARG);
  dsp_tokenizer_free(NULL);
}

/* Other accepted forms: "a b" merges, bare ByteLevel, unk_token. */
static void test_other_forms(void **st) {
  (void)st;
  json_t *j = base_json();
  json_t *m = json_array();
  json_array_append_new(m, json_string("#version: 0.2"));
  json_t *pairs = json_object_get(model(j), "merges");
  for (size_t i = 0; i < json_array_size(pairs); i++) {
    json_t *p = json_array_get(pairs, i);
    char s[64];
    snprintf(s, sizeof s, "%s %s", json_string_value(json_array_get(p, 0)), json_string_value(json_array_get(p, 1)));
    json_array_append_new(m, json_string(s));
  }
  json_object_set_new(model(j), "merges", m);
  json_object_set_new(model(j), "continuing_subword_prefix", json_string(""));
  json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                                    "trim_offsets", 1)); /* use_regex defaults to true */
  json_object_set_new(j, "normalizer", json_null());
  dsp_tokenizer *t;
  assert_int_equal(load_json(j, &t), DSP_OK);
  ENC(t, "abc", 'a', ID_BC);
  ENC(t, "it's", 'i', 't', ID_QS);
  ENC(t, "12", ID_12);            /* GPT-2's regex keeps digit runs */
  ENC(t, "e\xcc\x81", 'e', 0xCC, 0x81); /* no normalizer */
  dsp_tokenizer_free(t);

  /* Without the byte symbol for 'q' and with an unk_token: the unknown byte
   * becomes <unk>; runs are fused only with fuse_unk. */
  for (int fuse = 0; fuse < 2; fuse++) {
    j = base_json();
    json_t *v = json_object_get(model(j), "vocab");
    json_object_del(v, "q");
    json_object_set_new(v, "<unk>", json_integer('q'));
    json_object_set_new(model(j), "unk_token", json_string("<unk>"));
    json_object_set_new(model(j), "fuse_unk", json_boolean(fuse));
    assert_int_equal(load_json(j, &t), DSP_OK);
    if (fuse) ENC(t, "aqqb", 'a', 'q', 'b');
    else ENC(t, "aqqb", 'a', 'q', 'q', 'b');
    dsp_tokenizer_free(t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_byte_table_anchors),
      cmocka_unit_test(test_merges_by_rank),
      cmocka_unit_test(test_pre_tokenizer),
      cmocka_unit_test(test_nfc_and_invalid_utf8),
      cmocka_unit_test(test_added_tokens),
      cmocka_unit_test(test_decode),
      cmocka_unit_test(test_encode_buffer),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_bad_text),
      cmocka_unit_test(test_other_forms),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
