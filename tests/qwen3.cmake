# The Qwen3 target against the numpy reference written from the architecture
# (tests/oracle/qwen3_ref.py), through a driver of the public API.
add_executable(target_driver ${CMAKE_CURRENT_LIST_DIR}/target_driver.c)
target_link_libraries(target_driver PRIVATE dspark)
if(DSPARK_HAVE_CUDA)
  set_target_properties(target_driver PROPERTIES LINKER_LANGUAGE CUDA)
endif()
dsp_cmd_test(oracle_qwen3
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_qwen3.py --driver $<TARGET_FILE:target_driver>
  LABELS oracle TIMEOUT 600)
dsp_cmd_test(oracle_generate COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_generate.py
  LABELS oracle TIMEOUT 600)
dsp_cmd_test(oracle_qwen3_cuda
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_qwen3.py --driver $<TARGET_FILE:target_driver> --backend cuda
  LABELS gpu oracle TIMEOUT 600)
dsp_cmd_test(oracle_generate_cuda COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_generate.py --backend cuda
  LABELS gpu oracle TIMEOUT 600)
add_executable(draft_driver ${CMAKE_CURRENT_LIST_DIR}/draft_driver.c)
target_link_libraries(draft_driver PRIVATE dspark)
if(DSPARK_HAVE_CUDA)
  set_target_properties(draft_driver PROPERTIES LINKER_LANGUAGE CUDA)
endif()
dsp_cmd_test(oracle_dspark
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_dspark.py --driver $<TARGET_FILE:draft_driver>
  LABELS oracle TIMEOUT 600)
# The target and the draft again with the fmaf chain: where the CPU has AMX the two above run AMX tiles.
dsp_cmd_test(oracle_qwen3_chain
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_qwen3.py --driver $<TARGET_FILE:target_driver>
  LABELS oracle TIMEOUT 600)
dsp_cmd_test(oracle_dspark_chain
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_dspark.py --driver $<TARGET_FILE:draft_driver>
  LABELS oracle TIMEOUT 600)
foreach(t oracle_qwen3_chain oracle_dspark_chain)
  set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "DSPARK_CPU_KERNEL=chain")
endforeach()
dsp_cmd_test(oracle_dspark_cuda
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_dspark.py --driver $<TARGET_FILE:draft_driver> --backend cuda
  LABELS gpu oracle TIMEOUT 600)
dsp_cmd_test(oracle_speculative COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_speculative.py
  LABELS oracle TIMEOUT 600)
add_executable(rollback_driver ${CMAKE_CURRENT_LIST_DIR}/rollback_driver.c)
target_link_libraries(rollback_driver PRIVATE dspark)
if(DSPARK_HAVE_CUDA)
  set_target_properties(rollback_driver PROPERTIES LINKER_LANGUAGE CUDA)
endif()
# under the sanitizers the same checks over fewer rounds and tokens (mpirun ranks crawl there)
if(DSPARK_SANITIZE)
  set(DSP_ROLLBACK_ROUNDS 400 40)
  set(DSP_SHIPPED_QUICK --quick)
else()
  set(DSP_ROLLBACK_ROUNDS 2500 400)
endif()
dsp_cmd_test(oracle_rollback
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_rollback.py --driver $<TARGET_FILE:rollback_driver>
  --rounds ${DSP_ROLLBACK_ROUNDS}
  LABELS oracle TIMEOUT 900)
dsp_cmd_test(oracle_shipped COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_shipped.py ${DSP_SHIPPED_QUICK}
  LABELS oracle TIMEOUT 600)
dsp_cmd_test(oracle_shipped_cuda COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_shipped.py --backend cuda
  LABELS gpu oracle TIMEOUT 600)
dsp_cmd_test(oracle_speculative_cuda COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/oracle/test_speculative.py --backend cuda
  LABELS gpu oracle TIMEOUT 600)

# MPI ranks and thread teams on a 2-core machine: under ctest -j these run alone (overlapping other heavy
# oracles, their spinning ranks slowed each other up to 10x in the ASan suite)
set_tests_properties(oracle_speculative oracle_shipped oracle_rollback PROPERTIES PROCESSORS 2)
