# CTest cuda.ieee_arithmetic_under_fast_math (tests/CMakeLists.txt): the PTX of mixprec's CUDA
# kernels, compiled with --use_fast_math ahead of mixprec's own flags (as a user's
# CMAKE_CUDA_FLAGS come), has IEEE division and square root and no flush-to-zero.
# Usage: cmake -DPTX="a.ptx;b.ptx" -P check_ptx.cmake
set(rounded_found FALSE)
foreach(file IN LISTS PTX)
  file(READ "${file}" text)
  # --use_fast_math changes f32 arithmetic only (ftz, approximate division and square root);
  # libdevice's f64 routines seed with rcp.approx.ftz.f64 under any flags, which is allowed.
  string(REGEX MATCH "[a-z0-9]+(\\.[a-z0-9]+)*\\.(approx|ftz)(\\.[a-z0-9]+)*\\.f32|div\\.full\\.f32" bad
         "${text}")
  if(bad)
    message(FATAL_ERROR "${file}: '${bad}': fast-math arithmetic in mixprec's CUDA kernels")
  endif()
  if(text MATCHES "sqrt\\.rn\\.f32" AND text MATCHES "div\\.rn\\.f32")
    set(rounded_found TRUE)
  endif()
endforeach()
if(NOT rounded_found)
  message(FATAL_ERROR "no sqrt.rn.f32 and div.rn.f32 in ${PTX}: not the Adam kernel's PTX?")
endif()
message(STATUS "IEEE division and square root, no flush-to-zero, in: ${PTX}")
