# run(COMMAND ARGS...) for the packaging test scripts: runs the command and fails the test with
# its output when it fails; its standard output is left in `out`.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

# refused(WHAT PATTERN COMMAND ARGS...): runs the command and fails the test unless it fails with
# PATTERN (a regex) in its standard error, whose runs of spaces and newlines (CMake wraps its
# messages) count as one space. WHAT names the refusal in the messages.
function(refused what pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " text "${err}")
  if(rc EQUAL 0)
    message(FATAL_ERROR "${what}: the command passed: ${ARGN}\n${out}")
  endif()
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: the command failed, but not with the expected message:\n${err}")
  endif()
  message(STATUS "${what}: refused as it should be:\n${err}")
endfunction()
