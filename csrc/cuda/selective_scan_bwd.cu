// Selective-scan backward kernel and its launcher (no torch headers; see selective_scan.h).
//
// Chunks are visited last to first. For each state n a chunk needs two scans:
//   forward  h_l = a_l h_{l-1} + dt_l B_l u_l         from the checkpoint x[c-1]
//   reverse  q_l = a_l (dy_l C_l + q_{l+1})            from the carry of chunk c+1
// where g_l = dy_l C_l + q_{l+1} is dL/dh_l. Both are (a, b) pair scans over the same
// a_l and independent of each other, so they share one block barrier per state.
// Gradients, with ah_l = a_l h_{l-1}:
//   dA += g dt ah,  ddt += g (A ah + B u),  du += g dt B,  dB += g dt u,  dC += dy h,
//   du += D dy,  dD += dy u,  ddelta = ddt * sigmoid(delta + bias) under softplus.
#include "scan_common.cuh"

namespace mamba_scan {

__global__ void __launch_bounds__(kThreads, kBwdMinBlocks) scan_bwd_kernel(const mamba_ssm_bwd_params bp, const int narrow) {
  const mamba_ssm_fwd_params& p = bp.fwd;
  __shared__ Pair s_fwd[2][kMaxWarps], s_rev[2][kMaxWarps];  // per-warp aggregates, by state parity
  __shared__ float s_carry[2][kMaxDstate];                   // q entering a chunk from the next, by chunk parity
  // wide mode: variable dB/dC of one state go through shared memory so that the atomics
  // are issued in time order (a warp adds to 32 consecutive floats, not 32 strided ones)
  constexpr int kRow = kItems + 1;  // padded: the blocked writes are free of bank conflicts
  __shared__ float s_dBC[2][kThreads * kRow];
  const Channel ch = locate(p, narrow);
  if (!ch.valid) return;  // only in narrow mode (whole warps), which has no block barrier
  constexpr int n_warps = kThreads / MAMBA_WARP_SIZE;
  const int lane = threadIdx.x % MAMBA_WARP_SIZE, warp = threadIdx.x / MAMBA_WARP_SIZE;
  const int L = (int)p.seqlen;
  const int64_t N = p.dstate;
  const int dt = p.dtype, esz = dt == MAMBA_F32 ? 4 : 2;
  const bool var_B = p.is_variable_B, var_C = p.is_variable_C;

  const char* u_row = at(p.u_ptr, ch.b * p.u_batch_stride + ch.d * p.u_d_stride, esz);
  const char* delta_row = at(p.delta_ptr, ch.b * p.delta_batch_stride + ch.d * p.delta_d_stride, esz);
  const char* dout_row = at(bp.dout_ptr, ch.b * bp.dout_batch_stride + ch.d * bp.dout_d_stride, esz);
  char* du_row = at(bp.du_ptr, ch.b * bp.du_batch_stride + ch.d * bp.du_d_stride, esz);
  char* ddelta_row = at(bp.ddelta_ptr, ch.b * bp.ddelta_batch_stride + ch.d * bp.ddelta_d_stride, esz);
  const float* A = static_cast<const float*>(p.A_ptr) + ch.d * p.A_d_stride;
  const float Dv = p.D_ptr ? static_cast<const float*>(p.D_ptr)[ch.d] : 0.f;
  const float bias = p.delta_bias_ptr ? static_cast<const float*>(p.delta_bias_ptr)[ch.d] : 0.f;
  const char* B_var = at(p.B_ptr, ch.b * p.B_batch_stride + ch.g * p.B_group_stride, esz);
  const char* C_var = at(p.C_ptr, ch.b * p.C_batch_stride + ch.g * p.C_group_stride, esz);
  const float* B_const = static_cast<const float*>(p.B_ptr) + ch.d * p.B_d_stride;
  const float* C_const = static_cast<const float*>(p.C_ptr) + ch.d * p.C_d_stride;
  const float* x = static_cast<const float*>(p.x_ptr) + (ch.b * p.dim + ch.d) * p.n_chunks * N;
  // gradient outputs are fp32 and contiguous: dA (dim, N); dB/dC (dim, N) or (batch, groups, N, L)
  float* dA = static_cast<float*>(bp.dA_ptr) + ch.d * N;
  float* dB_var = static_cast<float*>(bp.dB_ptr) + (ch.b * p.n_groups + ch.g) * N * L;
  float* dC_var = static_cast<float*>(bp.dC_ptr) + (ch.b * p.n_groups + ch.g) * N * L;
  float* dB_const = static_cast<float*>(bp.dB_ptr) + ch.d * N;
  float* dC_const = static_cast<float*>(bp.dC_ptr) + ch.d * N;

  float dD_acc = 0.f, dbias_acc = 0.f;
  int par = 0;
  for (int64_t c = p.n_chunks - 1; c >= 0; --c) {
    const int l0 = (int)c * MAMBA_SCAN_CHUNK + ch.pos * kItems;
    float u[kItems], dlt[kItems], dy[kItems], du[kItems], ddt[kItems];
    load_items(u_row, dt, l0, L, u);
    load_items(delta_row, dt, l0, L, dlt);
    load_items(dout_row, dt, l0, L, dy);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      float v = dlt[i] + bias;
      if (p.delta_softplus) v = softplus(v);
      dlt[i] = l0 + i < L ? v : 0.f;  // padding steps: a=1, b=0 and dy=0, so they add nothing
    }
    if (p.z_ptr) {  // out_z = y * silu(z): dz from y, and dy = dout * silu(z)
      float z[kItems];
      load_items(at(p.z_ptr, ch.b * p.z_batch_stride + ch.d * p.z_d_stride, esz), dt, l0, L, z);
      load_items(at(p.out_ptr, ch.b * p.out_batch_stride + ch.d * p.out_d_stride, esz), dt, l0, L, ddt);
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const float s = sigmoid(z[i]);
        const float dz = dy[i] * ddt[i] * s * (1.f + z[i] * (1.f - s));
        dy[i] *= z[i] * s;
        ddt[i] = dz;
      }
      store_items(at(bp.dz_ptr, ch.b * bp.dz_batch_stride + ch.d * bp.dz_d_stride, esz), dt, l0, L, ddt);
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      du[i] = Dv * dy[i];
      dD_acc += dy[i] * u[i];
      ddt[i] = 0.f;
    }

