/* The tokenizer's handle: loading, freeing, decoding and lookups. Encoding is
 * in tokenizer_encode.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/status.h"
#include "io/tokenizer_impl.h"

void dsp_tokenizer_free(dsp_tokenizer *t) {
  if (!t) return;
  free(t->vstr);
  free(t->voff);
  dsp_tok_strmap_free(&t->vmap);
  dsp_tok_pairmap_free(&t->merges);
  free(t->dstr);
  free(t->doff);
  free(t->special);
  if (t->added)
    for (int32_t i = 0; i < t->n_added; i++) free(t->added[i].match);
  free(t->added);
  free(t->astr);
  free(t->aoff);
  dsp_tok_strmap_free(&t->amap);
  dsp_tok_trie_free(&t->raw_trie);
  dsp_tok_trie_free(&t->norm_trie);
  for (int i = 0; i < t->n_stages; i++) pcre2_code_free(t->stage[i]);
  free(t);
}

dsp_status dsp_tokenizer_load_memory(const char *json, size_t len, const char *label, dsp_tokenizer **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "dsp_tokenizer_load_memory: out is NULL");
  *out = NULL;
  if (!label) label = "tokenizer.json";
  if (!json && len) return dsp_fail(DSP_ERR_ARG, "%s: json is NULL", label);
  json_error_t e;
  /* Duplicate keys would let one vocab entry silently hide another. */
  json_t *root = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &e);
  if (!root) return dsp_fail(DSP_ERR_FORMAT, "%s: line %d column %d: %s", label, e.line, e.column, e.text);
  dsp_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    json_decref(root);
    return dsp_fail(DSP_ERR_NOMEM, "%s: tokenizer", label);
  }
  t->unk_id = -1;
  dsp_status st = dsp_tok_build(t, label, root);
  json_decref(root);
  if (st != DSP_OK) {
    dsp_tokenizer_free(t);
    return st;
  }
  dsp_error_clear();
  *out = t;
  return DSP_OK;
}

dsp_status dsp_tokenizer_load(const char *path, dsp_tokenizer **out) {
  if (!out) return dsp_fail(DSP_ERR_ARG, "dsp_tokenizer_load: out is NULL");
  *out = NULL;
  if (!path) return dsp_fail(DSP_ERR_ARG, "dsp_tokenizer_load: path is NULL");
  FILE *f = fopen(path, "rb");
  if (!f) return dsp_fail(DSP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      size_t c = cap ? 2 * cap : (size_t)1 << 20;
      char *p = c > cap ? realloc(buf, c) : NULL;
      if (!p) {
        free(buf);
        fclose(f);
        return dsp_fail(DSP_ERR_NOMEM, "%s: reading %zu bytes", path, c);
      }
      buf = p;
      cap = c;
    }
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return dsp_fail(DSP_ERR_IO, "%s: read error", path);
  }
  dsp_status st = dsp_tokenizer_load_memory(buf, len, path, out);
  free(buf);
  return st;
}

int64_t dsp_tokenizer_vocab_size(const dsp_tokenizer *t) { return t ? t->n_ids : 0; }

dsp_status dsp_tokenizer_token_bytes(const dsp_tokenizer *t, int32_t id, const char **bytes, size_t *len) {
  if (!t || !bytes || !len) return dsp_fail(DSP_ERR_ARG, "dsp_tokenizer_token_bytes: NULL argument");
  if (id < 0 || id >= t->n_ids)
    return dsp_fail(DSP_ERR_RANGE, "tokenizer: token id %d is outside 0..%d", (int)id, (int)t->n_ids - 1);
  *bytes = t->dstr + t->doff[id];
  *len = t->doff[id + 1] - t->doff[id];
  return DSP_OK;
}

dsp_status dsp_tokenizer_decode(const dsp_tokenizer *t, const int32_t *ids, size_t n, char *buf, size_t cap,
                                size_t *len) {
  if (!t || !len || (n && !ids) || (cap && !buf)) return dsp_fail(DSP_ERR_ARG, "dsp_tokenizer_decode: NULL argument");
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_ids) {
      *len = 0;
      return dsp_fail(DSP_ERR_RANGE, "tokenizer: decode: ids[%zu] = %d is outside 0..%d", i, (int)id,
                      (int)t->n_ids - 1);
    }
    size_t l = t->doff[id + 1] - t->doff[id];
    if (o + l <= cap) memcpy(buf + o, t->dstr + t->doff[id], l);
    else if (o < cap) memcpy(buf + o, t->dstr + t->doff[id], cap - o);
    o += l;
  }
  *len = o;
  if (o > cap) return dsp_fail(DSP_ERR_RANGE, "tokenizer: decode needs %zu bytes, the buffer has %zu", o, cap);
  return DSP_OK;
}

dsp_status dsp_tokenizer_text(const dsp_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                              size_t *len) {
  if (!t || !text || !len || (n && !ids)) return dsp_fail(DSP_ERR_ARG, "dsp_tokenizer_text: NULL argument");
  *text = NULL;
  *len = 0;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->n_ids)
      return dsp_fail(DSP_ERR_RANGE, "tokenizer: text: ids[%zu] = %d is outside 0..%d", i, (int)ids[i],
                      (int)t->n_ids - 1);
    if (!(skip_special && dsp_tokenizer_is_special(t, ids[i]))) total += t->doff[ids[i] + 1] - t->doff[ids[i]];
  }
  char *raw = malloc(total + 1);
  if (!raw) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: text of %zu bytes", total);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (skip_special && dsp_tokenizer_is_special(t, ids[i])) continue;
    const size_t l = t->doff[ids[i] + 1] - t->doff[ids[i]];
    memcpy(raw + o, t->dstr + t->doff[ids[i]], l);
    o += l;
  }
  dsp_status s = dsp_tok_utf8_replace(raw, o, text, len);
  free(raw);
  return s;
}

int32_t dsp_tokenizer_find(const dsp_tokenizer *t, const char *token) {
  if (!t || !token) return -1;
  size_t len = strlen(token);
  /* An added token's content wins over a vocab entry, as in tokenizers. */
  if (t->n_added) {
    int32_t a = dsp_tok_strmap_get(&t->amap, t->astr, t->aoff, token, len);
    if (a >= 0) return t->added[a].id;
  }
  return dsp_tok_strmap_get(&t->vmap, t->vstr, t->voff, token, len);
}

int dsp_tokenizer_is_special(const dsp_tokenizer *t, int32_t id) {
  return t && id >= 0 && id < t->n_ids && t->special && t->special[id];
}
