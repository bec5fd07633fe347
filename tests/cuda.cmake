# CUDA backend tests (label gpu). Each program exits 77 (skipped) when no CUDA
# device is visible, so CI machines without a GPU report them as skipped.
if(NOT DSPARK_HAVE_CUDA)
  return()
endif()

dsp_test(test_cuda_head SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_head.c LABELS gpu TIMEOUT 600)
dsp_test(test_cuda_nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_nccl.c LABELS gpu TIMEOUT 600)

# The benchmark program (not a test): bench/bench_cuda_head.c, run by
# scripts/device_check.sh on the GPU machine.
add_executable(bench_cuda_head ${PROJECT_SOURCE_DIR}/bench/bench_cuda_head.c)
target_include_directories(bench_cuda_head PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_cuda_head PRIVATE dspark ${CMAKE_DL_LIBS})
set_target_properties(bench_cuda_head PROPERTIES LINKER_LANGUAGE CUDA)

# The tail kernels alone, with ring kernel 4's per-step trace (bench/bench_tail.c).
add_executable(bench_tail ${PROJECT_SOURCE_DIR}/bench/bench_tail.c)
target_include_directories(bench_tail PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_tail PRIVATE dspark)
set_target_properties(bench_tail PROPERTIES LINKER_LANGUAGE CUDA)

# cuBLASLt configurations for the LM-head product (bench/bench_lm.c).
add_executable(bench_lm ${PROJECT_SOURCE_DIR}/bench/bench_lm.c)
target_include_directories(bench_lm PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_lm PRIVATE dspark ${CMAKE_DL_LIBS})
set_target_properties(bench_lm PROPERTIES LINKER_LANGUAGE CUDA)
