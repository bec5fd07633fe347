/* UTF-8 checks and repair, NFC (utf8proc), and the two Unicode classes that
 * the added-token rules use. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "core/status.h"
#include "io/tokenizer_impl.h"

/* Length of the well-formed sequence at s, or of its maximal ill-formed
 * subpart with *ok = 0 (Unicode's "maximal subpart" rule, which Python's
 * errors="replace" follows: one U+FFFD per subpart). */
static size_t utf8_seq(const uint8_t *s, size_t len, int *ok) {
  uint8_t c = s[0];
  *ok = 1;
  if (c < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) need = 2, lo = 0xA0;
  else if (c == 0xED) need = 2, hi = 0x9F; /* no surrogates */
  else if (c >= 0xE1 && c <= 0xEF) need = 2;
  else if (c == 0xF0) need = 3, lo = 0x90;
  else if (c == 0xF4) need = 3, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else {
    *ok = 0;
    return 1;
  }
  size_t i = 1;
  for (; i <= need; i++) {
    if (i >= len) break;
    uint8_t b = s[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  if (i <= need) *ok = 0;
  return i;
}

size_t dsp_tok_utf8_valid_prefix(const char *s, size_t len) {
  const uint8_t *u = (const uint8_t *)s;
  size_t i = 0;
  while (i < len) {
    if (u[i] < 0x80) {
      i++;
      continue;
    }
    int ok;
    size_t n = utf8_seq(u + i, len - i, &ok);
    if (!ok) return i;
    i += n;
  }
  return len;
}

dsp_status dsp_tok_utf8_replace(const char *s, size_t len, char **out, size_t *out_len) {
  /* Each bad byte becomes at most three bytes. */
  if (len > (SIZE_MAX - 1) / 3) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: text of %zu bytes", len);
  char *r = malloc(3 * len + 1);
  if (!r) return dsp_fail(DSP_ERR_NOMEM, "tokenizer: text of %zu bytes", len);
  const uint8_t *u = (const uint8_t *)s;
  size_t i = 0, o = 0;
  while (i < len) {
    int ok;
    size_t n = utf8_seq(u + i, len - i, &ok);
    if (ok) {
      memcpy(r + o, s + i, n);
      o += n;
    } else {
      memcpy(r + o, "\xEF\xBF\xBD", 3);
      o += 3;
    }
    i += n;
  }
  r[o] = 0;
  *out = r;
  *out_len = o;
  return DSP_OK;
}

/* Canonical ordering: a stable sort of each run of non-starters by combining
 * class. utf8proc's own pass is an exchange sort, quadratic on long mixed
 * runs (a denial of service on hostile text), so it is done here in linear
 * time: insertion sort for short runs, counting sort for long ones. */
static int sort_marks(utf8proc_int32_t *cp, uint8_t *cc, size_t n) {
  utf8proc_int32_t *tmp = NULL;
  for (size_t i = 0; i < n;) {
    if (cc[i] == 0) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < n && cc[j] != 0) j++;
    if (j - i <= 32) {
      for (size_t a = i + 1; a < j; a++) {
        utf8proc_int32_t c = cp[a];
        uint8_t k = cc[a];
        size_t b = a;
        for (; b > i && cc[b - 1] > k; b--) cp[b] = cp[b - 1], cc[b] = cc[b - 1];
        cp[b] = c, cc[b] = k;
      }
    } else {
      if (!tmp && !(tmp = malloc(n * sizeof *tmp))) return 0;
      size_t start[257] = {0};
      for (size_t a = i; a < j; a++) start[cc[a] + 1]++;
      for (int k = 1; k < 257; k++) start[k] += start[k - 1];
      for (size_t a = i; a < j; a++) tmp[start[cc[a]]++] = cp[a];
      memcpy(cp + i, tmp, (j - i) * sizeof *cp);
      for (size_t a = i; a < j; a++) cc[a] = (uint8_t)utf8proc_get_property(cp[a])->combining_class;
    }
    i = j;
  }
  free(tmp);
  return 1;
}

dsp_status dsp_tok_nfc(const char *s, size_t len, char **out, size_t *out_len) {
  /* Below U+0300 every code point is its own NFC and never combines, so text
   * without a lead byte >= 0xCC is left as it is (the common case). */
  size_t i = 0;
  while (i < len && (uint8_t)s[i] < 0xCC) i++;
  if (i == len) {
    *out = (char *)s;
    *out_len = len;
    return DSP_OK;
  }
  if (len > (size_t)(PTRDIFF_MAX / 32)) return dsp_fail(DSP_ERR_RANGE, "tokenizer: NFC of %zu bytes", len);
  /* utf8proc's steps: canonical decomposition, ordering (ours), composition. */
  const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  size_t cap = len + 16, n = 0;
  utf8proc_int32_t *cp = malloc(cap * sizeof *cp);
  uint8_t *cc = NULL;
  char *r = NULL;
  dsp_status st = DSP_OK;
  if (!cp) st = dsp_fail(DSP_ERR_NOMEM, "tokenizer: NFC of %zu bytes", len);
  for (size_t at = 0; st == DSP_OK && at < len;) {
    utf8proc_int32_t c;
    utf8proc_ssize_t used = utf8proc_iterate((const utf8proc_uint8_t *)s + at, (utf8proc_ssize_t)(len - at), &c);
    if (used <= 0) {
      st = dsp_fail(DSP_ERR_FORMAT, "tokenizer: NFC: %s", utf8proc_errmsg(used < 0 ? used : UTF8PROC_ERROR_INVALIDUTF8));
      break;
    }
    int bound = 0;
    utf8proc_ssize_t k = utf8proc_decompose_char(c, cp + n, (utf8proc_ssize_t)(cap - n), opt, &bound);
    if (k < 0) {
      st = dsp_fail(DSP_ERR_FORMAT, "tokenizer: NFC: %s", utf8proc_errmsg(k));
      break;
    }
    if ((size_t)k > cap - n) { /* no room: grow and decompose again */
      size_t c2 = 2 * cap + (size_t)k;
      utf8proc_int32_t *p = realloc(cp, c2 * sizeof *cp);
      if (!p) {
        st = dsp_fail(DSP_ERR_NOMEM, "tokenizer: NFC of %zu bytes", len);
        break;
      }
      cp = p;
      cap = c2;
      continue;
    }
    n += (size_t)k;
    at += (size_t)used;
  }
  if (st == DSP_OK && !(cc = malloc(n ? n : 1))) st = dsp_fail(DSP_ERR_NOMEM, "tokenizer: NFC of %zu bytes", len);
  if (st == DSP_OK) {
    for (size_t a = 0; a < n; a++) cc[a] = (uint8_t)utf8proc_get_property(cp[a])->combining_class;
    if (!sort_marks(cp, cc, n)) st = dsp_fail(DSP_ERR_NOMEM, "tokenizer: NFC of %zu bytes", len);
  }
  if (st == DSP_OK) {
    utf8proc_ssize_t m = utf8proc_normalize_utf32(cp, (utf8proc_ssize_t)n, opt);
    if (m < 0) st = dsp_fail(DSP_ERR_FORMAT, "tokenizer: NFC: %s", utf8proc_errmsg(m));
    else if (!(r = malloc(4 * (size_t)m + 1))) st = dsp_fail(DSP_ERR_NOMEM, "tokenizer: NFC of %zu bytes", len);
    else {
      size_t o = 0;
      for (utf8proc_ssize_t a = 0; a < m; a++) o += (size_t)utf8proc_encode_char(cp[a], (utf8proc_uint8_t *)r + o);
      r[o] = 0;
      *out = r;
      *out_len = o;
    }
  }
  free(cp);
  free(cc);
  return st;
}

size_t dsp_tok_utf8_next(const char *s, size_t len, uint32_t *cp) {
  const uint8_t *u = (const uint8_t *)s;
  size_t n = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
  if (n > len) n = len; /* never for valid text; keeps a bad caller in bounds */
  uint32_t c = n == 1 ? u[0] : n == 2 ? u[0] & 0x1Fu : n == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
  for (size_t i = 1; i < n; i++) c = c << 6 | (u[i] & 0x3Fu);
  *cp = c;
  return n;
}

size_t dsp_tok_utf8_prev(const char *s, size_t len, uint32_t *cp) {
  size_t start = len - 1;
  while (start > 0 && len - start < 4 && ((uint8_t)s[start] & 0xC0) == 0x80) start--;
  dsp_tok_utf8_next(s + start, len - start, cp);
  return len - start;
}

int dsp_tok_is_space(uint32_t cp) {
  /* Unicode's White_Space property, which Rust's \s is. */
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

int dsp_tok_is_word(uint32_t cp) {
  /* Rust's \w: Alphabetic, marks, decimal digits, connector punctuation and
   * the joiners. Alphabetic is letters, Nl and Other_Alphabetic; the part of
   * Other_Alphabetic outside the marks is the enclosed letters listed here. */
  if (cp == 0x200C || cp == 0x200D) return 1;
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
      (cp >= 0x1F170 && cp <= 0x1F189))
    return 1;
  switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC: return 1;
    default: return 0;
  }
}
