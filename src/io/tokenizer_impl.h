/* The tokenizer's internal layout, shared by its files (load, tables, text,
 * encode). Nothing here is mutated after dsp_tokenizer_load returns. */
#ifndef DSP_IO_TOKENIZER_IMPL_H
#define DSP_IO_TOKENIZER_IMPL_H
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "io/tokenizer.h"

/* Pre-tokenizer regex steps applied one after the other (Split steps, then
 * ByteLevel's own GPT-2 split when use_regex is set). */
#define TOK_MAX_STAGES 8

/* string -> id, open addressing over spans of a byte blob */
typedef struct {
  int32_t *slot; /* id, or -1 when empty */
  size_t mask;
} tok_strmap;

/* (left id, right id) -> (rank, merged id) */
typedef struct {
  uint64_t *key; /* (left << 32 | right) + 1; 0 when empty */
  uint32_t *rank;
  int32_t *merged;
  size_t mask;
} tok_pairmap;

/* Byte trie over added-token texts, for leftmost-longest matching. */
typedef struct {
  int32_t child, sibling, token; /* token: index into added[], -1 if none */
  uint8_t byte;
} tok_trie_node;

typedef struct {
  tok_trie_node *node; /* node[0] is the root */
  size_t count, cap;
  uint8_t first[256];  /* 1 where some text starts with that byte */
} tok_trie;

typedef struct {
  int32_t id;
  uint8_t special, lstrip, rstrip, single_word, normalized;
  char *match; /* the text matched and decoded: content, or its NFC form when normalized */
  size_t match_len;
} tok_added;

struct dsp_tokenizer {
  int32_t n_vocab; /* model vocab entries: ids 0..n_vocab-1 */
  int32_t n_ids;   /* largest id + 1 */
  /* model vocab strings in their byte-level spelling */
  char *vstr;
  size_t *voff; /* n_vocab + 1 */
  tok_strmap vmap;
  tok_pairmap merges;
  int32_t byte_id[256]; /* id of each single byte's symbol, -1 if absent */
  int32_t unk_id;       /* -1: unknown symbols are dropped, as tokenizers does */
  int fuse_unk, ignore_merges;
  /* bytes each id decodes to */
  char *dstr;
  size_t *doff; /* n_ids + 1 */
  uint8_t *special; /* n_ids */
  tok_added *added;
  int32_t n_added;
  char *astr;   /* added contents, as written */
  size_t *aoff; /* n_added + 1 */
  tok_strmap amap; /* content -> index into added[] */
  tok_trie raw_trie, norm_trie; /* not-normalized / normalized added tokens */
  int nfc;
  int n_stages;
  pcre2_code *stage[TOK_MAX_STAGES];
};

/* GPT-2's byte <-> code point table. */
uint32_t dsp_tok_byte_to_cp(uint8_t b);
/* -1 when the code point stands for no byte. */
int dsp_tok_cp_to_byte(uint32_t cp);

/* Maps and trie (tokenizer_tables.c). */
dsp_status dsp_tok_strmap_init(tok_strmap *m, size_t n);
void dsp_tok_strmap_free(tok_strmap *m);
/* Adds id for blob[off[id] .. off[id+1]); returns the id already there, or -1. */
int32_t dsp_tok_strmap_put(tok_strmap *m, const char *blob, const size_t *off, int32_t id);
int32_t dsp_tok_strmap_get(const tok_strmap *m, const char *blob, const size_t *off, const char *s, size_t len);

dsp_status dsp_tok_pairmap_init(tok_pairmap *m, size_t n);
void dsp_tok_pairmap_free(tok_pairmap *m);
/* Inserts or overwrites (a later duplicate merge wins, as in tokenizers). */
void dsp_tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t merged);
/* 1 and the rank / merged id when the pair merges. */
int dsp_tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *merged);

void dsp_tok_trie_free(tok_trie *t);
/* *prev: the token that already had exactly this text (it is kept), or -1. */
dsp_status dsp_tok_trie_add(tok_trie *t, const char *s, size_t len, int32_t token, int32_t *prev);
/* Longest text starting at s (len bytes available): its token index and
 * length, or -1. */
int32_t dsp_tok_trie_longest(const tok_trie *t, const char *s, size_t len, size_t *mlen);

/* Text helpers (tokenizer_text.c). */
/* Length of valid UTF-8 prefix; == len when the whole text is valid. */
size_t dsp_tok_utf8_valid_prefix(const char *s, size_t len);
/* Copy of s with each maximal invalid subsequence replaced by U+FFFD. */
dsp_status dsp_tok_utf8_replace(const char *s, size_t len, char **out, size_t *out_len);
/* NFC of valid UTF-8; *out is s itself when nothing can change (free only when
 * *out != s). */
dsp_status dsp_tok_nfc(const char *s, size_t len, char **out, size_t *out_len);
/* Decodes the code point at s (valid UTF-8), returns its byte length. */
size_t dsp_tok_utf8_next(const char *s, size_t len, uint32_t *cp);
/* Decodes the code point ending at s[len-1], returns its byte length. */
size_t dsp_tok_utf8_prev(const char *s, size_t len, uint32_t *cp);
/* Rust regex's Unicode \s and \w, which tokenizers uses for lstrip, rstrip
 * and single_word. */
int dsp_tok_is_space(uint32_t cp);
int dsp_tok_is_word(uint32_t cp);

/* Loading (tokenizer_load.c, tokenizer_added.c): the whole file, the
 * added_tokens list, then the table of each id's bytes. */
struct json_t;
dsp_status dsp_tok_build(dsp_tokenizer *t, const char *label, struct json_t *root);
dsp_status dsp_tok_load_added(dsp_tokenizer *t, const char *label, struct json_t *list);
dsp_status dsp_tok_build_decode(dsp_tokenizer *t, const char *label);

#endif
