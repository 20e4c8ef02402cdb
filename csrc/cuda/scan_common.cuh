// Shared device code of the selective-scan kernels: portability shims (CUDA / HIP
// through torch's hipify), dtype conversion, 16-item loads/stores and the (a, b)
// pair scans. No torch headers: see selective_scan.h.
//
// Work layout (both kernels): a block of kThreads threads, each thread owns kItems
// consecutive time steps. "Wide" mode: the whole block scans one (batch, dim)
// channel in chunks of kThreads * kItems == MAMBA_SCAN_CHUNK steps. "Narrow" mode
// (seqlen <= warp size * kItems): every warp scans its own channel in one chunk, so
// short sequences keep all lanes busy without a second instantiation.
//
// dtype is a runtime argument, not a template parameter: it only changes the
// loads/stores, and one instantiation per kernel keeps the build cheap.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "../selective_scan.h"

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__) || defined(USE_ROCM)
#define MAMBA_HIP 1
#else
#define MAMBA_HIP 0
#endif

// Device-side warp size. AMD is 64 (gfx9) or 32 (gfx10+ in wave32); the launcher
// asks the runtime (cudaDevAttrWarpSize) so host and device agree.
// (Predefined: the host emulation in tests/cuda_emu runs both 32 and 64.)
#ifndef MAMBA_WARP_SIZE
#if MAMBA_HIP
#if defined(__AMDGCN_WAVEFRONT_SIZE__)
#define MAMBA_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE__
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define MAMBA_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define MAMBA_WARP_SIZE 64
#endif
#else
#define MAMBA_WARP_SIZE 32
#endif
#endif

// HIP 5.7 has neither the *_sync shuffles nor __syncwarp; its shuffles act on the whole
// wavefront, which is what the callers use (all lanes always take part).
#if MAMBA_HIP
#define MAMBA_SHFL_UP(v, d) __shfl_up((v), (d))
#define MAMBA_SHFL_DOWN(v, d) __shfl_down((v), (d))
#define MAMBA_SHFL_XOR(v, m) __shfl_xor((v), (m))
#else
#define MAMBA_SHFL_UP(v, d) __shfl_up_sync(0xffffffffu, (v), (d))
#define MAMBA_SHFL_DOWN(v, d) __shfl_down_sync(0xffffffffu, (v), (d))
#define MAMBA_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#endif

// Kernel launch, a macro so that the host-side emulation (tests/cuda_emu) can run the
// very same launchers on the CPU.
#ifndef MAMBA_LAUNCH
#define MAMBA_LAUNCH(kernel, blocks, threads, stream, ...) kernel<<<(blocks), (threads), 0, (stream)>>>(__VA_ARGS__)
#endif

namespace mamba_scan {

constexpr int kThreads = 128;
constexpr int kItems = 16;
constexpr int kMaxWarps = kThreads / 32;  // smallest warp size we run on
#ifndef MAMBA_FWD_MIN_BLOCKS
#define MAMBA_FWD_MIN_BLOCKS 3
#endif
#ifndef MAMBA_BWD_MIN_BLOCKS
#define MAMBA_BWD_MIN_BLOCKS 2
#endif
// resident blocks per SM the register budget must allow (sm_80, ptxas -v: fwd 158 regs and bwd
// 255 regs with <50 B spill; one more block each spills much more)
constexpr int kFwdMinBlocks = MAMBA_FWD_MIN_BLOCKS;
constexpr int kBwdMinBlocks = MAMBA_BWD_MIN_BLOCKS;
constexpr int kMaxDstate = 256;           // as upstream; bounds the bwd carry buffer
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kThreads * kItems == MAMBA_SCAN_CHUNK, "one block chunk must be one checkpoint chunk");

// ---- dtype conversion -------------------------------------------------------------

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits) { return __uint_as_float(bits << 16); }

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                           // round to nearest even
  return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float f16_bits_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

__device__ __forceinline__ uint16_t float_to_f16_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }

