/* tokenizer.json -> dsp_tokenizer: every field is checked against what this
 * runtime can honour; the model's vocab and merges are checked the way
 * `tokenizers` checks them, and then some (no holes, no shared ids). */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/status.h"
#include "io/tokenizer_impl.h"

/* Quoted names in messages are cut to this many bytes. */
#define NM "\"%.60s\""

/* What ByteLevel's use_regex adds: GPT-2's split. */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Refuses keys outside `allowed` (NULL-terminated): an unknown field may
 * change what the file means. */
static dsp_status check_keys(const char *label, const char *where, json_t *obj, const char *const *allowed) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    int ok = 0;
    for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, key) == 0;
    if (!ok) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s: unknown field " NM, label, where, key);
  }
  return DSP_OK;
}

/* A boolean that may be absent or null (then `dflt`, or MISSING when
 * dflt < 0). */
static dsp_status get_bool(const char *label, const char *where, json_t *obj, const char *key, int dflt, int *out) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    if (dflt < 0) return dsp_fail(DSP_ERR_MISSING, "%s: %s.%s is missing", label, where, key);
    *out = dflt;
    return DSP_OK;
  }
  if (!json_is_boolean(v)) return dsp_fail(DSP_ERR_FORMAT, "%s: %s.%s is not true or false", label, where, key);
  *out = json_is_true(v);
  return DSP_OK;
}

/* The object's "type" string, or NULL with the error recorded. */
static const char *get_type(const char *label, const char *where, json_t *obj, dsp_status *st) {
  json_t *v = json_object_get(obj, "type");
  if (!v) {
    *st = dsp_fail(DSP_ERR_MISSING, "%s: %s.type is missing", label, where);
    return NULL;
  }
  if (!json_is_string(v)) {
    *st = dsp_fail(DSP_ERR_FORMAT, "%s: %s.type is not a string", label, where);
    return NULL;
  }
  return json_string_value(v);
}

static int32_t vocab_get(const dsp_tokenizer *t, const char *s, size_t len) {
  return dsp_tok_strmap_get(&t->vmap, t->vstr, t->voff, s, len);
}

static dsp_status load_vocab(dsp_tokenizer *t, const char *label, json_t *vocab) {
  if (!vocab) return dsp_fail(DSP_ERR_MISSING, "%s: model.vocab is missing", label);
  if (!json_is_object(vocab)) return dsp_fail(DSP_ERR_FORMAT, "%s: model.vocab is not an object", label);
  size_t n = json_object_size(vocab);
  if (n == 0) return dsp_fail(DSP_ERR_FORMAT, "%s: model.vocab is empty", label);
  if (n >= (size_t)INT32_MAX / 2) return dsp_fail(DSP_ERR_FORMAT, "%s: model.vocab has %zu entries, too many", label, n);
  const char **name = calloc(n, sizeof *name);
  if (!name) return dsp_fail(DSP_ERR_NOMEM, "%s: model.vocab of %zu entries", label, n);
  /* Ids must be exactly 0..n-1: a hole would shift the ids tokenizers gives
   * to added tokens, a shared id makes decoding ambiguous. */
  dsp_status st = DSP_OK;
  size_t total = 0;
  const char *key;
  json_t *v;
  json_object_foreach(vocab, key, v) {
    if (!json_is_integer(v)) {
      st = dsp_fail(DSP_ERR_FORMAT, "%s: model.vocab: " NM " has an id that is not an integer", label, key);
      break;
    }
    json_int_t id = json_integer_value(v);
    if (id < 0 || (size_t)id >= n) {
      st = dsp_fail(DSP_ERR_FORMAT, "%s: model.vocab: " NM " has id %lld, outside 0..%zu (ids must be 0..N-1 without holes)",
                    label, key, (long long)id, n - 1);
      break;
    }
    if (name[id]) {
      st = dsp_fail(DSP_ERR_FORMAT, "%s: model.vocab: id %lld is given to both " NM " and " NM, label, (long long)id,
                    name[id], key);
      break;
    }
    name[id] = key;
    total += strlen(key);
  }
  if (st == DSP_OK) {
    t->n_vocab = (int32_t)n;
    t->voff = malloc((n + 1) * sizeof *t->voff);
    t->vstr = malloc(total + 1);
    if (!t->voff || !t->vstr) st = dsp_fail(DSP_ERR_NOMEM, "%s: model.vocab of %zu entries", label, n);
  }
  if (st == DSP_OK) st = dsp_tok_strmap_init(&t->vmap, n);
  if (st == DSP_OK) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
      size_t l = strlen(name[i]);
      t->voff[i] = o;
      memcpy(t->vstr + o, name[i], l);
      o += l;
    }
    t->voff[n] = o;
    t->vstr[o] = 0;
    for (size_t i = 0; i < n; i++) DSP_ASSERT(dsp_tok_strmap_put(&t->vmap, t->vstr, t->voff, (int32_t)i) < 0);
  }
  free(name);
  return st;
}

