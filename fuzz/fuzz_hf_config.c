/* libFuzzer target for the Hugging Face config reader: the input is
 * config.json, optionally followed by a NUL and generation_config.json.
 * Whatever the bytes, parsing either fails with a message or yields sizes
 * the loader can trust (positive, heads dividing, at most DSP_MAX_EOS ids). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 2);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  buf[size + 1] = 0;
  const size_t first = strlen(buf);
  const char *gen = first < size ? buf + first + 1 : NULL;
  dsp_hf_config c;
  if (dsp_hf_config_parse(buf, gen, "fuzz", &c) == DSP_OK) {
    if (c.vocab < 1 || c.hidden < 1 || c.layers < 1 || c.heads < 1 || c.kv_heads < 1 || c.head_dim < 1 ||
        c.intermediate < 1 || c.heads % c.kv_heads || c.head_dim % 2 || c.n_eos < 0 || c.n_eos > DSP_MAX_EOS)
      abort();
  } else if (!dsp_error_message()[0]) {
    abort(); /* a refusal always says why */
  }
  free(buf);
  return 0;
}
