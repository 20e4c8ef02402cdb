// Selective-scan forward kernel and its launcher (no torch headers; see selective_scan.h).
//
// Per channel (b, d) and chunk c, with dt = softplus?(delta + delta_bias):
//   h_l = exp(dt_l * A[d,n]) * h_{l-1} + dt_l * B_l[n] * u_l        for each state n
//   y_l = D[d] * u_l + sum_n C_l[n] * h_l[n];   out_z = y * silu(z)
// The recurrence over l is a scan of (a, b) pairs: each thread folds its kItems
// steps into one pair, a warp shuffle scan and (wide mode) a cross-warp pass over
// shared memory give each thread the state entering its steps, which it then
// replays. The state after each chunk is written to x (the backward checkpoints).
#include "scan_common.cuh"

namespace mamba_scan {

__global__ void __launch_bounds__(kThreads, kFwdMinBlocks) scan_fwd_kernel(const mamba_ssm_fwd_params p, const int narrow) {
  __shared__ Pair s_tot[2][kMaxWarps];  // per-warp aggregates, double-buffered by state
  const Channel ch = locate(p, narrow);
  if (!ch.valid) return;  // only in narrow mode (whole warps), which has no block barrier
  constexpr int n_warps = kThreads / MAMBA_WARP_SIZE;
  const int lane = threadIdx.x % MAMBA_WARP_SIZE, warp = threadIdx.x / MAMBA_WARP_SIZE;
  const int L = (int)p.seqlen;
  const int64_t N = p.dstate;
  const int dt = p.dtype, esz = dt == MAMBA_F32 ? 4 : 2;

  const char* u_row = at(p.u_ptr, ch.b * p.u_batch_stride + ch.d * p.u_d_stride, esz);
  const char* delta_row = at(p.delta_ptr, ch.b * p.delta_batch_stride + ch.d * p.delta_d_stride, esz);
  const float* A = static_cast<const float*>(p.A_ptr) + ch.d * p.A_d_stride;
  const float Dv = p.D_ptr ? static_cast<const float*>(p.D_ptr)[ch.d] : 0.f;
  const float bias = p.delta_bias_ptr ? static_cast<const float*>(p.delta_bias_ptr)[ch.d] : 0.f;
  // B/C: variable rows (batch, group, n, l) in the input dtype, or constant fp32 (dim, n)
  const char* B_var = at(p.B_ptr, ch.b * p.B_batch_stride + ch.g * p.B_group_stride, esz);
  const char* C_var = at(p.C_ptr, ch.b * p.C_batch_stride + ch.g * p.C_group_stride, esz);
  const float* B_const = static_cast<const float*>(p.B_ptr) + ch.d * p.B_d_stride;
  const float* C_const = static_cast<const float*>(p.C_ptr) + ch.d * p.C_d_stride;
  float* x = static_cast<float*>(p.x_ptr) + (ch.b * p.dim + ch.d) * p.n_chunks * N;

  int par = 0;
  for (int64_t c = 0; c < p.n_chunks; ++c) {
    const int l0 = (int)c * MAMBA_SCAN_CHUNK + ch.pos * kItems;
    float dlt[kItems], du[kItems], y[kItems];
    load_items(u_row, dt, l0, L, du);
    load_items(delta_row, dt, l0, L, dlt);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      float v = dlt[i] + bias;
      if (p.delta_softplus) v = softplus(v);
      dlt[i] = l0 + i < L ? v : 0.f;  // padding steps become the identity (a=1, b=0)
      y[i] = Dv * du[i];
      du[i] *= dlt[i];  // dt * u, shared by every state
    }

    for (int64_t n = 0; n < N; ++n) {
      const float An = A[n * p.A_dstate_stride] * kLog2e;
      float Bv[kItems], Cv[kItems];
      if (p.is_variable_B) {
        load_items(B_var + n * p.B_dstate_stride * esz, dt, l0, L, Bv);
      } else {
        const float s = B_const[n * p.B_dstate_stride];
#pragma unroll
        for (int i = 0; i < kItems; ++i) Bv[i] = s;
      }
      if (p.is_variable_C) {
        load_items(C_var + n * p.C_dstate_stride * esz, dt, l0, L, Cv);
      } else {
        const float s = C_const[n * p.C_dstate_stride];
#pragma unroll
        for (int i = 0; i < kItems; ++i) Cv[i] = s;
      }

      float a[kItems];
      Pair agg{1.f, 0.f};
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        a[i] = exp2f(dlt[i] * An);
        Bv[i] *= du[i];  // now the pair's b
        agg = {a[i] * agg.a, a[i] * agg.b + Bv[i]};
      }
      Pair excl;
      warp_scan_up(agg, excl, lane);

      float h = 0.f;  // state entering this warp's steps
      if (!narrow) {
        if (lane == MAMBA_WARP_SIZE - 1) s_tot[par][warp] = agg;
        __syncthreads();  // also orders the x[c-1] write below before this read
        if (c > 0) h = x[(c - 1) * N + n];
#pragma unroll
        for (int w = 0; w < n_warps - 1; ++w)
          if (w < warp) h = s_tot[par][w].a * h + s_tot[par][w].b;
        par ^= 1;
      }
      h = excl.a * h + excl.b;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        h = a[i] * h + Bv[i];
        y[i] += h * Cv[i];
      }
      if (ch.last) x[c * N + n] = h;
    }

    store_items(at(p.out_ptr, ch.b * p.out_batch_stride + ch.d * p.out_d_stride, esz), dt, l0, L, y);
    if (p.z_ptr) {
      float z[kItems];
      load_items(at(p.z_ptr, ch.b * p.z_batch_stride + ch.d * p.z_d_stride, esz), dt, l0, L, z);
#pragma unroll
      for (int i = 0; i < kItems; ++i) y[i] *= z[i] * sigmoid(z[i]);
      store_items(at(p.out_z_ptr, ch.b * p.out_z_batch_stride + ch.d * p.out_z_d_stride, esz), dt, l0, L, y);
    }
  }
}

}  // namespace mamba_scan

extern "C" int mamba_ssm_fwd_cuda(const mamba_ssm_fwd_params* p, void* stream) {
  int narrow = 0;
  unsigned blocks = 0;
  const int rc = mamba_scan::plan_launch(p, &narrow, &blocks);
  if (rc != MAMBA_OK || blocks == 0) return rc;
  if (p->z_ptr && !p->out_z_ptr) return MAMBA_ERR_SHAPE;
  MAMBA_LAUNCH(mamba_scan::scan_fwd_kernel, blocks, mamba_scan::kThreads, static_cast<cudaStream_t>(stream), *p, narrow);
  return cudaGetLastError() == cudaSuccess ? MAMBA_OK : MAMBA_ERR_LAUNCH;
}
