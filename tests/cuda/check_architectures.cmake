# CTest cuda.kernels_built_for_their_architectures: libmixprec_cuda.so holds machine code for
# exactly MIXPREC_CUDA_ARCHITECTURES (a CUDA LibTorch's config once made them CMake's default,
# sm_52, without anyone noticing). With native/all/all-major, at least one architecture.
# Usage: cmake -DCUOBJDUMP=... -DLIB=... "-DARCHS=75;80;90" -P check_architectures.cmake
execute_process(COMMAND ${CUOBJDUMP} --list-elf ${LIB} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cuobjdump --list-elf ${LIB} failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "sm_[0-9]+a?" found "${out}")
string(REPLACE "sm_" "" found "${found}")
list(REMOVE_DUPLICATES found)
list(SORT found)
set(expected "")
foreach(arch IN LISTS ARCHS)
  if(NOT arch MATCHES "^([0-9]+a?)(-real|-virtual)?$")
    set(expected "")  # native, all, all-major: decided by nvcc
    break()
  endif()
  if(NOT CMAKE_MATCH_2 STREQUAL "-virtual")
    list(APPEND expected ${CMAKE_MATCH_1})
  endif()
endforeach()
list(SORT expected)
if(found STREQUAL "")
  message(FATAL_ERROR "no machine code in ${LIB}:\n${out}")
endif()
if(expected AND NOT found STREQUAL expected)
  message(FATAL_ERROR "${LIB} has machine code for sm_{${found}}, not for MIXPREC_CUDA_ARCHITECTURES "
                      "(${ARCHS})")
endif()
message(STATUS "${LIB}: machine code for sm_{${found}}")
