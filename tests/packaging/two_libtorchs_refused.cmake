# packaging.two_libtorchs_refused: configured with CMAKE_PREFIX_PATH at a LibTorch's share/cmake
# (the pip wheel's torch.utils.cmake_prefix_path, as PyTorch's docs say) on a machine that also has
# a system LibTorch, LibTorch's config links the system's libc10.so (its find_library searches the
# system's folders first): mixprec's configure must stop, naming it (mixprec_check_one_libtorch in
# cmake/MixprecHelpers.cmake), instead of building programs that load two c10s.
# Usage: cmake -DMIXPREC_SOURCE_DIR=... -DWORK_DIR=... -DTORCH_PREFIX=... -DSYSTEM_C10=...
#              -DGENERATOR=... -P two_libtorchs_refused.cmake
set(build ${WORK_DIR}/two_libtorchs)
file(REMOVE_RECURSE ${build})
# The environment's CMAKE_PREFIX_PATH (the current-PyTorch stage sets it to the torch folder, which
# puts its lib/ first) is left out: only the share/cmake prefix is given.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=CMAKE_PREFIX_PATH
          ${CMAKE_COMMAND} -S ${MIXPREC_SOURCE_DIR} -B ${build} -G ${GENERATOR}
          -DCMAKE_PREFIX_PATH=${TORCH_PREFIX}/share/cmake -DMIXPREC_BUILD_TESTS=OFF
          -DMIXPREC_BUILD_EXAMPLES=OFF -DMIXPREC_BUILD_BENCHMARKS=OFF
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \n]+" " " text "${err}")  # CMake wraps its messages
if(rc EQUAL 0)
  message(FATAL_ERROR "the configure passed with ${TORCH_PREFIX}/share/cmake as the prefix:\n${out}")
endif()
if(NOT text MATCHES "found ${SYSTEM_C10}, which is not its own")
  message(FATAL_ERROR "the configure failed, but not with mixprec's message:\n${err}")
endif()
message(STATUS "refused as it should be:\n${err}")
