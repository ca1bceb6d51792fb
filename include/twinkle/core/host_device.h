// twinkle/core/host_device.h — TWINKLE_HOST_DEVICE: a function compiled for the host and, under nvcc, for
// the device too, so one definition serves the CPU kernels and the CUDA ones (bit-identical arithmetic).
#pragma once

#if defined(__CUDACC__)
#define TWINKLE_HOST_DEVICE __host__ __device__
#else
#define TWINKLE_HOST_DEVICE
#endif