    for (int64_t n = 0; n < N; ++n) {
      const float An = A[n * p.A_dstate_stride];
      const float An2 = An * kLog2e;
      float Bv[kItems], Cv[kItems], a[kItems];
      if (var_B) {
        load_items(B_var + n * p.B_dstate_stride * esz, dt, l0, L, Bv);
      } else {
        const float s = B_const[n * p.B_dstate_stride];
#pragma unroll
        for (int i = 0; i < kItems; ++i) Bv[i] = s;
      }
      if (var_C) {
        load_items(C_var + n * p.C_dstate_stride * esz, dt, l0, L, Cv);
      } else {
        const float s = C_const[n * p.C_dstate_stride];
#pragma unroll
        for (int i = 0; i < kItems; ++i) Cv[i] = s;
      }

      Pair fagg{1.f, 0.f}, ragg{1.f, 0.f};
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        a[i] = exp2f(dlt[i] * An2);
        fagg = {a[i] * fagg.a, a[i] * fagg.b + dlt[i] * u[i] * Bv[i]};
      }
#pragma unroll
      for (int i = kItems - 1; i >= 0; --i) ragg = {a[i] * ragg.a, a[i] * (ragg.b + dy[i] * Cv[i])};
      Pair fexcl, rexcl;
      warp_scan_up(fagg, fexcl, lane);
      warp_scan_down(ragg, rexcl, lane);

      float h = 0.f, q = 0.f;  // state entering / q leaving this warp's steps
      if (!narrow) {
        if (lane == MAMBA_WARP_SIZE - 1) s_fwd[par][warp] = fagg;
        if (lane == 0) s_rev[par][warp] = ragg;
        __syncthreads();
        if (c > 0) h = x[(c - 1) * N + n];
        if (c < p.n_chunks - 1) q = s_carry[c & 1][n];
#pragma unroll
        for (int w = 0; w < n_warps - 1; ++w)
          if (w < warp) h = s_fwd[par][w].a * h + s_fwd[par][w].b;
#pragma unroll
        for (int w = n_warps - 1; w > 0; --w)
          if (w > warp) q = s_rev[par][w].a * q + s_rev[par][w].b;
        par ^= 1;
      }
      const float h_in = fexcl.a * h + fexcl.b;  // state entering this thread's steps
      q = rexcl.a * q + rexcl.b;

