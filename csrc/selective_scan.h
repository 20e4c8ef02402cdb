// The contract between the torch binding and the scan kernels.
//
// Kernel translation units (selective_scan_cpu.cpp, cuda/*.cu) include this header
// and nothing from torch, so one compile of them serves every torch, Python and
// C++-ABI variant of one toolkit (the farm reuses the objects). The binding
// (binding.cpp, binding_stable.cpp) validates tensors, allocates outputs, fills
// these structs and calls the launchers below.
//
// Layout conventions (all strides in elements; the last dimension, seqlen, is
// contiguous: the binding makes it so):
//   u, delta, z, out, out_z, du, ddelta, dz, dout : (batch, dim, seqlen)
//   A                                             : (dim, dstate)          fp32
//   B, C constant                                 : (dim, dstate)          fp32
//   B, C variable                                 : (batch, n_groups, dstate, seqlen), input dtype
//        (the (batch, dstate, seqlen) layout is n_groups == 1)
//   D, delta_bias                                 : (dim,)                 fp32
//   x (chunk checkpoints for the backward pass)   : (batch, dim, n_chunks, dstate) fp32,
//        x[..., c, :] is the state after chunk c, so x[..., n_chunks-1, :] is the last state.
//   dA, dB/dC constant, dD, ddelta_bias           : fp32, accumulated (the binding zero-fills)
//   dB, dC variable                               : (batch, n_groups, dstate, seqlen) fp32
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Chunk length of the scan along seqlen; one checkpoint of the state per chunk.
#define MAMBA_SCAN_CHUNK 2048

typedef enum { MAMBA_F32 = 0, MAMBA_F16 = 1, MAMBA_BF16 = 2 } mamba_dtype;

typedef struct {
  int64_t batch, dim, seqlen, dstate, n_groups, n_chunks;
  int dtype;  // mamba_dtype of u, delta, z, out, out_z and variable B/C
  int is_variable_B, is_variable_C, delta_softplus;

  int64_t u_batch_stride, u_d_stride;
  int64_t delta_batch_stride, delta_d_stride;
  int64_t A_d_stride, A_dstate_stride;
  int64_t B_batch_stride, B_group_stride, B_d_stride, B_dstate_stride;  // B_d_stride: constant B
  int64_t C_batch_stride, C_group_stride, C_d_stride, C_dstate_stride;
  int64_t z_batch_stride, z_d_stride;
  int64_t out_batch_stride, out_d_stride;
  int64_t out_z_batch_stride, out_z_d_stride;

  const void *u_ptr, *delta_ptr, *A_ptr, *B_ptr, *C_ptr;
  const void *D_ptr;           // may be NULL
  const void *delta_bias_ptr;  // may be NULL
  const void *z_ptr;           // may be NULL: no gating
  void *out_ptr;               // y before gating
  void *out_z_ptr;             // y * silu(z); NULL when z_ptr is NULL
  void *x_ptr;                 // chunk checkpoints, fp32, contiguous (batch, dim, n_chunks, dstate)
} mamba_ssm_fwd_params;

typedef struct {
  mamba_ssm_fwd_params fwd;  // the forward inputs (out_ptr/out_z_ptr are inputs here: y before gating)

  int64_t dout_batch_stride, dout_d_stride;
  int64_t du_batch_stride, du_d_stride;
  int64_t ddelta_batch_stride, ddelta_d_stride;
  int64_t dz_batch_stride, dz_d_stride;

  const void *dout_ptr;   // gradient w.r.t. the returned output (out_z when gated)
  void *du_ptr, *ddelta_ptr;
  void *dA_ptr;           // fp32 (dim, dstate)
  void *dB_ptr, *dC_ptr;  // fp32, shape of B/C
  void *dD_ptr;           // fp32 (dim,), NULL when D is NULL
  void *ddelta_bias_ptr;  // fp32 (dim,), NULL when delta_bias is NULL
  void *dz_ptr;           // input dtype, NULL when z is NULL
} mamba_ssm_bwd_params;

// Return 0 on success, otherwise a negative code; mamba_ssm_error_string() explains it.
#define MAMBA_OK 0
#define MAMBA_ERR_DTYPE -1
#define MAMBA_ERR_SHAPE -2
#define MAMBA_ERR_LAUNCH -3

// Defined once, in selective_scan_cpu.cpp (built into every variant); CUDA TUs must not define it.
const char* mamba_ssm_error_string(int code);

// CPU: process channels d in [d_begin, d_end) for every batch; the binding
// parallelises over channels with at::parallel_for, so per-channel gradients
// (dA, dD, ddelta_bias, constant dB/dC) never race. Variable dB/dC are shared
// across channels of a group: the kernel must reduce them safely.
int mamba_ssm_fwd_cpu(const mamba_ssm_fwd_params* p, int64_t d_begin, int64_t d_end);
int mamba_ssm_bwd_cpu(const mamba_ssm_bwd_params* p, int64_t d_begin, int64_t d_end);

// CUDA/HIP: asynchronous on `stream` (a cudaStream_t / hipStream_t passed as void*).
int mamba_ssm_fwd_cuda(const mamba_ssm_fwd_params* p, void* stream);
int mamba_ssm_bwd_cuda(const mamba_ssm_bwd_params* p, void* stream);

#ifdef __cplusplus
}
#endif
