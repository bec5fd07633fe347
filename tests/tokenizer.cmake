# The tokenizer: cmocka cases, then every string of a corpus against Hugging
# Face `tokenizers` on tokenizer.json files it builds in the test.
dsp_test(test_tokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.c LABELS unit TIMEOUT 120)
add_executable(tok_driver ${CMAKE_CURRENT_LIST_DIR}/tokenizer/tok_driver.c)
target_include_directories(tok_driver PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(tok_driver PRIVATE dspark)
if(DSPARK_HAVE_CUDA)
  set_target_properties(tok_driver PROPERTIES LINKER_LANGUAGE CUDA)
endif()
dsp_cmd_test(tokenizer_compare
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/tokenizer/compare_tokenizer.py --driver $<TARGET_FILE:tok_driver>
  LABELS oracle TIMEOUT 300)
