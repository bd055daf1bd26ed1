# Small helpers of the mixprec build: warnings, the LibTorch ABI flag, and test registration.

# Warnings on, PRIVATE to the target (never leaked to users).
function(mixprec_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)
endfunction()

# Sets <out> to the _GLIBCXX_USE_CXX11_ABI=N definition that TORCH_CXX_FLAGS carries (or "").
function(mixprec_torch_abi_definition out)
  set(abi "")
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
    set(abi "_GLIBCXX_USE_CXX11_ABI=${CMAKE_MATCH_1}")
  endif()
  set(${out} "${abi}" PARENT_SCOPE)
endfunction()

# mixprec_torch_pch(<target>): the target's C++ files start from one precompiled <torch/torch.h>,
# made once per build (target mixprec_torch_pch) and shared by every program that includes it.
# tests/torch/autocast_test.cpp alone (GCC 12, LibTorch 1.13, -O3) compiles in 10.2-10.6 s
# without it and 5.0 s with it; the programs include <torch/torch.h> themselves, so it changes no
# source's meaning. GCC takes it
# only where the macros and flags agree: programs that link mixprec::mixprec and
# mixprec_set_warnings, without OpenMP flags of their own, not shared libraries (-fPIC). Where
# they do not, -Winvalid-pch says "not used because ..." and the file is parsed as before.
function(mixprec_torch_pch target)
  if(NOT TARGET mixprec_torch_pch)
    add_library(mixprec_torch_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
    target_link_libraries(mixprec_torch_pch PRIVATE mixprec::mixprec)
    target_precompile_headers(mixprec_torch_pch PRIVATE <torch/torch.h>)
    mixprec_set_warnings(mixprec_torch_pch)  # -Wpedantic changes predefined macros: as its users
  endif()
  target_precompile_headers(${target} REUSE_FROM mixprec_torch_pch)
  target_compile_options(${target} PRIVATE -Winvalid-pch)
endfunction()

# mixprec_add_test(<name> SOURCES ... LIBS ... LABELS ...): a GoogleTest executable whose tests
# are discovered one by one and carry the given CTest labels.
function(mixprec_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  mixprec_set_warnings(${name})
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()

# mixprec_find_torch(): find_package(Torch REQUIRED) for mixprec's directory, and sets
# MIXPREC_TORCH_IS_CUDA (a CUDA build of LibTorch). A macro, so Torch's variables reach the caller.
#
# A CUDA LibTorch's config (Caffe2's public/cuda.cmake) enables CUDA itself and then sets
# CMAKE_CUDA_ARCHITECTURES to OFF and appends its own -gencode list (every architecture it knows,
# 5.0 to 9.0a, without a GPU to detect) and flags to CMAKE_CUDA_FLAGS. mixprec's own .cu files
# include no Torch header and pick their architectures themselves: the caller's values are put back.
#
# Torch's imported targets (torch, torch_cpu_library, c10, protobuf::libprotobuf, ...) are visible
# only in the directory that found Torch. When mixprec is added with add_subdirectory() or
# FetchContent to a project that did not call find_package(Torch) itself, the project's own
# targets link mixprec::mixprec, whose link interface names them from the project's directory:
# "Target torch not found". The ones this find_package() created are made global. (Where the
# project found Torch first, they already exist up there and none are created here.)
macro(mixprec_find_torch)
  get_property(mixprec_imported_before DIRECTORY PROPERTY IMPORTED_TARGETS)
  foreach(mixprec_var CMAKE_CUDA_ARCHITECTURES CMAKE_CUDA_FLAGS CMAKE_CUDA_STANDARD
                      CMAKE_CUDA_STANDARD_REQUIRED)
    set(mixprec_had_${mixprec_var} OFF)
    if(DEFINED ${mixprec_var})
      set(mixprec_had_${mixprec_var} ON)
      set(mixprec_saved_${mixprec_var} "${${mixprec_var}}")
    endif()
  endforeach()
  find_package(Torch REQUIRED)
  foreach(mixprec_var CMAKE_CUDA_ARCHITECTURES CMAKE_CUDA_FLAGS CMAKE_CUDA_STANDARD
                      CMAKE_CUDA_STANDARD_REQUIRED)
    if(mixprec_had_${mixprec_var})
      set(${mixprec_var} "${mixprec_saved_${mixprec_var}}")
    else()
      unset(${mixprec_var})
    endif()
  endforeach()
  set(MIXPREC_TORCH_IS_CUDA OFF)
  if(TARGET torch_cuda OR "${TORCH_LIBRARIES}" MATCHES "torch_cuda|c10_cuda")
    set(MIXPREC_TORCH_IS_CUDA ON)
  endif()
  mixprec_check_one_libtorch()
  get_property(mixprec_imported_after DIRECTORY PROPERTY IMPORTED_TARGETS)
  if(NOT PROJECT_IS_TOP_LEVEL)
    if(mixprec_imported_before)
      list(REMOVE_ITEM mixprec_imported_after ${mixprec_imported_before})
    endif()
    foreach(mixprec_target IN LISTS mixprec_imported_after)
      set_property(TARGET ${mixprec_target} PROPERTY IMPORTED_GLOBAL TRUE)
    endforeach()
  endif()
endmacro()

# mixprec_check_one_libtorch(): stops the configure when LibTorch's config picked up a library of
# another LibTorch. Its config finds c10 (and kineto) with find_library(... PATHS <its lib/>),
# which searches the system's folders first: with CMAKE_PREFIX_PATH set to the pip wheel's
# torch/share/cmake (torch.utils.cmake_prefix_path) on a machine that also has a system LibTorch
# (Debian's libtorch-dev), TORCH_LIBRARIES gets /usr/lib/.../libc10.so of that other version, and
# the programs load two c10s. A prefix that is the LibTorch folder itself (the wheel's torch/, a
# libtorch zip's root) puts its lib/ first (docs/install.md).
function(mixprec_check_one_libtorch)
  if(NOT TORCH_INSTALL_PREFIX)
    return()
  endif()
  # As written and with symlinks resolved: a LibTorch may link its libraries from elsewhere
  # (tests/packaging/libtorch_zip_layout.cmake does), or be reached through a symlink.
  get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
  get_filename_component(real_prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
  foreach(item IN LISTS TORCH_LIBRARIES)
    if(IS_ABSOLUTE "${item}" AND item MATCHES "/lib(c10|torch)[^/]*\\.so[^/]*$")
      get_filename_component(path "${item}" ABSOLUTE)
      get_filename_component(real "${item}" REALPATH)
      string(FIND "${path}" "${prefix}/" at)
      string(FIND "${real}" "${real_prefix}/" real_at)
      if(NOT at EQUAL 0 AND NOT real_at EQUAL 0)
        message(FATAL_ERROR
          "mixprec: LibTorch's config (${Torch_DIR}) found ${item}, which is not its own "
          "(${TORCH_INSTALL_PREFIX}): another LibTorch is installed in a system folder, and the "
          "programs would load both. Set CMAKE_PREFIX_PATH to the LibTorch folder itself "
          "(${TORCH_INSTALL_PREFIX}; for the pip wheel, the torch package's folder rather than "
          "torch/share/cmake), or pass -Dc10_LIBRARY=${TORCH_INSTALL_PREFIX}/lib/libc10.so "
          "(docs/install.md)")
      endif()
    endif()
  endforeach()
endfunction()

# mixprec_use_torch_wheel_nvidia(<target>): a CUDA LibTorch from a pip wheel comes with its CUDA
# libraries (cuDNN, NCCL, cuBLAS, ...) as nvidia-* wheels, in the nvidia/*/lib folders beside it,
# and finds them at run time through its own RPATH. Two things need them at build time too, on
# <target> and (PUBLIC) its consumers; a no-op for any other LibTorch:
# - the link: the linker looks for LibTorch's libraries in the program's -rpath folders first,
#   among them the CUDA toolkit's lib/ (from CUDA::cudart), whose NCCL or cuDNN may be older than
#   the wheel's, and the link of every LibTorch program then fails on symbols the older library
#   lacks (ncclCommGrow, ... with CUDA 13.0's NCCL 2.28 and the 2.15 wheel's 2.30). The wheel's
#   folders go to the linker with -rpath-link, searched before -rpath.
# - NCCL's header: c10d's ProcessGroupNCCL::Options holds an ncclConfig_t by value, whose size
#   changes between NCCL releases (2.28's is 16 bytes smaller than 2.30's). A program that makes
#   Options (examples/ddp_train.cpp) must see the nccl.h of the NCCL that LibTorch was built and
#   runs with, not the toolkit's: the wheel's nvidia/nccl/include comes first (-I, searched before
#   the toolkit's -isystem folder).
function(mixprec_use_torch_wheel_nvidia target)
  if(NOT MIXPREC_TORCH_IS_CUDA OR NOT TORCH_INSTALL_PREFIX)
    return()
  endif()
  get_filename_component(site_packages "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  file(GLOB dirs LIST_DIRECTORIES true "${site_packages}/nvidia/*/lib")
  if(NOT dirs)
    return()
  endif()
  string(REPLACE ";" ":" joined "${dirs}")
  target_link_options(${target} PUBLIC "LINKER:-rpath-link,${joined}")
  if(EXISTS "${site_packages}/nvidia/nccl/include/nccl.h")
    target_include_directories(${target} BEFORE PUBLIC "${site_packages}/nvidia/nccl/include")
  endif()
  get_property(reported GLOBAL PROPERTY MIXPREC_WHEEL_NVIDIA_REPORTED)
  if(NOT reported)
    set_property(GLOBAL PROPERTY MIXPREC_WHEEL_NVIDIA_REPORTED ON)
    message(STATUS "mixprec: LibTorch from a pip wheel: its CUDA libraries are linked from "
                   "${site_packages}/nvidia/*/lib, NCCL's header is its nvidia/nccl/include")
  endif()
endfunction()
