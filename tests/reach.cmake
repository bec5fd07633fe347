# Nothing in libdspark is reachable only from bench/ (tests/check_reach.py reads the objects).
dsp_cmd_test(check_reach COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/check_reach.py ${CMAKE_BINARY_DIR}
  LABELS unit TIMEOUT 120)