__device__ __forceinline__ float half_bits_to_float(uint32_t bits, bool is_f16) {
  return is_f16 ? f16_bits_to_float((uint16_t)bits) : bf16_bits_to_float(bits & 0xffffu);
}

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- 16-item loads / stores ---------------------------------------------------------
// row points at element 0 of a (batch, dim) or (batch, group, n) row; items l0..l0+15,
// those at or past L read as 0 and are not written.

__device__ __forceinline__ void load_items(const void* row, int dtype, int l0, int L, float (&v)[kItems]) {
  const bool full = l0 + kItems <= L;
  if (dtype == MAMBA_F32) {
    const float* p = static_cast<const float*>(row) + l0;
    if (full && aligned16(p)) {
      const float4* p4 = reinterpret_cast<const float4*>(p);
#pragma unroll
      for (int k = 0; k < kItems / 4; ++k) {
        float4 t = p4[k];
        v[4 * k] = t.x, v[4 * k + 1] = t.y, v[4 * k + 2] = t.z, v[4 * k + 3] = t.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i) v[i] = l0 + i < L ? p[i] : 0.f;
    }
  } else {
    const bool is_f16 = dtype == MAMBA_F16;
    const uint16_t* p = static_cast<const uint16_t*>(row) + l0;
    if (full && aligned16(p)) {
      const uint4* p4 = reinterpret_cast<const uint4*>(p);
#pragma unroll
      for (int k = 0; k < kItems / 8; ++k) {
        uint4 t = p4[k];
        uint32_t w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          v[8 * k + 2 * j] = half_bits_to_float(w[j] & 0xffffu, is_f16);
          v[8 * k + 2 * j + 1] = half_bits_to_float(w[j] >> 16, is_f16);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i) v[i] = l0 + i < L ? half_bits_to_float(p[i], is_f16) : 0.f;
    }
  }
}

