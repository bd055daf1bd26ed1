// Portability macros shared by the framework-free core and its CUDA kernels.
// MIXPREC_HOST_DEVICE marks functions that must compile for both the CPU and a CUDA device.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MIXPREC_HOST_DEVICE __host__ __device__
#else
#define MIXPREC_HOST_DEVICE
#endif
