# Compiles `#include <mixprec/distributed.h>` without MIXPREC_HAS_DISTRIBUTED (what a program gets
# from a mixprec built without its distributed code): the compile must fail with the header's
# message, in the C++ standard that mixprec::mixprec gives its consumers (STD: 17, or 20 with
# LibTorch >= 2.13). Usage: cmake -DCXX=... -DSTD=... -DINCLUDE=... -DWORK_DIR=... -P this file
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/uses_distributed.cpp "#include <mixprec/distributed.h>\nint main() {}\n")
execute_process(COMMAND ${CXX} -std=c++${STD} -fsyntax-only -I${INCLUDE}
                        ${WORK_DIR}/uses_distributed.cpp
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "mixprec/distributed.h compiled without MIXPREC_HAS_DISTRIBUTED")
endif()
if(NOT err MATCHES "this mixprec was built without its distributed code")
  message(FATAL_ERROR "the compile failed, but not with distributed.h's message:\n${err}")
endif()
message(STATUS "refused as it should be:\n${err}")
