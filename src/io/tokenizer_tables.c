/* The tokenizer's lookup structures: GPT-2's byte table, the string -> id and
 * pair -> merge maps, and the added-token trie. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/tokenizer_impl.h"

/* Printable Latin-1 bytes stand for themselves; the other 68 bytes take the
 * code points from U+0100 upwards in byte order, so every byte has a visible,
 * non-space character. */
static int byte_is_printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t dsp_tok_byte_to_cp(uint8_t b) {
  if (byte_is_printable(b)) return b;
  uint32_t n = 0; /* rank of b among the non-printable bytes */
  for (unsigned c = 0; c < b; c++) n += !byte_is_printable(c);
  return 0x100 + n;
}

int dsp_tok_cp_to_byte(uint32_t cp) {
  if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
  if (cp >= 0x100 + 68) return -1;
  uint32_t n = cp - 0x100;
  for (unsigned c = 0; c < 256; c++)
    if (!byte_is_printable(c) && n-- == 0) return (int)c;
  return -1;
}

static uint64_t hash_bytes(const char *s, size_t len) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  return k ^ (k >> 33);
}

/* A power of two at least twice n, so probes stay short. */
static size_t table_size(size_t n) {
  size_t s = 16;
  while (s < 2 * n) s <<= 1;
  return s;
}

dsp_status dsp_tok_strmap_init(tok_strmap *m, size_t n) {
  if (n > (SIZE_MAX / 4) / sizeof(int32_t)) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: map of %zu strings", n);
  size_t s = table_size(n);
  m->slot = malloc(s * sizeof *m->slot);
  if (!m->slot) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: map of %zu strings", n);
  memset(m->slot, 0xff, s * sizeof *m->slot);
  m->mask = s - 1;
  return DSP_OK;
}

void dsp_tok_strmap_free(tok_strmap *m) {
  free(m->slot);
  m->slot = NULL;
}

int32_t dsp_tok_strmap_put(tok_strmap *m, const char *blob, const size_t *off, int32_t id) {
  const char *s = blob + off[id];
  size_t len = off[id + 1] - off[id];
  for (size_t i = hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
    int32_t o = m->slot[i];
    if (o < 0) {
      m->slot[i] = id;
      return -1;
    }
    if (off[o + 1] - off[o] == len && memcmp(blob + off[o], s, len) == 0) return o;
  }
}

int32_t dsp_tok_strmap_get(const tok_strmap *m, const char *blob, const size_t *off, const char *s, size_t len) {
  for (size_t i = hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
    int32_t o = m->slot[i];
    if (o < 0) return -1;
    if (off[o + 1] - off[o] == len && memcmp(blob + off[o], s, len) == 0) return o;
  }
}

dsp_status dsp_tok_pairmap_init(tok_pairmap *m, size_t n) {
  memset(m, 0, sizeof *m);
  if (n > (SIZE_MAX / 4) / sizeof(uint64_t)) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: map of %zu merges", n);
  size_t s = table_size(n);
  m->key = calloc(s, sizeof *m->key);
  m->rank = malloc(s * sizeof *m->rank);
  m->merged = malloc(s * sizeof *m->merged);
  if (!m->key || !m->rank || !m->merged) {
    dsp_tok_pairmap_free(m);
    return dsp_fail(DSP_ERR_NOMEM, "tokenizer: map of %zu merges", n);
  }
  m->mask = s - 1;
  return DSP_OK;
}

void dsp_tok_pairmap_free(tok_pairmap *m) {
  free(m->key);
  free(m->rank);
  free(m->merged);
  memset(m, 0, sizeof *m);
}

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

void dsp_tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t merged) {
  uint64_t k = pair_key(a, b);
  size_t i = hash_u64(k) & m->mask;
  while (m->key[i] != 0 && m->key[i] != k) i = (i + 1) & m->mask;
  m->key[i] = k;
  m->rank[i] = rank;
  m->merged[i] = merged;
}

int dsp_tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *merged) {
  uint64_t k = pair_key(a, b);
  for (size_t i = hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
    if (m->key[i] == k) {
      *rank = m->rank[i];
      *merged = m->merged[i];
      return 1;
    }
    if (m->key[i] == 0) return 0;
  }
}

void dsp_tok_trie_free(tok_trie *t) {
  free(t->node);
  memset(t, 0, sizeof *t);
}

static int32_t trie_new_node(tok_trie *t, uint8_t byte) {
  if (t->count == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    tok_trie_node *n = realloc(t->node, cap * sizeof *n);
    if (!n) return -1;
    t->node = n;
    t->cap = cap;
  }
  tok_trie_node *n = &t->node[t->count];
  n->child = n->sibling = n->token = -1;
  n->byte = byte;
  return (int32_t)t->count++;
}

dsp_status dsp_tok_trie_add(tok_trie *t, const char *s, size_t len, int32_t token, int32_t *prev) {
  if (t->count == 0 && trie_new_node(t, 0) < 0) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: added-token trie");
  int32_t at = 0;
  for (size_t i = 0; i < len; i++) {
    uint8_t c = (uint8_t)s[i];
    int32_t k = t->node[at].child;
    while (k >= 0 && t->node[k].byte != c) k = t->node[k].sibling;
    if (k < 0) {
      k = trie_new_node(t, c);
      if (k < 0) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: added-token trie");
      t->node[k].sibling = t->node[at].child;
      t->node[at].child = k;
    }
    at = k;
  }
  *prev = t->node[at].token;
  if (*prev < 0) t->node[at].token = token;
  if (len) t->first[(uint8_t)s[0]] = 1;
  return DSP_OK;
}

int32_t dsp_tok_trie_longest(const tok_trie *t, const char *s, size_t len, size_t *mlen) {
  if (t->count == 0 || len == 0 || !t->first[(uint8_t)s[0]]) return -1;
  int32_t best = -1, at = 0;
  for (size_t i = 0; i < len; i++) {
    int32_t k = t->node[at].child;
    while (k >= 0 && t->node[k].byte != (uint8_t)s[i]) k = t->node[k].sibling;
    if (k < 0) break;
    at = k;
    if (t->node[at].token >= 0) {
      best = t->node[at].token;
      *mlen = i + 1;
    }
  }
  return best;
}
