/* Typed reads of config.json fields; every refusal names the file's label and
 * the field. */
#ifndef DSP_IO_JSON_GET_H
#define DSP_IO_JSON_GET_H
#include <jansson.h>
#include <stdint.h>

#include "dspark.h"

/* An integer in [lo, hi]: required, or absent / null -> dflt. */
dsp_status dsp_json_int(const json_t *o, const char *label, const char *key, int required, int64_t lo, int64_t hi,
                        int64_t dflt, int64_t *out);
/* A required number in [lo, hi]. */
dsp_status dsp_json_real(const json_t *o, const char *label, const char *key, double lo, double hi, double *out);
/* A field that must be absent, null or false. */
dsp_status dsp_json_refuse_true(const json_t *o, const char *label, const char *key, const char *why);
/* A boolean; absent / null -> 0. */
dsp_status dsp_json_bool(const json_t *o, const char *label, const char *key, int *out);

#endif