      // reverse pass first (g replaces C), then the forward replay: fewer live registers
      float g[kItems];
#pragma unroll
      for (int i = kItems - 1; i >= 0; --i) {
        g[i] = dy[i] * Cv[i] + q;
        q = a[i] * g[i];
      }
      float dA_p = 0.f, dB_p = 0.f, dC_p = 0.f;
      h = h_in;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const float ah = a[i] * h;
        const float dtu = dlt[i] * u[i];
        h = ah + dtu * Bv[i];
        dA_p += g[i] * dlt[i] * ah;
        ddt[i] += g[i] * (An * ah + Bv[i] * u[i]);
        du[i] += g[i] * dlt[i] * Bv[i];
        const float dBi = g[i] * dtu, dCi = dy[i] * h;
        if (!var_B) dB_p += dBi;
        else if (!narrow) s_dBC[0][ch.pos * kRow + i] = dBi;
        else if (l0 + i < L) atomicAdd(dB_var + n * L + l0 + i, dBi);
        if (!var_C) dC_p += dCi;
        else if (!narrow) s_dBC[1][ch.pos * kRow + i] = dCi;
        else if (l0 + i < L) atomicAdd(dC_var + n * L + l0 + i, dCi);
      }
      if (!narrow && (var_B || var_C)) {
        // the next overwrite of s_dBC comes after the next state's scan barrier
        __syncthreads();
        const int64_t c0 = c * MAMBA_SCAN_CHUNK;
#pragma unroll 4
        for (int j = 0; j < kItems; ++j) {
          const int e = j * kThreads + ch.pos;  // time step within the chunk
          if (c0 + e >= L) break;
          const int at_smem = (e / kItems) * kRow + e % kItems;
          if (var_B) atomicAdd(dB_var + n * L + c0 + e, s_dBC[0][at_smem]);
          if (var_C) atomicAdd(dC_var + n * L + c0 + e, s_dBC[1][at_smem]);
        }
      }
      if (!narrow && ch.pos == 0 && c > 0) s_carry[(c - 1) & 1][n] = q;  // q at the chunk's first step

      dA_p = warp_sum(dA_p);
      if (!var_B) dB_p = warp_sum(dB_p);
      if (!var_C) dC_p = warp_sum(dC_p);
      if (lane == 0) {
        atomicAdd(dA + n, dA_p);
        if (!var_B) atomicAdd(dB_const + n, dB_p);
        if (!var_C) atomicAdd(dC_const + n, dC_p);
      }
    }

    if (p.delta_softplus) {  // d softplus(v)/dv = sigmoid(v)
      float raw[kItems];
      load_items(delta_row, dt, l0, L, raw);
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if ((raw[i] + bias) <= 20.f) ddt[i] *= sigmoid(raw[i] + bias);
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) dbias_acc += ddt[i];
    store_items(du_row, dt, l0, L, du);
    store_items(ddelta_row, dt, l0, L, ddt);
  }

  if (bp.dD_ptr) dD_acc = warp_sum(dD_acc);
  if (bp.ddelta_bias_ptr) dbias_acc = warp_sum(dbias_acc);
  if (lane == 0) {
    if (bp.dD_ptr) atomicAdd(static_cast<float*>(bp.dD_ptr) + ch.d, dD_acc);
    if (bp.ddelta_bias_ptr) atomicAdd(static_cast<float*>(bp.ddelta_bias_ptr) + ch.d, dbias_acc);
  }
}

}  // namespace mamba_scan

extern "C" int mamba_ssm_bwd_cuda(const mamba_ssm_bwd_params* p, void* stream) {
  int narrow = 0;
  unsigned blocks = 0;
  const int rc = mamba_scan::plan_launch(&p->fwd, &narrow, &blocks);
  if (rc != MAMBA_OK || blocks == 0) return rc;
  if (p->fwd.z_ptr && (!p->dz_ptr || !p->fwd.out_ptr)) return MAMBA_ERR_SHAPE;
  MAMBA_LAUNCH(mamba_scan::scan_bwd_kernel, blocks, mamba_scan::kThreads, static_cast<cudaStream_t>(stream), *p, narrow);
  return cudaGetLastError() == cudaSuccess ? MAMBA_OK : MAMBA_ERR_LAUNCH;
}
