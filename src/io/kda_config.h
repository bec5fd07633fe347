/* The Kimi Delta Attention fields of a Kimi-Linear config.json
 * (KimiLinearForCausalLM: linear_attn_config with 1-based kda_layers and
 * full_attn_layers, head_dim, num_heads, short_conv_kernel_size, an optional
 * gate_lower_bound). What dspark cannot run is refused with the field named. */
#ifndef DSP_IO_KDA_CONFIG_H
#define DSP_IO_KDA_CONFIG_H
#include <stdint.h>

#include "dspark.h"

#define DSP_KDA_MAX_LAYERS 256

typedef struct {
  int64_t hidden, layers, heads, head_dim, conv_width;
  double eps;                       /* rms_norm_eps: the gated output norm's */
  int lower_bound_gate;             /* gate_lower_bound given */
  double lower_bound;
  uint8_t kda[DSP_KDA_MAX_LAYERS];  /* kda[l]: decoder layer l (0-based) is a KDA layer */
} dsp_kda_config;

dsp_status dsp_kda_config_parse(const char *json, const char *label, dsp_kda_config *out);
/* dir/config.json */
dsp_status dsp_kda_config_load(const char *dir, dsp_kda_config *out);

#endif
