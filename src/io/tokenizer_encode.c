/* Encoding, in the order tokenizers applies its steps: added tokens found in
 * the raw text; NFC of what is left; normalized added tokens found in that;
 * the pre-tokenizer's regex steps; GPT-2's byte mapping; BPE merges by rank.
 * All scratch memory belongs to the call, so threads may share the handle. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/tokenizer_impl.h"

typedef struct {
  int32_t id, prev, next;
  uint32_t len; /* bytes covered; 0 once merged into its left neighbour */
} bpe_sym;

typedef struct {
  uint32_t rank;
  int32_t pos, merged;
} bpe_cand;

typedef struct {
  const dsp_tokenizer *t;
  int32_t *ids;
  size_t cap, n;
  pcre2_match_data *md;
  bpe_sym *sym;
  size_t sym_cap;
  bpe_cand *heap;
  size_t heap_cap, heap_n;
  char *map; /* a word's byte-level spelling, for ignore_merges */
  size_t map_cap;
} enc_state;

static void emit(enc_state *e, int32_t id) {
  if (e->n < e->cap) e->ids[e->n] = id;
  e->n++;
}

/* p grown to hold n items of size sz (*cap updated), or NULL with p intact. */
static void *grow(void *p, size_t *cap, size_t n, size_t sz) {
  if (n <= *cap) return p;
  size_t c = *cap ? *cap : 64;
  while (c < n) c *= 2;
  if (c > SIZE_MAX / sz) return NULL;
  void *q = realloc(p, c * sz);
  if (q) *cap = c;
  return q;
}

static int cand_before(const bpe_cand *a, const bpe_cand *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(enc_state *e, bpe_cand c) {
  size_t i = e->heap_n++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!cand_before(&c, &e->heap[p])) break;
    e->heap[i] = e->heap[p];
    i = p;
  }
  e->heap[i] = c;
}

static bpe_cand heap_pop(enc_state *e) {
  bpe_cand top = e->heap[0], last = e->heap[--e->heap_n];
  size_t i = 0, n = e->heap_n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && cand_before(&e->heap[c + 1], &e->heap[c])) c++;
    if (!cand_before(&e->heap[c], &last)) break;
    e->heap[i] = e->heap[c];
    i = c;
  }
  if (n) e->heap[i] = last;
  return top;
}

static void push_pair(enc_state *e, int32_t pos) {
  const bpe_sym *s = e->sym;
  uint32_t rank;
  int32_t merged;
  if (dsp_tok_pairmap_get(&e->t->merges, s[pos].id, s[s[pos].next].id, &rank, &merged))
    heap_push(e, (bpe_cand){rank, pos, merged});
}

/* One pre-token: bytes to symbols, then the lowest-ranked pair merged first
 * (leftmost among equal ranks) until no pair merges. */
