# Script run by the packaging tests: installs mixprec (find_package mode), makes an archive of its
# sources (fetchcontent mode) or points at them (add_subdirectory_after_torch), then configures,
# builds and runs the consumer project (consumer_core always; consumer_torch and consumer_c, the C
# ABI, when mixprec was built with LibTorch; consumer_distributed when with its distributed code).
set(consumer_src ${CMAKE_CURRENT_LIST_DIR}/consumer)
set(build ${WORK_DIR}/${MODE})
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${build})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

if(MODE STREQUAL "find_package")
  file(REMOVE_RECURSE ${prefix})
  run(${CMAKE_COMMAND} --install ${MIXPREC_BINARY_DIR} --prefix ${prefix})
  run(${CMAKE_COMMAND} -S ${consumer_src} -B ${build} -G ${GENERATOR}
      -DCMAKE_PREFIX_PATH=${prefix} -DCONSUMER_MODE=find_package -DWITH_TORCH=${WITH_TORCH}
      -DWITH_CUDA=${WITH_CUDA} -DWITH_DISTRIBUTED=${WITH_DISTRIBUTED}
      -DTORCH_VERSION=${TORCH_VERSION})
else()
  # fetchcontent: an archive of mixprec's sources, as a release would be, and no build type, which
  # mixprec must not set in its parent; add_subdirectory_after_torch: Release.
  set(build_type -DCMAKE_BUILD_TYPE=Release)
  set(archive "")
  if(MODE STREQUAL "fetchcontent")
    set(build_type "")
    set(archive ${WORK_DIR}/mixprec-src.tar.gz)
    file(MAKE_DIRECTORY ${WORK_DIR})  # this test may be the first of ctest -j to reach it
    file(REMOVE ${archive})
    execute_process(COMMAND ${CMAKE_COMMAND} -E tar czf ${archive} CMakeLists.txt cmake include src
                            tests examples bench
                    WORKING_DIRECTORY ${MIXPREC_SOURCE_DIR} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "could not make ${archive}")
    endif()
    set(archive -DMIXPREC_ARCHIVE=file://${archive})
  endif()
  run(${CMAKE_COMMAND} -S ${consumer_src} -B ${build} -G ${GENERATOR} ${build_type} ${archive}
      "-DCMAKE_CXX_FLAGS=${BUILD_CXX_FLAGS}" -DCONSUMER_MODE=${MODE} -DMIXPREC_SOURCE_DIR=${MIXPREC_SOURCE_DIR} -DWITH_TORCH=${WITH_TORCH}
      -DWITH_CUDA=${WITH_CUDA} -DWITH_DISTRIBUTED=${WITH_DISTRIBUTED}
      -DTORCH_VERSION=${TORCH_VERSION})
endif()
run(${CMAKE_COMMAND} --build ${build})
run(${build}/consumer_core)
run(${build}/consumer_core_other_abi)
if(WITH_TORCH)
  run(${build}/consumer_torch)
  run(${build}/consumer_c)
endif()
if(WITH_DISTRIBUTED)
  run(${build}/consumer_distributed)
endif()
