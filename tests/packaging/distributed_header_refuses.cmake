# Compiles `#include <mixprec/distributed.h>` without MIXPREC_HAS_DISTRIBUTED (what a program gets
# from a mixprec built without its distributed code): the compile must fail with the header's
# message, in the C++ standard that mixprec::mixprec gives its consumers (STD: 17, or 20 with
# LibTorch >= 2.13). Usage: cmake -DCXX=... -DSTD=... -DINCLUDE=... -DWORK_DIR=... -P this file
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/uses_distributed.cpp "#include <mixprec/distributed.h>\nint main() {}\n")
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
refused("mixprec/distributed.h without MIXPREC_HAS_DISTRIBUTED"
  "this mixprec was built without its distributed code"
  ${CXX} -std=c++${STD} -fsyntax-only -I${INCLUDE} ${WORK_DIR}/uses_distributed.cpp)
