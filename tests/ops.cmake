# The op-parity harness (tests/test_ops.c): the CPU side in every build; the
# CUDA side (label gpu) exits 77, skipped, where no GPU is visible.
dsp_test(test_ops_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ops.c ${CMAKE_CURRENT_LIST_DIR}/test_ops_kda.c LABELS unit ARGS cpu TIMEOUT 300)
add_test(NAME test_ops_cuda COMMAND test_ops_cpu cuda)
set_tests_properties(test_ops_cuda PROPERTIES LABELS gpu TIMEOUT 600 ENVIRONMENT "${DSP_MPI_ENV}" SKIP_RETURN_CODE 77)
