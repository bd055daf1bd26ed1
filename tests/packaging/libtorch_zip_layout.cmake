# packaging.libtorch_zip_layout: mixprec built against a LibTorch outside the system, found through
# CMAKE_PREFIX_PATH as a user of PyTorch's libtorch zip finds it (docs/install.md). The LibTorch is
# Debian 12's, laid out as the zip is: libtorch/{include,lib,share/cmake/{Torch,Caffe2}}. Headers
# and CMake config files are copies, the config made relocatable as the zip's is (see below); the
# libraries are symbolic links into /usr/lib (the loader still finds them through the copy's lib/). mixprec is configured with CMAKE_PREFIX_PATH=<libtorch> and no
# Torch_DIR, built and installed; a consumer finds it (and, through it, that LibTorch) and runs.
# Checks that the copy was used: Torch_DIR, the headers compiled, the libraries loaded.
# Skips, saying why, without Debian 12's libtorch-dev (the config edits below are for its files).
set(debian_torch /usr/lib/x86_64-linux-gnu/cmake/Torch)
get_filename_component(torch_dir "${TORCH_DIR}" REALPATH)  # /lib is /usr/lib on Debian
if(NOT torch_dir STREQUAL debian_torch OR NOT TORCH_VERSION MATCHES "^1\\.13\\.")
  message("SKIP: packaging.libtorch_zip_layout needs Debian 12's libtorch-dev (LibTorch 1.13 in "
          "${debian_torch}); this build's LibTorch is ${TORCH_VERSION} in ${TORCH_DIR}. It runs in "
          "the Debian 12 stage of scripts/test.sh")
  return()
endif()

set(work ${WORK_DIR}/libtorch_zip_layout)
set(libtorch ${work}/libtorch)
file(REMOVE_RECURSE ${work})
file(MAKE_DIRECTORY ${libtorch}/include ${libtorch}/lib ${libtorch}/share/cmake)
unset(ENV{Torch_DIR})
unset(ENV{CMAKE_PREFIX_PATH})

include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

# ---- the layout: headers and libraries as links, the config as relocatable copies ----------
# The headers are copied (45 MB), not linked: GCC writes a system header's path into the
# dependency file with symbolic links resolved, and the check below reads those paths.
file(COPY /usr/include/ATen /usr/include/c10 /usr/include/caffe2 /usr/include/torch
     DESTINATION ${libtorch}/include)
file(GLOB libs RELATIVE /usr/lib/x86_64-linux-gnu
     /usr/lib/x86_64-linux-gnu/libc10.so* /usr/lib/x86_64-linux-gnu/libtorch.so*
     /usr/lib/x86_64-linux-gnu/libtorch_cpu.so* /usr/lib/x86_64-linux-gnu/libtorch_global_deps.so*)
foreach(lib IN LISTS libs)
  file(CREATE_LINK /usr/lib/x86_64-linux-gnu/${lib} ${libtorch}/lib/${lib} SYMBOLIC)
endforeach()
file(COPY /usr/lib/x86_64-linux-gnu/cmake/Torch /usr/lib/x86_64-linux-gnu/cmake/Caffe2
     DESTINATION ${libtorch}/share/cmake)
# Debian's config files find their prefix from lib/x86_64-linux-gnu/cmake/<Pkg>: four levels up
# (PyTorch's own, in the zip's share/cmake/<Pkg>, go three), and Caffe2Targets*.cmake, exported
# from lib/x86_64-linux-gnu, name the headers ${_IMPORT_PREFIX}/../include and the libraries
# ${_IMPORT_PREFIX}/x86_64-linux-gnu/ (the zip's: ${_IMPORT_PREFIX}/include and /lib/). Each edit
# must apply exactly where expected: a Debian update that changes these files fails here.
function(edit file from to count)
  file(READ ${file} text)
  string(REPLACE "${from}" "@@MIXPREC_EDIT@@" marked "${text}")
  string(REGEX MATCHALL "@@MIXPREC_EDIT@@" hits "${marked}")
  list(LENGTH hits n)
  if(NOT n EQUAL count)
    message(FATAL_ERROR "${file}: expected ${count} occurrence(s) of '${from}', found ${n}")
  endif()
  string(REPLACE "${from}" "${to}" text "${text}")
  file(WRITE ${file} "${text}")
endfunction()
set(cfg ${libtorch}/share/cmake)
edit(${cfg}/Torch/TorchConfig.cmake "/../../../../\"" "/../../../\"" 1)
edit(${cfg}/Caffe2/Caffe2Config.cmake "/../../../../\"" "/../../../\"" 1)
edit(${cfg}/Caffe2/Caffe2Targets.cmake "\${_IMPORT_PREFIX}/../include" "\${_IMPORT_PREFIX}/include" 2)
edit(${cfg}/Caffe2/Caffe2Targets-relwithdebinfo.cmake "\${_IMPORT_PREFIX}/x86_64-linux-gnu/"
     "\${_IMPORT_PREFIX}/lib/" 6)
