# KDA CPU kernels against fp64 loops and the numpy oracle (tests/oracle/kda_ref.py).
dsp_test(test_kda_cpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kda_cpu.c LABELS unit TIMEOUT 120
  ARGS ${CMAKE_CURRENT_LIST_DIR}/oracle/kda_ref.py)
dsp_cmd_test(oracle_kda_self COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/kda_ref.py --self-test
  LABELS oracle TIMEOUT 60)
# The KDA layer of a Kimi-Linear checkpoint (tensors as published) against the
# numpy oracle's layer, through a driver of the public API, at TP 1 and 2.
add_executable(kda_layer_driver ${CMAKE_CURRENT_LIST_DIR}/kda_layer_driver.c)
target_link_libraries(kda_layer_driver PRIVATE dspark)
if(DSPARK_HAVE_CUDA)
  set_target_properties(kda_layer_driver PROPERTIES LINKER_LANGUAGE CUDA)
endif()
dsp_cmd_test(oracle_kda_layer
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_kda_layer.py --driver $<TARGET_FILE:kda_layer_driver>
  LABELS oracle TIMEOUT 300)
dsp_cmd_test(oracle_kda_layer_cuda
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_kda_layer.py --driver $<TARGET_FILE:kda_layer_driver> --backend cuda
  LABELS gpu oracle TIMEOUT 300)
