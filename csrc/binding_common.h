// What binding.cpp (classic ATen) and binding_stable.cpp (stable ABI) share: input
// validation, the C parameter structs of selective_scan.h, output allocation and the
// kernel calls, written once as templates over a small traits struct T that each
// binding supplies. This header includes no torch header on purpose: each binding
// includes its own torch API first, so the stable binding still sees only stable
// symbols. Before including it, a binding defines MAMBA_CHECK(cond, msg...) (how a
// failed check raises; the message is the streamed args, byte-for-byte) and T with:
//   Tensor, OptTensor, ScalarType, IntRef; kFloat, kHalf, kBFloat16;
//   shape(t), dev(t)         printable sizes and device ("[2, 3]", "cuda:0");
//   contiguous(t), to(t, dtype), cptr(t) / mptr(t) (const / mutable data pointer);
//   empty(like, size, dtype), zeros_f32(like, size) on like's device;
//   guard(t)                 an RAII device guard (none for CPU tensors);
//   parallel_for(b, e, grain, fn);
//   kCuda, and when true cuda_stream(t) (the current stream as void*).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "selective_scan.h"

#ifndef MAMBA_CHECK
#error "define MAMBA_CHECK(cond, ...) before including binding_common.h"
#endif

namespace mamba_ssm_binding {

constexpr const char* kFwd = "mamba_ssm.selective_scan_fwd";
constexpr const char* kBwd = "mamba_ssm.selective_scan_bwd";

template <class T>
int to_mamba_dtype(typename T::ScalarType t) {
  if (t == T::kFloat) return MAMBA_F32;
  if (t == T::kHalf) return MAMBA_F16;
  if (t == T::kBFloat16) return MAMBA_BF16;
  return -1;
}

// Shape equality by dimension: the stable API's IntHeaderOnlyArrayRef has no operator== in torch
// 2.10's headers, and the stable wheel compiles against any torch from its floor (2.10) on.
template <class Tensor>
bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return false;
  for (int64_t i = 0; i < a.dim(); ++i)
    if (a.size(i) != b.size(i)) return false;
  return true;
}

// The kernels need the seqlen dimension contiguous; anything else is copied once.
template <class T>
typename T::Tensor last_contig(const typename T::Tensor& t) {
  return t.stride(-1) == 1 ? t : T::contiguous(t);
}

template <class T>
typename T::Tensor check_bc(const typename T::Tensor& t, const char* name, const typename T::Tensor& u, int64_t dim,
                            int64_t dstate) {
  const int64_t batch = u.size(0), L = u.size(2);
  MAMBA_CHECK(t.device() == u.device(), kFwd, ": ", name, " is on ", T::dev(t), " but u is on ", T::dev(u));
  if (t.dim() == 2) {
    MAMBA_CHECK(t.size(0) == dim && t.size(1) == dstate, kFwd, ": constant ", name, " must have shape (dim, dstate) = (",
                dim, ", ", dstate, "), got ", T::shape(t));
    MAMBA_CHECK(t.scalar_type() == T::kFloat, kFwd, ": constant ", name, " (dim, dstate) must be float32, got ",
                t.scalar_type(), "; pass it as B.float()");
    return t;
  }
  MAMBA_CHECK(t.dim() == 3 || t.dim() == 4, kFwd, ": ", name,
              " must be (dim, dstate), (batch, dstate, seqlen) or (batch, groups, dstate, seqlen), got ", T::shape(t));
  const int64_t groups = t.dim() == 4 ? t.size(1) : 1;
  const int64_t n_ax = t.dim() - 2;
  MAMBA_CHECK(t.size(0) == batch && t.size(n_ax) == dstate && t.size(n_ax + 1) == L, kFwd, ": variable ", name,
              " must have batch ", batch, ", dstate ", dstate, " and seqlen ", L, ", got ", T::shape(t));
  MAMBA_CHECK(groups >= 1 && dim % groups == 0, kFwd, ": dim (", dim, ") must be a multiple of the number of groups of ",
              name, " (", groups, ")");
  MAMBA_CHECK(t.scalar_type() == u.scalar_type(), kFwd, ": variable ", name, " must have u's dtype ", u.scalar_type(),
              ", got ", t.scalar_type());
  return last_contig<T>(t);
}

