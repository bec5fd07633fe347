# The head across MPI ranks. The full-size case (label "full") runs 32 ranks on
# this 2-core machine: `ctest -L full` runs it alone.
dsp_test(test_head_fullsize SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_head_fullsize.c LABELS full NP 32 TIMEOUT 1500)
dsp_test(test_head_midsize SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_head_fullsize.c LABELS mpi NP 5
         ARGS 6 3 4099 16 64 TIMEOUT 300)
