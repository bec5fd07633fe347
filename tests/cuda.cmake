# CUDA backend tests (label gpu). Each program exits 77 (skipped) when no CUDA
# device is visible, so CI machines without a GPU report them as skipped.
if(NOT DSPARK_HAVE_CUDA)
  return()
endif()

dsp_test(test_cuda_head SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_head.c LABELS gpu TIMEOUT 600)
add_test(NAME test_cuda_head_contended COMMAND test_cuda_head --contended)
set_tests_properties(test_cuda_head_contended PROPERTIES LABELS gpu TIMEOUT 900 RUN_SERIAL TRUE)
dsp_gpu_skip(test_cuda_head_contended "gpu")
dsp_test(test_cuda_mathf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_mathf.c LABELS gpu TIMEOUT 120)
dsp_test(test_cuda_kda_views SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_kda_views.c LABELS gpu TIMEOUT 120)
dsp_test(test_cuda_nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_nccl.c LABELS gpu TIMEOUT 600)
