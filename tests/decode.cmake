dsp_test(test_gamma_auto SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gamma_auto.c LABELS unit)
