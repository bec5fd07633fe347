# CUDA backend tests (label gpu). Each program exits 77 (skipped) when no CUDA
# device is visible, so CI machines without a GPU report them as skipped.
if(NOT DSPARK_HAVE_CUDA)
  return()
endif()

dsp_test(test_cuda_head SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_head.c LABELS gpu TIMEOUT 600)
dsp_test(test_cuda_nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_nccl.c LABELS gpu TIMEOUT 600)
