/* libFuzzer target for the Hugging Face config readers: the input is
 * config.json, optionally followed by a NUL and generation_config.json, read
 * as a Qwen3 / DSpark config and as a Kimi-Linear KDA config. Whatever the
 * bytes, parsing either fails with a message or yields sizes the loaders can
 * trust (positive, heads dividing, at most DSP_MAX_EOS ids; KDA: layers,
 * head dim and conv width in range, a negative gate bound). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_config.h"
#include "io/kda_config.h"

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
  dsp_kda_config k;
  if (dsp_kda_config_parse(buf, "fuzz", &k) == DSP_OK) {
    if (k.hidden < 1 || k.layers < 1 || k.layers > DSP_KDA_MAX_LAYERS || k.heads < 1 || k.head_dim < 1 ||
        k.head_dim > 256 || k.conv_width < 1 || k.conv_width > 8 || (k.lower_bound_gate && !(k.lower_bound < 0)))
      abort();
  } else if (!dsp_error_message()[0]) {
    abort();
  }
  free(buf);
  return 0;
}