/* One merge's two sides, from "a b" or ["a", "b"]; *skip for "#version" lines,
 * which tokenizers drops before counting ranks. */
static dsp_status merge_sides(const char *label, size_t i, json_t *m, int legacy, const char **a, size_t *al,
                              const char **b, size_t *bl, int *skip) {
  *skip = 0;
  if (legacy) {
    if (!json_is_string(m))
      return dsp_fail(DSP_ERR_FORMAT, "%s: model.merges[%zu] is not a string like model.merges[0]", label, i);
    const char *s = json_string_value(m);
    size_t len = json_string_length(m);
    if (len >= 8 && memcmp(s, "#version", 8) == 0) {
      *skip = 1;
      return DSP_OK;
    }
    const char *sp = memchr(s, ' ', len);
    if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)))
      return dsp_fail(DSP_ERR_FORMAT, "%s: model.merges[%zu] " NM " is not two tokens split by one space", label, i, s);
    *a = s;
    *al = (size_t)(sp - s);
    *b = sp + 1;
    *bl = len - *al - 1;
    return DSP_OK;
  }
  if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) ||
      !json_is_string(json_array_get(m, 1)))
    return dsp_fail(DSP_ERR_FORMAT, "%s: model.merges[%zu] is not a pair of strings like model.merges[0]", label, i);
  *a = json_string_value(json_array_get(m, 0));
  *al = json_string_length(json_array_get(m, 0));
  *b = json_string_value(json_array_get(m, 1));
  *bl = json_string_length(json_array_get(m, 1));
  return DSP_OK;
}

static dsp_status load_merges(dsp_tokenizer *t, const char *label, json_t *merges) {
  if (!merges) return dsp_fail(DSP_ERR_MISSING, "%s: model.merges is missing", label);
  if (!json_is_array(merges)) return dsp_fail(DSP_ERR_FORMAT, "%s: model.merges is not an array", label);
  size_t n = json_array_size(merges);
  if (n >= UINT32_MAX) return dsp_fail(DSP_ERR_FORMAT, "%s: model.merges has %zu entries, too many", label, n);
  DSP_TRY(dsp_tok_pairmap_init(&t->merges, n));
  int legacy = n > 0 && json_is_string(json_array_get(merges, 0));
  char *cat = NULL;
  size_t cat_cap = 0;
  uint32_t rank = 0;
  dsp_status st = DSP_OK;
  for (size_t i = 0; i < n && st == DSP_OK; i++) {
    const char *a = NULL, *b = NULL;
    size_t al = 0, bl = 0;
    int skip = 0;
    st = merge_sides(label, i, json_array_get(merges, i), legacy, &a, &al, &b, &bl, &skip);
    if (st != DSP_OK || skip) continue;
    int32_t ia = vocab_get(t, a, al), ib = vocab_get(t, b, bl);
    if (ia < 0 || ib < 0) {
      const char *bad = ia < 0 ? a : b;
      size_t bad_len = ia < 0 ? al : bl;
      st = dsp_fail(DSP_ERR_FORMAT, "%s: model.merges[%zu]: \"%.*s\" is not in the vocab", label, i,
                    (int)(bad_len > 60 ? 60 : bad_len), bad);
      break;
    }
    if (al + bl > cat_cap) {
      size_t c = 2 * (al + bl) + 16;
      char *p = realloc(cat, c);
      if (!p) {
        st = dsp_fail(DSP_ERR_NOMEM, "%s: model.merges", label);
        break;
      }
      cat = p;
      cat_cap = c;
    }
    memcpy(cat, a, al);
    memcpy(cat + al, b, bl);
    int32_t im = vocab_get(t, cat, al + bl);
    if (im < 0) {
      st = dsp_fail(DSP_ERR_FORMAT, "%s: model.merges[%zu]: the merged token \"%.*s\" is not in the vocab", label, i,
                    (int)((al + bl) > 60 ? 60 : al + bl), cat);
      break;
    }
    dsp_tok_pairmap_put(&t->merges, ia, ib, rank++, im);
  }
  free(cat);
  return st;
}

