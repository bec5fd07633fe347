/* Typed config.json fields (json_get.h). */
#include "io/json_get.h"

#include "core/status.h"

/* An integer field: required, or absent -> dflt (have = 0). */
dsp_status dsp_json_int(const json_t *o, const char *label, const char *key, int required, int64_t lo, int64_t hi,
                      int64_t dflt, int64_t *out) {
  const json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) {
    if (required) return dsp_fail(DSP_ERR_MISSING, "%s: config field '%s' is missing", label, key);
    *out = dflt;
    return DSP_OK;
  }
  if (!json_is_integer(v))
    return dsp_fail(DSP_ERR_FORMAT, "%s: config field '%s' must be an integer", label, key);
  const json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return dsp_fail(DSP_ERR_RANGE, "%s: config field '%s' = %lld outside [%lld, %lld]", label, key, (long long)x,
                    (long long)lo, (long long)hi);
  *out = x;
  return DSP_OK;
}

dsp_status dsp_json_real(const json_t *o, const char *label, const char *key, double lo, double hi, double *out) {
  const json_t *v = json_object_get(o, key);
  if (!v || !json_is_number(v))
    return dsp_fail(v ? DSP_ERR_FORMAT : DSP_ERR_MISSING, "%s: config field '%s' %s", label, key,
                    v ? "must be a number" : "is missing");
  const double x = json_number_value(v);
  if (!(x >= lo && x <= hi))
    return dsp_fail(DSP_ERR_RANGE, "%s: config field '%s' = %g outside [%g, %g]", label, key, x, lo, hi);
  *out = x;
  return DSP_OK;
}

/* A field that must be absent, null, false or the one value dspark runs. */
dsp_status dsp_json_refuse_true(const json_t *o, const char *label, const char *key, const char *why) {
  const json_t *v = json_object_get(o, key);
  if (v && !json_is_null(v) && !json_is_false(v))
    return dsp_fail(DSP_ERR_UNSUPPORTED, "%s: config field '%s' is set: %s", label, key, why);
  return DSP_OK;
}

dsp_status dsp_json_bool(const json_t *o, const char *label, const char *key, int *out) {
  const json_t *v = json_object_get(o, key);
  if (v && !json_is_null(v) && !json_is_boolean(v))
    return dsp_fail(DSP_ERR_FORMAT, "%s: config field '%s' is not a boolean", label, key);
  *out = v && json_is_true(v);
  return DSP_OK;
}

