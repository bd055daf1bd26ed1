# packaging.two_libtorchs_refused: configured with CMAKE_PREFIX_PATH at a LibTorch's share/cmake
# (the pip wheel's torch.utils.cmake_prefix_path, as PyTorch's docs say) on a machine that also has
# a system LibTorch, LibTorch's config links the system's libc10.so (its find_library searches the
# system's folders first): mixprec's configure must stop, naming it (mixprec_check_one_libtorch in
# cmake/MixprecHelpers.cmake), instead of building programs that load two c10s.
# Usage: cmake -DMIXPREC_SOURCE_DIR=... -DWORK_DIR=... -DTORCH_PREFIX=... -DSYSTEM_C10=...
#              -DGENERATOR=... -P two_libtorchs_refused.cmake
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
set(build ${WORK_DIR}/two_libtorchs)
file(REMOVE_RECURSE ${build})
# The environment's CMAKE_PREFIX_PATH (the current-PyTorch stage sets it to the torch folder, which
# puts its lib/ first) is left out: only the share/cmake prefix is given.
refused("the configure with ${TORCH_PREFIX}/share/cmake as the prefix"
  "found ${SYSTEM_C10}, which is not its own"
  ${CMAKE_COMMAND} -E env --unset=CMAKE_PREFIX_PATH
  ${CMAKE_COMMAND} -S ${MIXPREC_SOURCE_DIR} -B ${build} -G ${GENERATOR}
  -DCMAKE_PREFIX_PATH=${TORCH_PREFIX}/share/cmake -DMIXPREC_BUILD_TESTS=OFF
  -DMIXPREC_BUILD_EXAMPLES=OFF -DMIXPREC_BUILD_BENCHMARKS=OFF)