static dsp_status bpe_word(enc_state *e, const uint8_t *w, size_t len) {
  const dsp_tokenizer *t = e->t;
  if (len == 1 && t->byte_id[w[0]] >= 0 && !t->ignore_merges) {
    emit(e, t->byte_id[w[0]]);
    return DSP_OK;
  }
  if (t->ignore_merges) {
    /* A word spelled exactly like a vocab entry is that entry. */
    char *m = grow(e->map, &e->map_cap, 2 * len + 1, 1);
    if (!m) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: encode");
    e->map = m;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
      uint32_t cp = dsp_tok_byte_to_cp(w[i]);
      if (cp < 0x80) e->map[o++] = (char)cp;
      else e->map[o++] = (char)(0xC0 | cp >> 6), e->map[o++] = (char)(0x80 | (cp & 0x3F));
    }
    int32_t id = dsp_tok_strmap_get(&t->vmap, t->vstr, t->voff, e->map, o);
    if (id >= 0) {
      emit(e, id);
      return DSP_OK;
    }
  }
  if (len > (size_t)INT32_MAX - 1) return dsp_fail(DSP_ERR_RANGE, "tokenizer: a pre-token of %zu bytes", len);
  /* The queue holds at most n - 1 first pairs plus two per merge. */
  bpe_sym *sym = grow(e->sym, &e->sym_cap, len, sizeof *sym);
  if (sym) e->sym = sym;
  bpe_cand *heap = sym ? grow(e->heap, &e->heap_cap, 3 * len, sizeof *heap) : NULL;
  if (!heap) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: encode");
  e->heap = heap;
  /* Bytes without a symbol become the unknown token (runs of them fused when
   * fuse_unk), or are dropped when there is none, as tokenizers does. */
  int32_t n = 0;
  uint32_t unk_len = 0;
  for (size_t i = 0; i <= len; i++) {
    int32_t id = i < len ? t->byte_id[w[i]] : -1;
    int unknown = i < len && id < 0 && t->unk_id >= 0;
    if (unk_len && (i == len || id >= 0 || (unknown && !t->fuse_unk))) {
      e->sym[n] = (bpe_sym){t->unk_id, n - 1, n + 1, unk_len};
      n++;
      unk_len = 0;
    }
    if (i == len) break;
    if (id >= 0) {
      e->sym[n] = (bpe_sym){id, n - 1, n + 1, 1};
      n++;
    } else if (unknown) {
      unk_len++;
    }
  }
  if (n == 0) return DSP_OK;
  e->sym[n - 1].next = -1;
  e->heap_n = 0;
  for (int32_t i = 0; i + 1 < n; i++) push_pair(e, i);
  while (e->heap_n) {
    bpe_cand c = heap_pop(e);
    bpe_sym *s = e->sym;
    if (s[c.pos].len == 0 || s[c.pos].next < 0) continue;
    int32_t r = s[c.pos].next;
    /* A candidate whose pair has changed since it was queued is stale. */
    uint32_t rank;
    int32_t merged;
    if (!dsp_tok_pairmap_get(&t->merges, s[c.pos].id, s[r].id, &rank, &merged) || merged != c.merged) continue;
    s[c.pos].id = merged;
    s[c.pos].len += s[r].len;
    s[c.pos].next = s[r].next;
    s[r].len = 0;
    if (s[c.pos].next >= 0) s[s[c.pos].next].prev = c.pos;
    if (s[c.pos].prev >= 0) push_pair(e, s[c.pos].prev);
    if (s[c.pos].next >= 0) push_pair(e, c.pos);
  }
  for (int32_t i = 0; i >= 0; i = e->sym[i].next) emit(e, e->sym[i].id);
  return DSP_OK;
}

static dsp_status split_stage(enc_state *e, const char *s, size_t len, int stage);

static dsp_status split_part(enc_state *e, const char *s, size_t a, size_t b, int stage) {
  return b > a ? split_stage(e, s + a, b - a, stage + 1) : DSP_OK;
}

/* One regex step with Split's Isolated behaviour: every match and every gap
 * between matches is a piece. Matches are found the way the Oniguruma
 * iterator behind tokenizers finds them: an empty match right where the
 * previous match ended is skipped by one character. */
