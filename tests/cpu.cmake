# CPU bf16 product (contract 2) and the fused Markov step (contracts 3, 4).
dsp_test(test_cpu_matmul SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cpu_matmul.c LABELS unit TIMEOUT 120)
