/* added_tokens, and the table of the bytes each id decodes to. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/status.h"
#include "io/tokenizer_impl.h"

#define NM "\"%.60s\""

static dsp_status added_flags(const char *label, size_t i, json_t *e, tok_added *a) {
  static const char *const names[] = {"special", "lstrip", "rstrip", "single_word", "normalized"};
  uint8_t *dst[] = {&a->special, &a->lstrip, &a->rstrip, &a->single_word, &a->normalized};
  char where[48];
  snprintf(where, sizeof where, "added_tokens[%zu]", i);
  for (int k = 0; k < 5; k++) {
    json_t *v = json_object_get(e, names[k]);
    if (!v) return dsp_fail(DSP_ERR_MISSING, "%s: %s.%s is missing", label, where, names[k]);
    if (!json_is_boolean(v)) return dsp_fail(DSP_ERR_FORMAT, "%s: %s.%s is not true or false", label, where, names[k]);
    *dst[k] = (uint8_t)json_is_true(v);
  }
  return DSP_OK;
}

/* First pass: types, contents and the ids tokenizers would assign. It gives a
 * content found in the vocab that entry's id, and every other content the next
 * id after the vocab in list order, whatever the file says; a file that says
 * otherwise is refused rather than silently renumbered. */
static dsp_status added_ids(dsp_tokenizer *t, const char *label, json_t *list, size_t k) {
  static const char *const keys[] = {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special", NULL};
  size_t total = 0;
  for (size_t i = 0; i < k; i++) {
    json_t *e = json_array_get(list, i);
    if (!json_is_object(e)) return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens[%zu] is not an object", label, i);
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v) {
      int ok = 0;
      for (const char *const *a = keys; *a && !ok; a++) ok = strcmp(*a, key) == 0;
      if (!ok) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: added_tokens[%zu]: unknown field " NM, label, i, key);
    }
    json_t *c = json_object_get(e, "content");
    if (!c) return dsp_fail(DSP_ERR_MISSING, "%s: added_tokens[%zu].content is missing", label, i);
    if (!json_is_string(c)) return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens[%zu].content is not a string", label, i);
    if (json_string_length(c) == 0) return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens[%zu].content is empty", label, i);
    if (!json_object_get(e, "id")) return dsp_fail(DSP_ERR_MISSING, "%s: added_tokens[%zu].id is missing", label, i);
    if (!json_is_integer(json_object_get(e, "id")))
      return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens[%zu].id is not an integer", label, i);
    DSP_TRY(added_flags(label, i, e, &t->added[i]));
    total += json_string_length(c);
  }
  t->aoff = malloc((k + 1) * sizeof *t->aoff);
  t->astr = malloc(total + 1);
  if (!t->aoff || !t->astr) return dsp_fail(DSP_ERR_NOMEM, "%s: added_tokens", label);
  DSP_TRY(dsp_tok_strmap_init(&t->amap, k));
  size_t o = 0;
  int64_t next = t->n_vocab;
  for (size_t i = 0; i < k; i++) {
    json_t *e = json_array_get(list, i);
    json_t *c = json_object_get(e, "content");
    const char *s = json_string_value(c);
    size_t len = json_string_length(c);
    t->aoff[i] = o;
    memcpy(t->astr + o, s, len);
    o += len;
    t->aoff[i + 1] = o;
    int32_t dup = dsp_tok_strmap_put(&t->amap, t->astr, t->aoff, (int32_t)i);
    if (dup >= 0)
      return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens[%zu]: content " NM " repeats added_tokens[%d]", label, i, s, dup);
    int32_t vid = dsp_tok_strmap_get(&t->vmap, t->vstr, t->voff, s, len);
    int64_t want = vid >= 0 ? vid : next++;
    json_int_t id = json_integer_value(json_object_get(e, "id"));
    if (id != want)
      return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens[%zu] " NM ": id %lld, but tokenizers gives it %lld (%s)", label, i,
                      s, (long long)id, (long long)want,
                      vid >= 0 ? "its vocab entry" : "the next id after the vocab and the added tokens before it");
    t->added[i].id = (int32_t)want;
  }
  t->astr[o] = 0;
  t->n_ids = (int32_t)next;
  return DSP_OK;
}

