dsp_test(test_safetensors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_safetensors.c LABELS unit TIMEOUT 120)
