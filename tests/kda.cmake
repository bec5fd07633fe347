# KDA CPU kernels against fp64 loops and the numpy oracle (tests/oracle/kda_ref.py).
dsp_test(test_kda_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kda_cpu.c LABELS unit TIMEOUT 120
  ARGS ${CMAKE_CURRENT_LIST_DIR}/oracle/kda_ref.py)
dsp_cmd_test(oracle_kda_self COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/kda_ref.py --self-test
  LABELS oracle TIMEOUT 60)