static dsp_status load_model(dsp_tokenizer *t, const char *label, json_t *model) {
  static const char *const keys[] = {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                     "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                     "vocab", "merges", NULL};
  if (!model) return dsp_fail(DSP_ERR_MISSING, "%s: model is missing", label);
  if (!json_is_object(model)) return dsp_fail(DSP_ERR_FORMAT, "%s: model is not an object", label);
  dsp_status st = DSP_OK;
  const char *type = get_type(label, "model", model, &st);
  if (!type) return st;
  if (strcmp(type, "BPE") != 0)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: model.type " NM " is not supported (only BPE)", label, type);
  DSP_TRY(check_keys(label, "model", model, keys));
  json_t *v = json_object_get(model, "dropout");
  if (v && !json_is_null(v)) {
    if (!json_is_number(v)) return dsp_fail(DSP_ERR_FORMAT, "%s: model.dropout is not a number", label);
    /* tokenizers treats 0 as no dropout */
    if (json_number_value(v) != 0.0)
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: model.dropout %g is not supported (only null or 0)", label,
                      json_number_value(v));
  }
  static const char *const empty_only[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    v = json_object_get(model, empty_only[i]);
    if (v && !json_is_null(v) && !json_is_string(v))
      return dsp_fail(DSP_ERR_FORMAT, "%s: model.%s is not a string", label, empty_only[i]);
    if (v && json_is_string(v) && json_string_length(v) != 0)
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: model.%s " NM " is not supported (only null or \"\")", label,
                      empty_only[i], json_string_value(v));
  }
  int byte_fallback = 0;
  DSP_TRY(get_bool(label, "model", model, "byte_fallback", 0, &byte_fallback));
  if (byte_fallback) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: model.byte_fallback true is not supported", label);
  DSP_TRY(get_bool(label, "model", model, "fuse_unk", 0, &t->fuse_unk));
  DSP_TRY(get_bool(label, "model", model, "ignore_merges", 0, &t->ignore_merges));
  DSP_TRY(load_vocab(t, label, json_object_get(model, "vocab")));
  DSP_TRY(load_merges(t, label, json_object_get(model, "merges")));
  t->unk_id = -1;
  v = json_object_get(model, "unk_token");
  if (v && !json_is_null(v)) {
    if (!json_is_string(v)) return dsp_fail(DSP_ERR_FORMAT, "%s: model.unk_token is not a string", label);
    t->unk_id = vocab_get(t, json_string_value(v), json_string_length(v));
    if (t->unk_id < 0)
      return dsp_fail(DSP_ERR_FORMAT, "%s: model.unk_token " NM " is not in the vocab", label, json_string_value(v));
  }
  for (int b = 0; b < 256; b++) {
    char s[4];
    uint32_t cp = dsp_tok_byte_to_cp((uint8_t)b);
    size_t l = cp < 0x80 ? 1 : 2; /* the table's code points are all below U+0800 */
    if (l == 1) s[0] = (char)cp;
    else s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F));
    t->byte_id[b] = vocab_get(t, s, l);
  }
  return DSP_OK;
}

