# The independent Python oracle (tests/oracle/, numpy + ml_dtypes) and the
# command-line suite of `dspark head`. oracle_self needs no program; the others
# run $DSPARK alone and under $MPIRUN and compare with the oracle.
set(DSP_ORACLE_DIR ${CMAKE_CURRENT_LIST_DIR}/oracle)
dsp_cmd_test(oracle_self COMMAND ${PYTHON3} ${DSP_ORACLE_DIR}/test_oracle_self.py
  LABELS oracle TIMEOUT 60)
dsp_cmd_test(oracle_random COMMAND ${PYTHON3} ${DSP_ORACLE_DIR}/test_oracle_random.py
  LABELS oracle TIMEOUT 300)
# its reference is the fmaf chain bit for bit: the default takes AMX for the head's LM product where the CPU has it
set_property(TEST oracle_random APPEND PROPERTY ENVIRONMENT "DSPARK_CPU_KERNEL=chain")
dsp_cmd_test(oracle_contract_table COMMAND ${PYTHON3} ${DSP_ORACLE_DIR}/test_contract_table.py
  LABELS oracle TIMEOUT 300)
dsp_cmd_test(oracle_parity_paths COMMAND ${PYTHON3} ${DSP_ORACLE_DIR}/test_parity_paths.py
  LABELS oracle TIMEOUT 300)
dsp_cmd_test(oracle_sampling COMMAND ${PYTHON3} ${DSP_ORACLE_DIR}/test_sampling.py
  LABELS oracle TIMEOUT 300)
dsp_cmd_test(oracle_bad_inputs COMMAND ${PYTHON3} ${DSP_ORACLE_DIR}/test_bad_inputs.py
  LABELS oracle TIMEOUT 300)
