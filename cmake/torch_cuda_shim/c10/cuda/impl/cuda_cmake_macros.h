// Stand-in for the header LibTorch's CMake generates for its CUDA builds. Debian's CPU-only
// libtorch-dev ships the c10/cuda headers without it; mixprec's compile check of its LibTorch
// CUDA code (mixprec_torch_cuda_compile_check in cmake/MixprecHelpers.cmake) needs it. It is
// never on the include path of a real build.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
