# Communicator tests: the self and threads backends (unit), every MPI collective at 1-4
# ranks, and the check that a rank exiting alone ends the job instead of hanging.
dsp_test(test_comm_self SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm.c LABELS unit ARGS self TIMEOUT 30)
dsp_test(test_comm_threads SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm.c LABELS unit ARGS threads TIMEOUT 60)
foreach(np 1 2 3 4)
  dsp_test(test_comm_np${np} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm.c LABELS mpi NP ${np}
           ARGS mpi ${np} TIMEOUT 60)
endforeach()
dsp_cmd_test(test_comm_rank_exit
  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/comm_rank_exit.sh $<TARGET_FILE:test_comm_np3>
  LABELS mpi TIMEOUT 90)
# The threads communicator and its barrier under ThreadSanitizer, built from their own sources (the whole
# library is not: its kernels' target_clones resolvers run before TSan's runtime is up). Release build only
# (ASan and TSan do not mix).
if(NOT DSPARK_SANITIZE AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
  add_executable(test_comm_threads_tsan ${CMAKE_CURRENT_LIST_DIR}/test_comm.c
    ${PROJECT_SOURCE_DIR}/src/comm/comm.c ${PROJECT_SOURCE_DIR}/src/comm/comm_self.c
    ${PROJECT_SOURCE_DIR}/src/comm/comm_mpi.c ${PROJECT_SOURCE_DIR}/src/comm/comm_threads.c
    ${PROJECT_SOURCE_DIR}/src/core/event.c ${PROJECT_SOURCE_DIR}/src/core/status.c
    ${PROJECT_SOURCE_DIR}/src/core/tensor.c)
  target_include_directories(test_comm_threads_tsan PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
    ${CMOCKA_INCLUDE})
  target_compile_options(test_comm_threads_tsan PRIVATE -fsanitize=thread -g -O1)
  target_link_options(test_comm_threads_tsan PRIVATE -fsanitize=thread)
  target_link_libraries(test_comm_threads_tsan PRIVATE ${CMOCKA_LIBRARY} MPI::MPI_C Threads::Threads m)
  add_test(NAME test_comm_threads_tsan COMMAND test_comm_threads_tsan threads)
  set_tests_properties(test_comm_threads_tsan PROPERTIES LABELS unit TIMEOUT 120
                       ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 exitcode=66")
endif()
