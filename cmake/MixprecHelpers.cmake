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

# mixprec_torch_cuda_compile_check(<name> SOURCES ... [LIBS ...]): compiles, never links, code
# written for a CUDA LibTorch (MIXPREC_TORCH_CUDA) against a CPU-only LibTorch that ships the
# c10/cuda and ATen/cuda headers (Debian's does), so CI catches errors in code that only a GPU
# machine runs. A no-op unless MIXPREC_TORCH_CUDA_COMPILE_CHECK is set (top-level CMakeLists).
function(mixprec_torch_cuda_compile_check name)
  if(NOT MIXPREC_TORCH_CUDA_COMPILE_CHECK)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} OBJECT ${ARG_SOURCES})
  target_compile_definitions(${name} PRIVATE MIXPREC_TORCH_CUDA)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests
    ${PROJECT_SOURCE_DIR}/cmake/torch_cuda_shim ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${name} PRIVATE mixprec_core ${TORCH_LIBRARIES} ${ARG_LIBS})
  mixprec_set_warnings(${name})
endfunction()
