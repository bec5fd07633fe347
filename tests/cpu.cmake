# CPU bf16 product (contract 2) and the fused Markov step (contracts 3, 4).
dsp_test(test_cpu_matmul SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_matmul.c LABELS unit TIMEOUT 120)
# `dspark info`: text and JSON forms with small measurements.
dsp_cmd_test(cpu_info COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/cpu_info_check.py LABELS unit TIMEOUT 300)
# The CPU product on AMX tiles (the default where the CPU has them); skipped where it lacks them.
dsp_test(test_cpu_amx SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_amx.c LABELS unit TIMEOUT 120)
set_tests_properties(test_cpu_amx PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME test_cpu_amx_chain COMMAND test_cpu_amx)
set_tests_properties(test_cpu_amx_chain PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "DSPARK_CPU_KERNEL=chain"
                     SKIP_RETURN_CODE 77)
# The CPU kernels' expf against libm and its AVX-512 form.
dsp_test(test_cpu_expf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_expf.c LABELS unit TIMEOUT 120)
# Contract 5's noise and the selections on AVX-512 against the scalar forms.
dsp_test(test_cpu_gumbel SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_gumbel.c LABELS unit TIMEOUT 120)
set_tests_properties(test_cpu_gumbel PROPERTIES SKIP_RETURN_CODE 77)
