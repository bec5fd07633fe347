/* A build without CUDA: the CUDA backend says why it is not there. */
#include "backend/backend.h"
#include "core/status.h"

dsp_status dsp_backend_cuda_init(dsp_backend *be, const dsp_backend_config *cfg) {
  (void)be, (void)cfg;
  return dsp_fail(DSP_ERR_UNSUPPORTED, "this dspark was built without the CUDA backend (DSPARK_CUDA=off or no nvcc)");
}

int dsp_backend_cuda_devices(void) { return 0; }