static dsp_status split_stage(enc_state *e, const char *s, size_t len, int stage) {
  const dsp_tokenizer *t = e->t;
  if (stage == t->n_stages) return bpe_word(e, (const uint8_t *)s, len);
  pcre2_code *re = t->stage[stage];
  size_t from = 0, prev = 0, last_match_end = 0;
  int matched = 0;
  while (from <= len) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK, e->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(re, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[128];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return dsp_fail(DSP_ERR_RANGE, "tokenizer: pre-tokenizer regex step %d at byte %zu of a %zu-byte piece: %s", stage,
                      from, len, (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
    size_t ms = ov[0], me = ov[1];
    if (ms > me || ms < prev || me > len)
      return dsp_fail(DSP_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer regex step %d gave a match that runs backwards",
                      stage);
    if (ms == me && matched && last_match_end == me) {
      uint32_t cp;
      from += from < len ? dsp_tok_utf8_next(s + from, len - from, &cp) : 1;
      continue;
    }
    from = last_match_end = me;
    matched = 1;
    DSP_TRY(split_part(e, s, prev, ms, stage));
    DSP_TRY(split_part(e, s, ms, me, stage));
    prev = me;
  }
  return split_part(e, s, prev, len, stage);
}

static dsp_status normalized_piece(enc_state *e, const char *s, size_t len);

/* Added tokens in s, with tokenizers' rules: leftmost match, longest among
 * those starting there, scanning on after each match even when single_word
 * discards it; lstrip / rstrip widen a match over whitespace. Pieces between
 * matches go on to `pass` 1 (normalize, then look for normalized tokens) or
 * 2 (pre-tokenize). */
static dsp_status split_added(enc_state *e, const tok_trie *trie, const char *s, size_t len, int pass) {
  const dsp_tokenizer *t = e->t;
  size_t done = 0, pos = 0;
  while (trie->count && pos < len) {
    size_t start = pos, mlen = 0;
    int32_t k = -1;
    for (; start < len; start++)
      if (trie->first[(uint8_t)s[start]] && (k = dsp_tok_trie_longest(trie, s + start, len - start, &mlen)) >= 0)
        break;
    if (k < 0) break;
    size_t stop = start + mlen;
    pos = stop;
    const tok_added *a = &t->added[k];
    uint32_t cp;
    if (a->single_word) {
      int word_before = start > 0 && (dsp_tok_utf8_prev(s, start, &cp), dsp_tok_is_word(cp));
      int word_after = stop < len && (dsp_tok_utf8_next(s + stop, len - stop, &cp), dsp_tok_is_word(cp));
      if (word_before || word_after) continue;
    }
    if (a->lstrip) {
      size_t ns = start, l;
      while (ns > 0 && (l = dsp_tok_utf8_prev(s, ns, &cp), dsp_tok_is_space(cp))) ns -= l;
      start = ns > done ? ns : done; /* spaces an earlier match took stay its own */
    }
    if (a->rstrip) {
      size_t l;
      while (stop < len && (l = dsp_tok_utf8_next(s + stop, len - stop, &cp), dsp_tok_is_space(cp))) stop += l;
    }
    if (done < start) {
      dsp_status st = pass == 1 ? normalized_piece(e, s + done, start - done) : split_stage(e, s + done, start - done, 0);
      if (st != DSP_OK) return st;
    }
    emit(e, a->id);
    done = stop;
  }
  if (done >= len) return DSP_OK;
  return pass == 1 ? normalized_piece(e, s + done, len - done) : split_stage(e, s + done, len - done, 0);
}

static dsp_status normalized_piece(enc_state *e, const char *s, size_t len) {
  if (!e->t->nfc) return split_added(e, &e->t->norm_trie, s, len, 2);
  char *ns;
  size_t nl;
  DSP_TRY(dsp_tok_nfc(s, len, &ns, &nl));
  dsp_status st = split_added(e, &e->t->norm_trie, ns, nl, 2);
  if (ns != s) free(ns);
  return st;
}

dsp_status dsp_tokenizer_encode(const dsp_tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap,
                                size_t *n) {
  if (!t || !n || (len && !text) || (cap && !ids)) return dsp_fail(DSP_ERR_ARG, "dsp_tokenizer_encode: NULL argument");
  *n = 0;
  char *fixed = NULL;
  if (dsp_tok_utf8_valid_prefix(text, len) != len) {
    DSP_TRY(dsp_tok_utf8_replace(text, len, &fixed, &len));
    text = fixed;
  }
  enc_state e = {.t = t, .ids = ids, .cap = cap};
  dsp_status st = DSP_OK;
  if (t->n_stages) {
    e.md = pcre2_match_data_create(1, NULL); /* one pair: only the whole match is used */
    if (!e.md) st = dsp_fail(DSP_ERR_NOMEM, "tokenizer: encode");
  }
  if (st == DSP_OK && len) st = split_added(&e, &t->raw_trie, text, len, 1);
  pcre2_match_data_free(e.md);
  free(e.sym);
  free(e.heap);
  free(e.map);
  free(fixed);
  if (st != DSP_OK) return st;
  *n = e.n;
  if (e.n > cap) return dsp_fail(DSP_ERR_RANGE, "tokenizer: encode gives %zu ids, the buffer has %zu", e.n, cap);
  return DSP_OK;
}
