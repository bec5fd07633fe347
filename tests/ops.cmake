# The op-parity harness (tests/test_ops.c): the CPU side in every build; the
# CUDA side (label gpu) exits 77, skipped, where no GPU is visible.
dsp_test(test_ops_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ops.c ${CMAKE_CURRENT_LIST_DIR}/test_ops_kda.c LABELS unit ARGS cpu TIMEOUT 300)
# The same CPU cases with the products on AMX tiles (exit 77, skipped, without them).
add_test(NAME test_ops_cpu_amx COMMAND test_ops_cpu cpu)
set_tests_properties(test_ops_cpu_amx PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "DSPARK_CPU_KERNEL=amx" SKIP_RETURN_CODE 77)
add_test(NAME test_ops_cuda COMMAND test_ops_cpu cuda)
set_tests_properties(test_ops_cuda PROPERTIES LABELS gpu TIMEOUT 600 ENVIRONMENT "${DSP_MPI_ENV}" SKIP_RETURN_CODE 77)
# Attention on the tensor cores (DSPARK_CUDA_ATTENTION=tc): the same cases, and the form must have run.
add_test(NAME test_ops_cuda_attention_tc
         COMMAND sh -c "\"$0\" cuda '' t_attention > att_tc.log 2>&1; rc=$?; cat att_tc.log; [ $rc -ne 0 ] && exit $rc; grep -q 'attention: tensor-core form' att_tc.log"
                 $<TARGET_FILE:test_ops_cpu>)
set_tests_properties(test_ops_cuda_attention_tc PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "DSPARK_CUDA_ATTENTION=tc;DSPARK_VERBOSE=1")
# The KDA kernels under compute-sanitizer's racecheck (shared-memory hazards),
# where the CUDA toolkit ships it: a race there showed only as rare wrong bits.
if(DSPARK_HAVE_CUDA)
  find_program(DSP_COMPUTE_SANITIZER compute-sanitizer HINTS ${CUDAToolkit_BIN_DIR} /usr/local/cuda/bin)
  if(DSP_COMPUTE_SANITIZER)
    add_test(NAME test_ops_cuda_racecheck
             COMMAND ${DSP_COMPUTE_SANITIZER} --tool racecheck --error-exitcode 1 $<TARGET_FILE:test_ops_cpu> cuda "" t_kda)
    set_tests_properties(test_ops_cuda_racecheck PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77)
  endif()
endif()