__device__ __forceinline__ void store_items(void* row, int dtype, int l0, int L, const float (&v)[kItems]) {
  const bool full = l0 + kItems <= L;
  if (dtype == MAMBA_F32) {
    float* p = static_cast<float*>(row) + l0;
    if (full && aligned16(p)) {
      float4* p4 = reinterpret_cast<float4*>(p);
#pragma unroll
      for (int k = 0; k < kItems / 4; ++k) p4[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if (l0 + i < L) p[i] = v[i];
    }
  } else {
    const bool is_f16 = dtype == MAMBA_F16;
    uint16_t h[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) h[i] = is_f16 ? float_to_f16_bits(v[i]) : float_to_bf16_bits(v[i]);
    uint16_t* p = static_cast<uint16_t*>(row) + l0;
    if (full && aligned16(p)) {
      uint4* p4 = reinterpret_cast<uint4*>(p);
#pragma unroll
      for (int k = 0; k < kItems / 8; ++k) {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = (uint32_t)h[8 * k + 2 * j] | ((uint32_t)h[8 * k + 2 * j + 1] << 16);
        p4[k] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if (l0 + i < L) p[i] = h[i];
    }
  }
}

// Row pointers: base + elems elements of esz bytes.
__device__ __forceinline__ const char* at(const void* base, int64_t elems, int esz) {
  return static_cast<const char*>(base) + elems * esz;
}
__device__ __forceinline__ char* at(void* base, int64_t elems, int esz) { return static_cast<char*>(base) + elems * esz; }

// ---- pointwise ------------------------------------------------------------------------

__device__ __forceinline__ float softplus(float x) { return x <= 20.f ? log1pf(expf(x)) : x; }
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// ---- (a, b) pair scans --------------------------------------------------------------
// A pair maps a state h to a*h + b. compose(first, then) applies `first`, then `then`.

struct Pair {
  float a, b;
};

__device__ __forceinline__ Pair compose(Pair first, Pair then) { return {then.a * first.a, then.a * first.b + then.b}; }

// Inclusive scan over lanes in increasing lane order; returns the exclusive prefix too.
__device__ __forceinline__ void warp_scan_up(Pair& p, Pair& excl, int lane) {
#pragma unroll
  for (int off = 1; off < MAMBA_WARP_SIZE; off <<= 1) {
    Pair o{MAMBA_SHFL_UP(p.a, off), MAMBA_SHFL_UP(p.b, off)};
    if (lane >= off) p = compose(o, p);
  }
  excl.a = MAMBA_SHFL_UP(p.a, 1);
  excl.b = MAMBA_SHFL_UP(p.b, 1);
  if (lane == 0) excl = {1.f, 0.f};
}

// The same in decreasing lane order (a suffix scan), for the backward recurrence.
__device__ __forceinline__ void warp_scan_down(Pair& p, Pair& excl, int lane) {
#pragma unroll
  for (int off = 1; off < MAMBA_WARP_SIZE; off <<= 1) {
    Pair o{MAMBA_SHFL_DOWN(p.a, off), MAMBA_SHFL_DOWN(p.b, off)};
    if (lane + off < MAMBA_WARP_SIZE) p = compose(o, p);
  }
  excl.a = MAMBA_SHFL_DOWN(p.a, 1);
  excl.b = MAMBA_SHFL_DOWN(p.b, 1);
  if (lane == MAMBA_WARP_SIZE - 1) excl = {1.f, 0.f};
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = MAMBA_WARP_SIZE / 2; m > 0; m >>= 1) v += MAMBA_SHFL_XOR(v, m);
  return v;
}

// ---- channel geometry -----------------------------------------------------------------

struct Channel {
  int64_t b, d, g;  // batch, dim index, B/C group
  int pos;          // thread position within the scan (0..kThreads-1 wide, lane narrow)
  bool last;        // this thread owns the chunk's last items
  bool valid;       // false: a narrow-mode warp past the last channel
};

__device__ __forceinline__ Channel locate(const mamba_ssm_fwd_params& p, bool narrow) {
  Channel c;
  const int lane = threadIdx.x % MAMBA_WARP_SIZE;
  int64_t ch;
  if (narrow) {
    ch = (int64_t)blockIdx.x * (kThreads / MAMBA_WARP_SIZE) + threadIdx.x / MAMBA_WARP_SIZE;
    c.pos = lane;
    c.last = lane == MAMBA_WARP_SIZE - 1;
  } else {
    ch = blockIdx.x;
    c.pos = threadIdx.x;
    c.last = threadIdx.x == kThreads - 1;
  }
  c.valid = ch < p.batch * p.dim;
  if (!c.valid) ch = 0;
  c.b = ch / p.dim;
  c.d = ch - c.b * p.dim;
  c.g = c.d / (p.dim / p.n_groups);
  return c;
}

// Launch geometry and argument checks shared by both launchers; returns a MAMBA_* code.
inline int plan_launch(const mamba_ssm_fwd_params* p, int* narrow, unsigned* blocks) {
  if (p->dtype != MAMBA_F32 && p->dtype != MAMBA_F16 && p->dtype != MAMBA_BF16) return MAMBA_ERR_DTYPE;
  if (p->batch < 0 || p->dim < 0 || p->seqlen < 0 || p->seqlen > (int64_t(1) << 30) || p->dstate < 1 ||
      p->dstate > kMaxDstate || p->n_groups < 1 || p->dim % p->n_groups != 0 ||
      p->n_chunks != (p->seqlen + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK)
    return MAMBA_ERR_SHAPE;
  *blocks = 0;
  const int64_t channels = p->batch * p->dim;
  if (channels == 0 || p->seqlen == 0) return MAMBA_OK;  // nothing to do
  int dev = 0, warp = 32;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, dev) != cudaSuccess)
    return MAMBA_ERR_LAUNCH;
  if (warp < 32 || kThreads % warp != 0) return MAMBA_ERR_LAUNCH;
  *narrow = p->seqlen <= (int64_t)warp * kItems;
  const int64_t per_block = *narrow ? kThreads / warp : 1;
  const int64_t n = (channels + per_block - 1) / per_block;
  if (n > 0x7fffffff) return MAMBA_ERR_SHAPE;
  *blocks = (unsigned)n;
  return MAMBA_OK;
}

}  // namespace mamba_scan