template <class T>
void check_vec(const typename T::OptTensor& t, const char* name, const typename T::Tensor& u, int64_t dim) {
  if (!t.has_value()) return;
  MAMBA_CHECK(t->device() == u.device(), kFwd, ": ", name, " is on ", T::dev(*t), " but u is on ", T::dev(u));
  MAMBA_CHECK(t->dim() == 1 && t->size(0) == dim, kFwd, ": ", name, " must have shape (dim,) = (", dim, "), got ",
              T::shape(*t));
  MAMBA_CHECK(t->scalar_type() == T::kFloat, kFwd, ": ", name, " must be float32, got ", t->scalar_type());
}

template <class T>
struct Checked {
  typename T::Tensor u, delta, A, B, C, z;  // z undefined: no gating
  typename T::OptTensor D, delta_bias;
  int64_t batch, dim, L, dstate;
};

template <class T>
Checked<T> check_inputs(const typename T::Tensor& u_, const typename T::Tensor& delta_, const typename T::Tensor& A,
                        const typename T::Tensor& B_, const typename T::Tensor& C_, const typename T::OptTensor& D,
                        const typename T::OptTensor& z_, const typename T::OptTensor& delta_bias) {
  Checked<T> c;
  MAMBA_CHECK(u_.dim() == 3, kFwd, ": u must be (batch, dim, seqlen), got ", T::shape(u_));
  MAMBA_CHECK(to_mamba_dtype<T>(u_.scalar_type()) >= 0, kFwd, ": u must be float32, float16 or bfloat16, got ",
              u_.scalar_type());
  MAMBA_CHECK(same_shape(delta_, u_), kFwd, ": delta must have u's shape ", T::shape(u_), ", got ",
              T::shape(delta_));
  MAMBA_CHECK(delta_.scalar_type() == u_.scalar_type(), kFwd, ": delta must have u's dtype ", u_.scalar_type(),
              ", got ", delta_.scalar_type());
  MAMBA_CHECK(delta_.device() == u_.device(), kFwd, ": delta is on ", T::dev(delta_), " but u is on ", T::dev(u_));
  MAMBA_CHECK(u_.size(2) > 0, kFwd, ": seqlen must be at least 1");
  MAMBA_CHECK(A.dim() == 2 && A.size(0) == u_.size(1), kFwd, ": A must be (dim, dstate) with dim = ", u_.size(1),
              ", got ", T::shape(A));
  MAMBA_CHECK(A.scalar_type() == T::kFloat, kFwd, ": A must be real float32 (complex A is not supported), got ",
              A.scalar_type());
  MAMBA_CHECK(A.device() == u_.device(), kFwd, ": A is on ", T::dev(A), " but u is on ", T::dev(u_));
  c.batch = u_.size(0);
  c.dim = u_.size(1);
  c.L = u_.size(2);
  c.dstate = A.size(1);
  MAMBA_CHECK(c.dstate >= 1, kFwd, ": dstate (A.size(1)) must be at least 1");
  c.u = last_contig<T>(u_);
  c.delta = last_contig<T>(delta_);
  c.A = A;
  c.B = check_bc<T>(B_, "B", u_, c.dim, c.dstate);
  c.C = check_bc<T>(C_, "C", u_, c.dim, c.dstate);
  check_vec<T>(D, "D", u_, c.dim);
  check_vec<T>(delta_bias, "delta_bias", u_, c.dim);
  // The kernels read D and delta_bias as plain arrays: a strided view (D[::2]) is copied once.
  if (D.has_value()) c.D = last_contig<T>(*D);
  if (delta_bias.has_value()) c.delta_bias = last_contig<T>(*delta_bias);
  if (z_.has_value()) {
    MAMBA_CHECK(same_shape(*z_, u_) && z_->scalar_type() == u_.scalar_type() && z_->device() == u_.device(), kFwd,
                ": z must match u in shape, dtype and device (", T::shape(u_), ", ", u_.scalar_type(), "), got ",
                T::shape(*z_), ", ", z_->scalar_type());
    c.z = last_contig<T>(*z_);
  }
  return c;
}

