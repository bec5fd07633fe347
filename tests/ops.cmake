# The op-parity harness (tests/test_ops.c): the CPU side in every build; the
# CUDA side (label gpu) exits 77, skipped, where no GPU is visible.
dsp_test(test_ops_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ops.c ${CMAKE_CURRENT_LIST_DIR}/test_ops_kda.c ${CMAKE_CURRENT_LIST_DIR}/test_ops_fused.c ${CMAKE_CURRENT_LIST_DIR}/test_ops_accept.c LABELS unit ARGS cpu TIMEOUT 300)
# test_ops_cpu keeps the fmaf chain (the default takes AMX where the CPU has it).
set_property(TEST test_ops_cpu APPEND PROPERTY ENVIRONMENT "DSPARK_CPU_KERNEL=chain")
# The same CPU cases with the products on AMX tiles (exit 77, skipped, without them).
add_test(NAME test_ops_cpu_amx COMMAND test_ops_cpu cpu)
set_tests_properties(test_ops_cpu_amx PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "DSPARK_CPU_KERNEL=amx" SKIP_RETURN_CODE 77)
add_test(NAME test_ops_cuda COMMAND test_ops_cpu cuda)
set_tests_properties(test_ops_cuda PROPERTIES LABELS gpu TIMEOUT 600 ENVIRONMENT "${DSP_MPI_ENV}" SKIP_RETURN_CODE 77)
# The products as models run them (no K split): rows alone and in calls of few rows (the mma.sync kernel,
# forced for every shape) against a 300-row call (the warpgroup kernel), bit for bit.
add_test(NAME test_ops_cuda_gemm_rows COMMAND test_ops_cpu cuda "" t_gemm_rows)
set_tests_properties(test_ops_cuda_gemm_rows PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "DSPARK_GEMM_SPLIT=0;DSPARK_GEMM_SMALL=1;DSPARK_VERBOSE=1")
# Attention's CUDA forms on the same cases. The default: both tensor-core kernels, and the fp32 form for the
# caches past one block's scores (head dim 128); tc-one-row: never the many-row kernel; tc-long: those caches
# on the tensor-core kernels too; fp32: only the fp32 kernel; qreg: tc with two m-tiles' q always in registers
# (the default reads it from shared memory where two blocks then share an SM).
set(att_tc_check "grep -q 'tensor-core form (head dim 128)$' att_tc.log && grep -q 'many-row kernel' att_tc.log && grep -q 'fp32 form (head dim 128)' att_tc.log && grep -q 'q in shared memory' att_tc.log")
set(att_qreg_check "grep -q 'tensor-core form (head dim 128)$' att_qreg.log && ! grep -q 'q in shared memory' att_qreg.log")
set(att_one_check "grep -q 'attention: tensor-core form' att_one.log && ! grep -q 'many-row kernel' att_one.log")
set(att_rows_check "grep -q 'tensor-core form (head dim 128)$' att_rows.log && grep -q 'many-row kernel' att_rows.log && ! grep -q 'fp32 form (head dim 128)' att_rows.log")
set(att_fp32_check "! grep -q 'attention: tensor-core form' att_fp32.log")
foreach(form tc one rows fp32 qreg)
  set(envs "DSPARK_VERBOSE=1")
  if(form STREQUAL fp32)
    set(envs "DSPARK_VERBOSE=1;DSPARK_CUDA_ATTENTION=fp32")
  elseif(form STREQUAL one)
    set(envs "DSPARK_VERBOSE=1;DSPARK_CUDA_ATTENTION=tc-one-row")
  elseif(form STREQUAL rows)
    set(envs "DSPARK_VERBOSE=1;DSPARK_CUDA_ATTENTION=tc-long")
  elseif(form STREQUAL qreg)
    set(envs "DSPARK_VERBOSE=1;DSPARK_CUDA_ATTENTION_Q=registers")
  endif()
  add_test(NAME test_ops_cuda_attention_${form}
           COMMAND sh -c "\"$0\" cuda '' 't_attention*' > att_${form}.log 2>&1; rc=$?; cat att_${form}.log; [ $rc -ne 0 ] && exit $rc; ${att_${form}_check}"
                   $<TARGET_FILE:test_ops_cpu>)
  set_tests_properties(test_ops_cuda_attention_${form} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${envs}")
endforeach()
# The KDA kernels under compute-sanitizer's racecheck (shared-memory hazards),
# where the CUDA toolkit ships it: a race there showed only as rare wrong bits.
if(DSPARK_HAVE_CUDA)
  find_program(DSP_COMPUTE_SANITIZER compute-sanitizer HINTS ${CUDAToolkit_BIN_DIR} /usr/local/cuda/bin)
  if(DSP_COMPUTE_SANITIZER)
    add_test(NAME test_ops_cuda_racecheck
             COMMAND ${DSP_COMPUTE_SANITIZER} --tool racecheck --error-exitcode 1 $<TARGET_FILE:test_ops_cpu> cuda "" t_kda)
    add_test(NAME test_ops_cuda_racecheck_attention
             COMMAND ${DSP_COMPUTE_SANITIZER} --tool racecheck --error-exitcode 1 $<TARGET_FILE:test_ops_cpu> cuda "" t_attention_runs)
    set_tests_properties(test_ops_cuda_racecheck_attention PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77
                         ENVIRONMENT "DSPARK_CUDA_ATTENTION=tc-long")
    set_tests_properties(test_ops_cuda_racecheck PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77)
  endif()
endif()
# The backend's plumbing: several CPU devices in one process (dsp_backend_each's threads and their
# communicator) and the memory query.
dsp_test(test_backend SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_backend.c LABELS unit TIMEOUT 60)
# The harness compares CUDA with the CPU backend's fmaf chain (bit for bit in strict mode): every run but
# test_ops_cpu_amx keeps the chain on a CPU where the default would take AMX tiles.
foreach(t test_ops_cuda test_ops_cuda_gemm_rows test_ops_cuda_attention_tc test_ops_cuda_attention_fp32
          test_ops_cuda_racecheck)
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "DSPARK_CPU_KERNEL=chain")
  endif()
endforeach()