static dsp_status load_normalizer(dsp_tokenizer *t, const char *label, json_t *n) {
  static const char *const keys[] = {"type", NULL};
  t->nfc = 0;
  if (!n || json_is_null(n)) return DSP_OK;
  if (!json_is_object(n)) return dsp_fail(DSP_ERR_FORMAT, "%s: normalizer is not an object", label);
  dsp_status st = DSP_OK;
  const char *type = get_type(label, "normalizer", n, &st);
  if (!type) return st;
  if (strcmp(type, "NFC") != 0)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: normalizer.type " NM " is not supported (only NFC or null)", label, type);
  DSP_TRY(check_keys(label, "normalizer", n, keys));
  t->nfc = 1;
  return DSP_OK;
}

static dsp_status add_stage(dsp_tokenizer *t, const char *label, const char *where, const char *pattern) {
  if (t->n_stages == TOK_MAX_STAGES)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s: more than %d regex steps", label, where, TOK_MAX_STAGES);
  int err;
  PCRE2_SIZE at;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, strlen(pattern), PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return dsp_fail(DSP_ERR_FORMAT, "%s: %s: PCRE2 refuses the regex at offset %zu: %s", label, where, (size_t)at,
                    (const char *)msg);
  }
  (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter serves when JIT is unavailable */
  t->stage[t->n_stages++] = re;
  return DSP_OK;
}

/* ByteLevel as pre-tokenizer, decoder or post-processor. Only as a
 * pre-tokenizer do its fields change ids: add_prefix_space (refused) and
 * use_regex (GPT-2's split, one more regex step). */
static dsp_status load_byte_level(dsp_tokenizer *t, const char *label, const char *where, json_t *o, int pre) {
  static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
  DSP_TRY(check_keys(label, where, o, keys));
  int aps = 0, trim = 0, use_regex = 0;
  DSP_TRY(get_bool(label, where, o, "add_prefix_space", pre ? -1 : 0, &aps));
  DSP_TRY(get_bool(label, where, o, "trim_offsets", 0, &trim));
  DSP_TRY(get_bool(label, where, o, "use_regex", 1, &use_regex));
  if (!pre) return DSP_OK;
  if (aps) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s.add_prefix_space true is not supported", label, where);
  if (use_regex) return add_stage(t, label, where, GPT2_PATTERN);
  return DSP_OK;
}

static dsp_status load_split(dsp_tokenizer *t, const char *label, const char *where, json_t *o) {
  static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
  DSP_TRY(check_keys(label, where, o, keys));
  json_t *p = json_object_get(o, "pattern");
  if (!p) return dsp_fail(DSP_ERR_MISSING, "%s: %s.pattern is missing", label, where);
  json_t *re = json_object_get(p, "Regex");
  if (!json_is_object(p) || json_object_size(p) != 1 || !(re || json_object_get(p, "String")))
    return dsp_fail(DSP_ERR_FORMAT, "%s: %s.pattern is not {\"Regex\": ...} or {\"String\": ...}", label, where);
  if (!re) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s.pattern.String is not supported (only Regex)", label, where);
  if (!json_is_string(re)) return dsp_fail(DSP_ERR_FORMAT, "%s: %s.pattern.Regex is not a string", label, where);
  json_t *b = json_object_get(o, "behavior");
  if (!b) return dsp_fail(DSP_ERR_MISSING, "%s: %s.behavior is missing", label, where);
  if (!json_is_string(b)) return dsp_fail(DSP_ERR_FORMAT, "%s: %s.behavior is not a string", label, where);
  if (strcmp(json_string_value(b), "Isolated") != 0)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s.behavior " NM " is not supported (only Isolated)", label, where,
                    json_string_value(b));
  int invert = 0;
  DSP_TRY(get_bool(label, where, o, "invert", 0, &invert));
  if (invert) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s.invert true is not supported", label, where);
  char sub[96];
  snprintf(sub, sizeof sub, "%s.pattern.Regex", where);
  return add_stage(t, label, sub, json_string_value(re));
}