# Nothing in the copied config may still point into /usr or Debian's multiarch folder (the CUDA
# modules below Caffe2/, which search the system for a CUDA toolkit as the zip's do, aside).
file(GLOB config_files ${cfg}/Torch/*.cmake ${cfg}/Caffe2/*.cmake)
foreach(f IN LISTS config_files)
  file(STRINGS ${f} lines REGEX "^[^#]*(/usr/|x86_64-linux-gnu|/\\.\\./\\.\\./\\.\\./\\.\\./)")
  if(lines)
    message(FATAL_ERROR "the copied config still names Debian's layout: ${f}: ${lines}")
  endif()
endforeach()

# ---- mixprec against it, installed; a consumer of the package --------------------------------
# Each configure must take the copy's config (Torch_DIR), checked before anything is built.
function(check_torch_dir build_dir)
  file(STRINGS ${build_dir}/CMakeCache.txt torch_dir REGEX "^Torch_DIR:[A-Z]+=")
  string(REGEX REPLACE "^Torch_DIR:[A-Z]+=" "" torch_dir "${torch_dir}")
  if(NOT torch_dir STREQUAL "${libtorch}/share/cmake/Torch")
    message(FATAL_ERROR "${build_dir} took Torch_DIR=${torch_dir}, not the copy's "
                        "${libtorch}/share/cmake/Torch")
  endif()
endfunction()
# Only what the check needs: mixprec::core and mixprec::mixprec (no tests, examples, benchmarks,
# distributed code or CUDA kernels).
set(build ${work}/mixprec-build)
set(prefix ${work}/prefix)
run(${CMAKE_COMMAND} -S ${MIXPREC_SOURCE_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${libtorch} -DMIXPREC_BUILD_TESTS=OFF -DMIXPREC_BUILD_EXAMPLES=OFF
    -DMIXPREC_BUILD_BENCHMARKS=OFF -DMIXPREC_WITH_DISTRIBUTED=OFF -DMIXPREC_WITH_CUDA=OFF
    "-DCMAKE_CXX_FLAGS=${BUILD_CXX_FLAGS}")
check_torch_dir(${build})
run(${CMAKE_COMMAND} --build ${build})
run(${CMAKE_COMMAND} --install ${build} --prefix ${prefix})
set(consumer ${work}/consumer-build)
run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/consumer -B ${consumer} -G ${GENERATOR}
    "-DCMAKE_PREFIX_PATH=${prefix}\;${libtorch}" -DCONSUMER_MODE=find_package -DWITH_TORCH=ON
    -DWITH_CUDA=OFF -DWITH_DISTRIBUTED=OFF)
check_torch_dir(${consumer})
run(${CMAKE_COMMAND} --build ${consumer})

# ---- the copy was used (its config: check_torch_dir above) -----------------------------------
# 2. LibTorch's headers were compiled from the copy's include folder, none from /usr/include.
find_program(NINJA ninja)
if(GENERATOR STREQUAL "Ninja" AND NINJA)
  foreach(dir_obj "${build};CMakeFiles/mixprec.dir/src/torch/scaler/grad_scaler.cpp.o"
                  "${consumer};CMakeFiles/consumer_torch.dir/consumer_torch.cpp.o")
    list(GET dir_obj 0 dir)
    list(GET dir_obj 1 obj)
    run(${NINJA} -C ${dir} -t deps ${obj})
    if(NOT out MATCHES "${libtorch}/include/torch/" OR
       out MATCHES "/usr/include/(torch|ATen|c10|caffe2)/")
      message(FATAL_ERROR "${obj} did not take LibTorch's headers from ${libtorch}/include "
                          "alone:\n${out}")
    endif()
  endforeach()
endif()
# 3. The consumer loads LibTorch from the copy's lib folder (its RUNPATH), and runs.
run(ldd ${consumer}/consumer_torch)
foreach(lib libtorch_cpu libc10)
  if(NOT out MATCHES "${lib}\\.so[.0-9]* => ${libtorch}/lib/${lib}\\.so")
    message(FATAL_ERROR "consumer_torch does not load ${lib} from ${libtorch}/lib:\n${out}")
  endif()
endforeach()
run(${consumer}/consumer_torch)
message(STATUS "${out}")
run(${consumer}/consumer_core)
message(STATUS "${out}")
message(STATUS "mixprec and its consumer used the LibTorch in ${libtorch}")
