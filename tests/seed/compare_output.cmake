# Runs one seed example and compares its stdout with the seed's printed result.
# cmake -DEXECUTABLE=<binary> -DEXPECTED_FILE=<file> -P compare_output.cmake
# stdout must equal the file exactly (CRLF read as LF), and stderr must be empty: the seed's
# examples print nothing else, on a machine with or without CUDA.
if(NOT EXECUTABLE)
  message(FATAL_ERROR "compare_output.cmake: EXECUTABLE is not set")
endif()
if(NOT EXISTS "${EXPECTED_FILE}")
  message(FATAL_ERROR "compare_output.cmake: expected-output file not found: '${EXPECTED_FILE}'")
endif()
file(READ "${EXPECTED_FILE}" expected)

# stderr is kept apart, and must be empty (a warning there is noise in the seed's output).
execute_process(COMMAND "${EXECUTABLE}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE actual ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} failed (exit ${rc})\nstdout:\n${actual}\nstderr:\n${err}")
endif()

string(REPLACE "\r\n" "\n" expected "${expected}")
string(REPLACE "\r\n" "\n" actual "${actual}")
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "stdout of ${EXECUTABLE} differs from the seed.\n"
                      "--- expected ---\n${expected}--- got ---\n${actual}--- end ---\n"
                      "stderr:\n${err}")
endif()
if(NOT err STREQUAL "")
  message(FATAL_ERROR "${EXECUTABLE} printed to stderr (the seed's output has no such lines):\n"
                      "${err}")
endif()
message(STATUS "stdout matches the seed:\n${actual}")
