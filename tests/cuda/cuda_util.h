// Device memory for the CUDA tests: copies to and from the device, checked with gtest.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cuda/kernels.h"

namespace mixprec::testing {

#define SKIP_WITHOUT_DEVICE() \
  if (::mixprec::core::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

/// A new device buffer holding `host` (free it with cudaFree).
template <typename T>
T* to_device(const std::vector<T>& host) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, sizeof(T) * std::max<std::size_t>(host.size(), 1)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  return p;
}

/// The first `n` elements of a device buffer.
template <typename T>
std::vector<T> to_host(const T* p, std::size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

}  // namespace mixprec::testing