template <class T>
void fill_bc(const typename T::Tensor& t, bool& variable, int64_t& bs, int64_t& gs, int64_t& ds, int64_t& ns,
             const void*& ptr) {
  variable = t.dim() >= 3;
  ptr = T::cptr(t);
  if (!variable) {
    bs = gs = 0;
    ds = t.stride(0);
    ns = t.stride(1);
  } else if (t.dim() == 3) {
    bs = t.stride(0);
    gs = 0;
    ds = 0;
    ns = t.stride(1);
  } else {
    bs = t.stride(0);
    gs = t.stride(1);
    ds = 0;
    ns = t.stride(2);
  }
}

template <class T>
mamba_ssm_fwd_params make_fwd(const Checked<T>& c, bool delta_softplus) {
  mamba_ssm_fwd_params p;
  std::memset(&p, 0, sizeof(p));
  p.batch = c.batch;
  p.dim = c.dim;
  p.seqlen = c.L;
  p.dstate = c.dstate;
  p.n_chunks = (c.L + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK;
  p.dtype = to_mamba_dtype<T>(c.u.scalar_type());
  p.delta_softplus = delta_softplus ? 1 : 0;
  p.u_batch_stride = c.u.stride(0);
  p.u_d_stride = c.u.stride(1);
  p.delta_batch_stride = c.delta.stride(0);
  p.delta_d_stride = c.delta.stride(1);
  p.A_d_stride = c.A.stride(0);
  p.A_dstate_stride = c.A.stride(1);
  bool vb, vc;
  fill_bc<T>(c.B, vb, p.B_batch_stride, p.B_group_stride, p.B_d_stride, p.B_dstate_stride, p.B_ptr);
  fill_bc<T>(c.C, vc, p.C_batch_stride, p.C_group_stride, p.C_d_stride, p.C_dstate_stride, p.C_ptr);
  p.is_variable_B = vb;
  p.is_variable_C = vc;
  const int64_t gb = c.B.dim() == 4 ? c.B.size(1) : 1, gc = c.C.dim() == 4 ? c.C.size(1) : 1;
  MAMBA_CHECK(!(vb && vc) || gb == gc, kFwd, ": B and C must have the same number of groups, got ", gb, " and ", gc);
  p.n_groups = vb ? gb : vc ? gc : 1;
  p.u_ptr = T::cptr(c.u);
  p.delta_ptr = T::cptr(c.delta);
  p.A_ptr = T::cptr(c.A);
  p.D_ptr = c.D.has_value() ? T::cptr(*c.D) : nullptr;
  p.delta_bias_ptr = c.delta_bias.has_value() ? T::cptr(*c.delta_bias) : nullptr;
  if (c.z.defined()) {
    p.z_ptr = T::cptr(c.z);
    p.z_batch_stride = c.z.stride(0);
    p.z_d_stride = c.z.stride(1);
  }
  return p;
}

inline void check_rc(int rc, const char* op, const char* where) {
  MAMBA_CHECK(rc == MAMBA_OK, op, " (", where, "): ", mamba_ssm_error_string(rc));
}

// Per-channel work is batch * seqlen * dstate; keep tiny problems on one thread.
template <class T>
int64_t grain_for(const Checked<T>& c) {
  const int64_t work = std::max<int64_t>(1, c.batch * c.L * c.dstate);
  return std::max<int64_t>(1, (int64_t{1} << 15) / work);
}

// Overloads so that a build without CUDA kernels never references their launchers.
inline int run_cpu_kernel(const mamba_ssm_fwd_params* p, int64_t d0, int64_t d1) {
  return mamba_ssm_fwd_cpu(p, d0, d1);
}
inline int run_cpu_kernel(const mamba_ssm_bwd_params* p, int64_t d0, int64_t d1) {
  return mamba_ssm_bwd_cpu(p, d0, d1);
}
inline int run_cuda_kernel(const mamba_ssm_fwd_params* p, void* stream) { return mamba_ssm_fwd_cuda(p, stream); }
inline int run_cuda_kernel(const mamba_ssm_bwd_params* p, void* stream) { return mamba_ssm_bwd_cuda(p, stream); }

// CPU kernels in parallel over dim; device tensors go to the CUDA/HIP launcher.
template <class T, class Params>
void run(const Params& p, const Checked<T>& c, const char* op) {
  if (c.u.is_cpu()) {
    std::atomic<int> err{MAMBA_OK};
    T::parallel_for(0, c.dim, grain_for(c), [&](int64_t d0, int64_t d1) {
      const int rc = run_cpu_kernel(&p, d0, d1);
      if (rc != MAMBA_OK) err = rc;
    });
    check_rc(err.load(), op, "CPU");
  } else if constexpr (T::kCuda) {
    check_rc(run_cuda_kernel(&p, T::cuda_stream(c.u)), op, "CUDA");
  } else {
    MAMBA_CHECK(false, op, ": this build of mamba_ssm has no CUDA kernels (built with MAMBA_SKIP_CUDA_BUILD?)");
  }
}

template <class T>
std::tuple<typename T::Tensor, typename T::Tensor, typename T::Tensor> scan_fwd(
    const typename T::Tensor& u, const typename T::Tensor& delta, const typename T::Tensor& A,
    const typename T::Tensor& B, const typename T::Tensor& C, const typename T::OptTensor& D,
    const typename T::OptTensor& z, const typename T::OptTensor& delta_bias, bool delta_softplus) {
  using Tensor = typename T::Tensor;
  Checked<T> c = check_inputs<T>(u, delta, A, B, C, D, z, delta_bias);
  auto guard = T::guard(c.u);
  mamba_ssm_fwd_params p = make_fwd(c, delta_softplus);
  const auto dt = c.u.scalar_type();
  Tensor out = T::empty(c.u, {c.batch, c.dim, c.L}, dt);
  Tensor x = T::empty(c.u, {c.batch, c.dim, p.n_chunks, c.dstate}, T::kFloat);
  Tensor out_z = c.z.defined() ? T::empty(c.u, {c.batch, c.dim, c.L}, dt) : T::empty(c.u, {0}, dt);
  p.out_ptr = T::mptr(out);
  p.out_batch_stride = out.stride(0);
  p.out_d_stride = out.stride(1);
  p.x_ptr = T::mptr(x);
  if (c.z.defined()) {
    p.out_z_ptr = T::mptr(out_z);
    p.out_z_batch_stride = out_z.stride(0);
    p.out_z_d_stride = out_z.stride(1);
  }
  run(p, c, kFwd);
  return {out, x, out_z};
}

template <class T>
std::tuple<typename T::Tensor, typename T::Tensor, typename T::Tensor, typename T::Tensor, typename T::Tensor,
           typename T::Tensor, typename T::Tensor, typename T::Tensor>
scan_bwd(const typename T::Tensor& u, const typename T::Tensor& delta, const typename T::Tensor& A,
         const typename T::Tensor& B, const typename T::Tensor& C, const typename T::OptTensor& D,
         const typename T::OptTensor& z, const typename T::OptTensor& delta_bias, const typename T::Tensor& dout_,
         const typename T::Tensor& x, const typename T::OptTensor& out, bool delta_softplus) {
  using Tensor = typename T::Tensor;
  Checked<T> c = check_inputs<T>(u, delta, A, B, C, D, z, delta_bias);
  auto guard = T::guard(c.u);
  MAMBA_CHECK(same_shape(dout_, u) && dout_.scalar_type() == u.scalar_type(), kBwd,
              ": dout must match u in shape and dtype (", T::shape(u), ", ", u.scalar_type(), "), got ",
              T::shape(dout_), ", ", dout_.scalar_type());
  const int64_t n_chunks = (c.L + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK;
  MAMBA_CHECK(x.scalar_type() == T::kFloat && x.dim() == 4 && x.size(0) == c.batch && x.size(1) == c.dim &&
                  x.size(2) == n_chunks && x.size(3) == c.dstate,
              kBwd, ": x must be the float32 checkpoints (batch, dim, n_chunks, dstate) = (", c.batch, ", ", c.dim, ", ",
              n_chunks, ", ", c.dstate, ") returned by selective_scan_fwd, got ", T::shape(x), " ", x.scalar_type());
  MAMBA_CHECK(!c.z.defined() || (out.has_value() && same_shape(*out, u) && out->scalar_type() == u.scalar_type()),
              kBwd, ": with z, `out` (the un-gated output returned by selective_scan_fwd) is required");
  Tensor dout = last_contig<T>(dout_);
  Tensor xc = T::contiguous(x);
  Tensor outc = c.z.defined() ? last_contig<T>(*out) : Tensor();

  mamba_ssm_bwd_params q;
  std::memset(&q, 0, sizeof(q));
  q.fwd = make_fwd(c, delta_softplus);
  q.fwd.x_ptr = T::mptr(xc);
  if (outc.defined()) {
    q.fwd.out_ptr = T::mptr(outc);
    q.fwd.out_batch_stride = outc.stride(0);
    q.fwd.out_d_stride = outc.stride(1);
  }
  const auto dt = c.u.scalar_type();
  Tensor du = T::empty(c.u, {c.batch, c.dim, c.L}, dt);
  Tensor ddelta = T::empty(c.u, {c.batch, c.dim, c.L}, dt);
  Tensor dA = T::zeros_f32(c.u, {c.dim, c.dstate});
  Tensor dB = T::zeros_f32(c.u, c.B.sizes());
  Tensor dC = T::zeros_f32(c.u, c.C.sizes());
  Tensor dD = c.D.has_value() ? T::zeros_f32(c.u, {c.dim}) : T::empty(c.u, {0}, T::kFloat);
  Tensor ddelta_bias = c.delta_bias.has_value() ? T::zeros_f32(c.u, {c.dim}) : T::empty(c.u, {0}, T::kFloat);
  Tensor dz = c.z.defined() ? T::empty(c.u, {c.batch, c.dim, c.L}, dt) : T::empty(c.u, {0}, dt);
  q.dout_ptr = T::cptr(dout);
  q.dout_batch_stride = dout.stride(0);
  q.dout_d_stride = dout.stride(1);
  q.du_ptr = T::mptr(du);
  q.du_batch_stride = du.stride(0);
  q.du_d_stride = du.stride(1);
  q.ddelta_ptr = T::mptr(ddelta);
  q.ddelta_batch_stride = ddelta.stride(0);
  q.ddelta_d_stride = ddelta.stride(1);
  q.dA_ptr = T::mptr(dA);
  q.dB_ptr = T::mptr(dB);
  q.dC_ptr = T::mptr(dC);
  q.dD_ptr = c.D.has_value() ? T::mptr(dD) : nullptr;
  q.ddelta_bias_ptr = c.delta_bias.has_value() ? T::mptr(ddelta_bias) : nullptr;
  if (c.z.defined()) {
    q.dz_ptr = T::mptr(dz);
    q.dz_batch_stride = dz.stride(0);
    q.dz_d_stride = dz.stride(1);
  }
  run(q, c, kBwd);
  // gradients come back in their input's dtype (variable B/C are accumulated in fp32)
  if (dB.scalar_type() != c.B.scalar_type()) dB = T::to(dB, c.B.scalar_type());
  if (dC.scalar_type() != c.C.scalar_type()) dC = T::to(dC, c.C.scalar_type());
  return {du, ddelta, dA, dB, dC, dD, ddelta_bias, dz};
}

}  // namespace mamba_ssm_binding
