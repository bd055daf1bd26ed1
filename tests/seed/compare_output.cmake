# Runs one seed example and compares its stdout with the seed's printed result.
# cmake -DEXECUTABLE=<binary> (-DEXPECTED_FILE=<file> | -DEXPECTED_TEXT=<one line>) -P compare_output.cmake
# EXPECTED_FILE: stdout must equal the file exactly (CRLF read as LF).
# EXPECTED_TEXT: stdout must be exactly that one line followed by a newline.
if(NOT EXECUTABLE)
  message(FATAL_ERROR "compare_output.cmake: EXECUTABLE is not set")
endif()
if(DEFINED EXPECTED_FILE)
  if(NOT EXISTS "${EXPECTED_FILE}")
    message(FATAL_ERROR "compare_output.cmake: expected-output file not found: ${EXPECTED_FILE}")
  endif()
  file(READ "${EXPECTED_FILE}" expected)
elseif(DEFINED EXPECTED_TEXT)
  set(expected "${EXPECTED_TEXT}\n")
else()
  message(FATAL_ERROR "compare_output.cmake: set EXPECTED_FILE or EXPECTED_TEXT")
endif()

# stderr is kept apart: LibTorch warns there (e.g. autocast asked for CUDA on a CPU-only machine).
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
message(STATUS "stdout matches the seed:\n${actual}")