static dsp_status load_pre_tokenizer(dsp_tokenizer *t, const char *label, json_t *p) {
  if (!p || json_is_null(p))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: pre_tokenizer null is not supported (needs ByteLevel)", label);
  if (!json_is_object(p)) return dsp_fail(DSP_ERR_FORMAT, "%s: pre_tokenizer is not an object", label);
  dsp_status st = DSP_OK;
  const char *type = get_type(label, "pre_tokenizer", p, &st);
  if (!type) return st;
  if (strcmp(type, "ByteLevel") == 0) return load_byte_level(t, label, "pre_tokenizer", p, 1);
  if (strcmp(type, "Sequence") != 0)
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: pre_tokenizer.type " NM " is not supported", label, type);
  static const char *const keys[] = {"type", "pretokenizers", NULL};
  DSP_TRY(check_keys(label, "pre_tokenizer", p, keys));
  json_t *list = json_object_get(p, "pretokenizers");
  if (!list) return dsp_fail(DSP_ERR_MISSING, "%s: pre_tokenizer.pretokenizers is missing", label);
  if (!json_is_array(list)) return dsp_fail(DSP_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers is not an array", label);
  size_t n = json_array_size(list);
  /* Byte mapping must come last: a Split after it would see mapped text. */
  for (size_t i = 0; i < n; i++) {
    char where[64];
    snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
    json_t *e = json_array_get(list, i);
    if (!json_is_object(e)) return dsp_fail(DSP_ERR_FORMAT, "%s: %s is not an object", label, where);
    const char *et = get_type(label, where, e, &st);
    if (!et) return st;
    if (strcmp(et, "Split") == 0 && i + 1 < n) {
      DSP_TRY(load_split(t, label, where, e));
    } else if (strcmp(et, "ByteLevel") == 0 && i + 1 == n) {
      DSP_TRY(load_byte_level(t, label, where, e, 1));
    } else if (strcmp(et, "Split") == 0 || strcmp(et, "ByteLevel") == 0) {
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s: " NM " is not supported here (only Split steps, then one ByteLevel)",
                      label, where, et);
    } else {
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s.type " NM " is not supported", label, where, et);
    }
  }
  if (n == 0) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: pre_tokenizer.pretokenizers is empty (needs ByteLevel)", label);
  return DSP_OK;
}

/* Decoder (required) and post-processor (optional) must both be ByteLevel. */
static dsp_status load_tail(dsp_tokenizer *t, const char *label, json_t *root) {
  static const char *const names[] = {"decoder", "post_processor"};
  for (int i = 0; i < 2; i++) {
    json_t *o = json_object_get(root, names[i]);
    if (!o || json_is_null(o)) {
      if (i == 0) return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: decoder null is not supported (needs ByteLevel)", label);
      continue;
    }
    if (!json_is_object(o)) return dsp_fail(DSP_ERR_FORMAT, "%s: %s is not an object", label, names[i]);
    dsp_status st = DSP_OK;
    const char *type = get_type(label, names[i], o, &st);
    if (!type) return st;
    if (strcmp(type, "ByteLevel") != 0)
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s.type " NM " is not supported (only ByteLevel)", label, names[i], type);
    DSP_TRY(load_byte_level(t, label, names[i], o, 0));
  }
  return DSP_OK;
}

dsp_status dsp_tok_build(dsp_tokenizer *t, const char *label, json_t *root) {
  static const char *const keys[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                     "pre_tokenizer", "post_processor", "decoder", "model", NULL};
  if (!json_is_object(root)) return dsp_fail(DSP_ERR_FORMAT, "%s: the top level is not an object", label);
  DSP_TRY(check_keys(label, "top level", root, keys));
  json_t *v = json_object_get(root, "version");
  if (v && (!json_is_string(v) || strcmp(json_string_value(v), "1.0") != 0))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: version is not \"1.0\"", label);
  static const char *const off[] = {"truncation", "padding"};
  for (int i = 0; i < 2; i++) {
    v = json_object_get(root, off[i]);
    if (v && !json_is_null(v))
      return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: %s is not supported (must be null)", label, off[i]);
  }
  DSP_TRY(load_model(t, label, json_object_get(root, "model")));
  DSP_TRY(load_normalizer(t, label, json_object_get(root, "normalizer")));
  DSP_TRY(load_pre_tokenizer(t, label, json_object_get(root, "pre_tokenizer")));
  DSP_TRY(load_tail(t, label, root));
  DSP_TRY(dsp_tok_load_added(t, label, json_object_get(root, "added_tokens")));
  return dsp_tok_build_decode(t, label);
}