dsp_status dsp_tok_load_added(dsp_tokenizer *t, const char *label, json_t *list) {
  t->n_ids = t->n_vocab;
  size_t k = 0;
  if (list && !json_is_null(list)) {
    if (!json_is_array(list)) return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens is not an array", label);
    k = json_array_size(list);
  }
  if (k >= (size_t)INT32_MAX / 2) return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens has %zu entries, too many", label, k);
  t->added = calloc(k ? k : 1, sizeof *t->added);
  if (!t->added) return dsp_fail(DSP_ERR_NOMEM, "%s: added_tokens", label);
  t->n_added = (int32_t)k;
  if (k) DSP_TRY(added_ids(t, label, list, k));
  t->special = calloc((size_t)t->n_ids, 1);
  if (!t->special) return dsp_fail(DSP_ERR_NOMEM, "%s: added_tokens", label);
  for (size_t i = 0; i < k; i++) {
    tok_added *a = &t->added[i];
    const char *c = t->astr + t->aoff[i];
    size_t len = t->aoff[i + 1] - t->aoff[i];
    /* Normalized tokens are looked for in normalized text, so in their
     * normalized form. */
    char *m = (char *)c;
    size_t ml = len;
    if (a->normalized && t->nfc) DSP_TRY(dsp_tok_nfc(c, len, &m, &ml));
    if (m == c) {
      m = malloc(len + 1);
      if (!m) return dsp_fail(DSP_ERR_NOMEM, "%s: added_tokens", label);
      memcpy(m, c, len);
      m[len] = 0;
    }
    a->match = m;
    a->match_len = ml;
    int32_t prev;
    DSP_TRY(dsp_tok_trie_add(a->normalized ? &t->norm_trie : &t->raw_trie, m, ml, (int32_t)i, &prev));
    if (prev >= 0)
      return dsp_fail(DSP_ERR_FORMAT, "%s: added_tokens[%zu] " NM " matches the same text as added_tokens[%d]", label, i,
                      c, prev);
    if (a->special) t->special[a->id] = 1;
  }
  return DSP_OK;
}

/* The ByteLevel decoder's rule, per token: when every character of the token
 * stands for a byte, those bytes; otherwise the token's own UTF-8. */
static size_t decode_token(const char *s, size_t len, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    i += dsp_tok_utf8_next(s + i, len - i, &cp);
    int b = dsp_tok_cp_to_byte(cp);
    if (b < 0) {
      memcpy(out, s, len);
      return len;
    }
    out[o++] = (char)b;
  }
  return o;
}

dsp_status dsp_tok_build_decode(dsp_tokenizer *t, const char *label) {
  size_t n = (size_t)t->n_ids;
  int32_t *which = malloc(n * sizeof *which); /* added index per id, -1 for vocab entries */
  t->doff = malloc((n + 1) * sizeof *t->doff);
  if (!which || !t->doff) {
    free(which);
    return dsp_fail(DSP_ERR_NOMEM, "%s: decoding table", label);
  }
  memset(which, 0xff, n * sizeof *which);
  for (int32_t i = 0; i < t->n_added; i++) which[t->added[i].id] = i;
  size_t total = 0;
  for (size_t id = 0; id < n; id++)
    total += which[id] >= 0 ? t->added[which[id]].match_len : t->voff[id + 1] - t->voff[id];
  t->dstr = malloc(total + 1);
  if (!t->dstr) {
    free(which);
    return dsp_fail(DSP_ERR_NOMEM, "%s: decoding table", label);
  }
  size_t o = 0;
  for (size_t id = 0; id < n; id++) {
    t->doff[id] = o;
    if (which[id] >= 0) o += decode_token(t->added[which[id]].match, t->added[which[id]].match_len, t->dstr + o);
    else o += decode_token(t->vstr + t->voff[id], t->voff[id + 1] - t->voff[id], t->dstr + o);
  }
  t->doff[n] = o;
  t->dstr[o] = 0;
  free(which);
  return DSP_OK;
}
