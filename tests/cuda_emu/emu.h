// Runs the CUDA kernels of csrc/cuda on the CPU, one std::thread per CUDA thread, so the
// real kernel source (indexing, shuffles, barriers, carries) is checked without a GPU.
// Blocks run one after another, so `__shared__` can be a function-local static.
// Every shuffle is two warp barriers: valid because the kernels only shuffle with
// all lanes of a warp in step (the same rule real hardware needs).
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3 threadIdx, blockIdx;

struct float4 {
  float x, y, z, w;
};
struct uint4 {
  uint32_t x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct __half {
  uint16_t bits;
};
inline __half __ushort_as_half(uint16_t b) { return {b}; }
inline uint16_t __half_as_ushort(__half h) { return h.bits; }
inline float __half2float(__half h) {
  _Float16 f;
  std::memcpy(&f, &h.bits, 2);
  return (float)f;
}
inline __half __float2half_rn(float x) {
  _Float16 f = (_Float16)x;
  __half h;
  std::memcpy(&h.bits, &f, 2);
  return h;
}

#ifndef MAMBA_WARP_SIZE
#define MAMBA_WARP_SIZE 32  // -DMAMBA_WARP_SIZE=64 emulates AMD's wave64
#endif

namespace emu {
constexpr int kWarp = MAMBA_WARP_SIZE;
struct Block {
  explicit Block(int threads) : block(threads) {
    for (int w = 0; w < threads / kWarp; ++w) warps.emplace_back(std::make_unique<std::barrier<>>(kWarp));
    slots.resize(threads);
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> slots;
};
inline Block* g_block = nullptr;
inline std::mutex g_atomic;

inline float shfl(float v, int src) {
  const int t = threadIdx.x, w = t / kWarp;
  g_block->slots[t] = v;
  g_block->warps[w]->arrive_and_wait();
  const float r = g_block->slots[w * kWarp + src];
  g_block->warps[w]->arrive_and_wait();
  return r;
}

inline void launch(unsigned blocks, int threads, const std::function<void()>& body) {
  for (unsigned b = 0; b < blocks; ++b) {
    Block blk(threads);
    g_block = &blk;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        threadIdx.x = t;
        blockIdx.x = b;
        body();
      });
    for (auto& th : pool) th.join();
    g_block = nullptr;
  }
}
}  // namespace emu

inline void __syncthreads() { emu::g_block->block.arrive_and_wait(); }
inline float __shfl_up_sync(uint64_t, float v, unsigned d) {
  const int lane = threadIdx.x % emu::kWarp;
  return emu::shfl(v, lane >= (int)d ? lane - (int)d : lane);
}
inline float __shfl_down_sync(uint64_t, float v, unsigned d) {
  const int lane = threadIdx.x % emu::kWarp;
  return emu::shfl(v, lane + (int)d < emu::kWarp ? lane + (int)d : lane);
}
inline float __shfl_xor_sync(uint64_t, float v, int m) { return emu::shfl(v, (threadIdx.x % emu::kWarp) ^ m); }
inline float atomicAdd(float* p, float v) {
  std::lock_guard<std::mutex> lock(emu::g_atomic);
  const float old = *p;
  *p = old + v;
  return old;
}

// A thread that returns early (a narrow-mode warp past the last channel) must leave the
// barriers: real hardware simply retires it. The kernels only do this for whole warps
// and only in narrow mode, where no block barrier is used, so nothing to do here.

typedef void* cudaStream_t;
typedef int cudaError_t;
constexpr cudaError_t cudaSuccess = 0;
enum cudaDeviceAttr { cudaDevAttrWarpSize = 10 };
inline cudaError_t cudaGetDevice(int* d) { return *d = 0, cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { return *v = emu::kWarp, cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }

#define MAMBA_LAUNCH(kernel, blocks, threads, stream, ...) \
  (void)(stream), emu::launch((blocks), (threads), [&] { kernel(__VA_ARGS__); })
