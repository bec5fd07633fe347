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
