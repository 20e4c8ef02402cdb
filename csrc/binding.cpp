// torch binding of the selective scan: validates tensors, allocates outputs,
// fills the C parameter structs of selective_scan.h and calls the kernels.
// Registers torch.ops.mamba_ssm.selective_scan_fwd / selective_scan_bwd with a
// CPU implementation and, when built WITH_CUDA, a CUDA one (also HIP: torch
// keeps the CUDA dispatch key for ROCm builds).
//
// Only light ATen headers on purpose (no torch/extension.h, no pybind11): this
// is the one TU compiled per torch version, so its compile time is paid per wheel.
#include <Python.h>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <tuple>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "selective_scan.h"

namespace {

using at::Tensor;
using OptTensor = c10::optional<Tensor>;

constexpr const char* kFwd = "mamba_ssm.selective_scan_fwd";
constexpr const char* kBwd = "mamba_ssm.selective_scan_bwd";

int to_mamba_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MAMBA_F32;
    case at::kHalf: return MAMBA_F16;
    case at::kBFloat16: return MAMBA_BF16;
    default: return -1;
  }
}

// The kernels need the seqlen dimension contiguous; anything else is copied once.
Tensor last_contig(const Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

Tensor check_bc(const Tensor& t, const char* name, const Tensor& u, int64_t dim, int64_t dstate) {
  const int64_t batch = u.size(0), L = u.size(2);
  TORCH_CHECK(t.device() == u.device(), kFwd, ": ", name, " is on ", t.device(), " but u is on ", u.device());
  if (t.dim() == 2) {
    TORCH_CHECK(t.size(0) == dim && t.size(1) == dstate, kFwd, ": constant ", name, " must have shape (dim, dstate) = (",
                dim, ", ", dstate, "), got ", t.sizes());
    TORCH_CHECK(t.scalar_type() == at::kFloat, kFwd, ": constant ", name, " (dim, dstate) must be float32, got ",
                t.scalar_type(), "; pass it as B.float()");
    return t;
  }
  TORCH_CHECK(t.dim() == 3 || t.dim() == 4, kFwd, ": ", name,
              " must be (dim, dstate), (batch, dstate, seqlen) or (batch, groups, dstate, seqlen), got ", t.sizes());
  const int64_t groups = t.dim() == 4 ? t.size(1) : 1;
  const int64_t n_ax = t.dim() - 2;
  TORCH_CHECK(t.size(0) == batch && t.size(n_ax) == dstate && t.size(n_ax + 1) == L, kFwd, ": variable ", name,
              " must have batch ", batch, ", dstate ", dstate, " and seqlen ", L, ", got ", t.sizes());
  TORCH_CHECK(groups >= 1 && dim % groups == 0, kFwd, ": dim (", dim, ") must be a multiple of the number of groups of ",
              name, " (", groups, ")");
  TORCH_CHECK(t.scalar_type() == u.scalar_type(), kFwd, ": variable ", name, " must have u's dtype ", u.scalar_type(),
              ", got ", t.scalar_type());
  return last_contig(t);
}

void check_vec(const OptTensor& t, const char* name, const Tensor& u, int64_t dim) {
  if (!t.has_value()) return;
  TORCH_CHECK(t->device() == u.device(), kFwd, ": ", name, " is on ", t->device(), " but u is on ", u.device());
  TORCH_CHECK(t->dim() == 1 && t->size(0) == dim, kFwd, ": ", name, " must have shape (dim,) = (", dim, "), got ",
              t->sizes());
  TORCH_CHECK(t->scalar_type() == at::kFloat, kFwd, ": ", name, " must be float32, got ", t->scalar_type());
}

struct Checked {
  Tensor u, delta, A, B, C, z;
  OptTensor D, delta_bias;
  int64_t batch, dim, L, dstate;
};

Checked check_inputs(const Tensor& u_, const Tensor& delta_, const Tensor& A, const Tensor& B_, const Tensor& C_,
                     const OptTensor& D, const OptTensor& z_, const OptTensor& delta_bias) {
  Checked c;
  TORCH_CHECK(u_.dim() == 3, kFwd, ": u must be (batch, dim, seqlen), got ", u_.sizes());
  TORCH_CHECK(to_mamba_dtype(u_.scalar_type()) >= 0, kFwd, ": u must be float32, float16 or bfloat16, got ",
              u_.scalar_type());
  TORCH_CHECK(delta_.sizes() == u_.sizes(), kFwd, ": delta must have u's shape ", u_.sizes(), ", got ", delta_.sizes());
  TORCH_CHECK(delta_.scalar_type() == u_.scalar_type(), kFwd, ": delta must have u's dtype ", u_.scalar_type(),
              ", got ", delta_.scalar_type());
  TORCH_CHECK(delta_.device() == u_.device(), kFwd, ": delta is on ", delta_.device(), " but u is on ", u_.device());
  TORCH_CHECK(u_.size(2) > 0, kFwd, ": seqlen must be at least 1");
  TORCH_CHECK(A.dim() == 2 && A.size(0) == u_.size(1), kFwd, ": A must be (dim, dstate) with dim = ", u_.size(1),
              ", got ", A.sizes());
  TORCH_CHECK(A.scalar_type() == at::kFloat, kFwd, ": A must be real float32 (complex A is not supported), got ",
              A.scalar_type());
  TORCH_CHECK(A.device() == u_.device(), kFwd, ": A is on ", A.device(), " but u is on ", u_.device());
  c.batch = u_.size(0);
  c.dim = u_.size(1);
  c.L = u_.size(2);
  c.dstate = A.size(1);
  TORCH_CHECK(c.dstate >= 1, kFwd, ": dstate (A.size(1)) must be at least 1");
  c.u = last_contig(u_);
  c.delta = last_contig(delta_);
  c.A = A;
  c.B = check_bc(B_, "B", u_, c.dim, c.dstate);
  c.C = check_bc(C_, "C", u_, c.dim, c.dstate);
  check_vec(D, "D", u_, c.dim);
  check_vec(delta_bias, "delta_bias", u_, c.dim);
  c.D = D;
  c.delta_bias = delta_bias;
  if (z_.has_value()) {
    TORCH_CHECK(z_->sizes() == u_.sizes() && z_->scalar_type() == u_.scalar_type() && z_->device() == u_.device(), kFwd,
                ": z must match u in shape, dtype and device (", u_.sizes(), ", ", u_.scalar_type(), "), got ",
                z_->sizes(), ", ", z_->scalar_type());
    c.z = last_contig(*z_);
  }
  return c;
}

void fill_bc(const Tensor& t, bool& variable, int64_t& bs, int64_t& gs, int64_t& ds, int64_t& ns, const void*& ptr) {
  variable = t.dim() >= 3;
  ptr = t.data_ptr();
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

mamba_ssm_fwd_params make_fwd(const Checked& c, bool delta_softplus) {
  mamba_ssm_fwd_params p;
  std::memset(&p, 0, sizeof(p));
  p.batch = c.batch;
  p.dim = c.dim;
  p.seqlen = c.L;
  p.dstate = c.dstate;
  p.n_chunks = (c.L + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK;
  p.dtype = to_mamba_dtype(c.u.scalar_type());
  p.delta_softplus = delta_softplus ? 1 : 0;
  p.u_batch_stride = c.u.stride(0);
  p.u_d_stride = c.u.stride(1);
  p.delta_batch_stride = c.delta.stride(0);
  p.delta_d_stride = c.delta.stride(1);
  p.A_d_stride = c.A.stride(0);
  p.A_dstate_stride = c.A.stride(1);
  bool vb, vc;
  fill_bc(c.B, vb, p.B_batch_stride, p.B_group_stride, p.B_d_stride, p.B_dstate_stride, p.B_ptr);
  fill_bc(c.C, vc, p.C_batch_stride, p.C_group_stride, p.C_d_stride, p.C_dstate_stride, p.C_ptr);
  p.is_variable_B = vb;
  p.is_variable_C = vc;
  const int64_t gb = c.B.dim() == 4 ? c.B.size(1) : 1, gc = c.C.dim() == 4 ? c.C.size(1) : 1;
  TORCH_CHECK(!(vb && vc) || gb == gc, kFwd, ": B and C must have the same number of groups, got ", gb, " and ", gc);
  p.n_groups = vb ? gb : vc ? gc : 1;
  p.u_ptr = c.u.data_ptr();
  p.delta_ptr = c.delta.data_ptr();
  p.A_ptr = c.A.data_ptr();
  p.D_ptr = c.D.has_value() ? c.D->data_ptr() : nullptr;
  p.delta_bias_ptr = c.delta_bias.has_value() ? c.delta_bias->data_ptr() : nullptr;
  if (c.z.defined()) {
    p.z_ptr = c.z.data_ptr();
    p.z_batch_stride = c.z.stride(0);
    p.z_d_stride = c.z.stride(1);
  }
  return p;
}

void check_rc(int rc, const char* op, const char* where) {
  TORCH_CHECK(rc == MAMBA_OK, op, " (", where, "): ", mamba_ssm_error_string(rc));
}

// Per-channel work is batch * seqlen * dstate; keep tiny problems on one thread.
int64_t grain_for(const Checked& c) {
  const int64_t work = std::max<int64_t>(1, c.batch * c.L * c.dstate);
  return std::max<int64_t>(1, (int64_t{1} << 15) / work);
}

template <class Params, class Fn>
void run_cpu(const Params& p, const Checked& c, Fn fn, const char* op) {
  std::atomic<int> err{MAMBA_OK};
  at::parallel_for(0, c.dim, grain_for(c), [&](int64_t d0, int64_t d1) {
    const int rc = fn(&p, d0, d1);
    if (rc != MAMBA_OK) err = rc;
  });
  check_rc(err.load(), op, "CPU");
}

std::tuple<Tensor, Tensor, Tensor> selective_scan_fwd(const Tensor& u, const Tensor& delta, const Tensor& A,
                                                      const Tensor& B, const Tensor& C, const OptTensor& D,
                                                      const OptTensor& z, const OptTensor& delta_bias,
                                                      bool delta_softplus) {
  Checked c = check_inputs(u, delta, A, B, C, D, z, delta_bias);
  c10::OptionalDeviceGuard guard(c.u.device());
  mamba_ssm_fwd_params p = make_fwd(c, delta_softplus);
  Tensor out = at::empty({c.batch, c.dim, c.L}, c.u.options());
  Tensor x = at::empty({c.batch, c.dim, p.n_chunks, c.dstate}, c.u.options().dtype(at::kFloat));
  Tensor out_z = c.z.defined() ? at::empty({c.batch, c.dim, c.L}, c.u.options()) : at::empty({0}, c.u.options());
  p.out_ptr = out.data_ptr();
  p.out_batch_stride = out.stride(0);
  p.out_d_stride = out.stride(1);
  p.x_ptr = x.data_ptr();
  if (c.z.defined()) {
    p.out_z_ptr = out_z.data_ptr();
    p.out_z_batch_stride = out_z.stride(0);
    p.out_z_d_stride = out_z.stride(1);
  }
  if (c.u.is_cpu()) {
    run_cpu(p, c, mamba_ssm_fwd_cpu, kFwd);
  } else {
#ifdef WITH_CUDA
    check_rc(mamba_ssm_fwd_cuda(&p, c10::cuda::getCurrentCUDAStream().stream()), kFwd, "CUDA");
#else
    TORCH_CHECK(false, kFwd, ": this build of mamba_ssm has no CUDA kernels (built with MAMBA_SKIP_CUDA_BUILD?)");
#endif
  }
  return {out, x, out_z};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> selective_scan_bwd(
    const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C, const OptTensor& D,
    const OptTensor& z, const OptTensor& delta_bias, const Tensor& dout_, const Tensor& x, const OptTensor& out,
    bool delta_softplus) {
  Checked c = check_inputs(u, delta, A, B, C, D, z, delta_bias);
  c10::OptionalDeviceGuard guard(c.u.device());
  TORCH_CHECK(dout_.sizes() == u.sizes() && dout_.scalar_type() == u.scalar_type(), kBwd,
              ": dout must match u in shape and dtype (", u.sizes(), ", ", u.scalar_type(), "), got ", dout_.sizes(),
              ", ", dout_.scalar_type());
  const int64_t n_chunks = (c.L + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK;
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 4 && x.size(0) == c.batch && x.size(1) == c.dim &&
                  x.size(2) == n_chunks && x.size(3) == c.dstate,
              kBwd, ": x must be the float32 checkpoints (batch, dim, n_chunks, dstate) = (", c.batch, ", ", c.dim, ", ",
              n_chunks, ", ", c.dstate, ") returned by selective_scan_fwd, got ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(!c.z.defined() || (out.has_value() && out->sizes() == u.sizes() && out->scalar_type() == u.scalar_type()),
              kBwd, ": with z, `out` (the un-gated output returned by selective_scan_fwd) is required");
  Tensor dout = last_contig(dout_);
  Tensor xc = x.contiguous();
  Tensor outc = c.z.defined() ? last_contig(*out) : Tensor();

  mamba_ssm_bwd_params q;
  std::memset(&q, 0, sizeof(q));
  q.fwd = make_fwd(c, delta_softplus);
  q.fwd.x_ptr = xc.data_ptr();
  if (outc.defined()) {
    q.fwd.out_ptr = outc.data_ptr();
    q.fwd.out_batch_stride = outc.stride(0);
    q.fwd.out_d_stride = outc.stride(1);
  }
  const auto f32 = c.u.options().dtype(at::kFloat);
  Tensor du = at::empty({c.batch, c.dim, c.L}, c.u.options());
  Tensor ddelta = at::empty({c.batch, c.dim, c.L}, c.u.options());
  Tensor dA = at::zeros({c.dim, c.dstate}, f32);
  Tensor dB = at::zeros(c.B.sizes(), f32);
  Tensor dC = at::zeros(c.C.sizes(), f32);
  Tensor dD = c.D.has_value() ? at::zeros({c.dim}, f32) : at::empty({0}, f32);
  Tensor ddelta_bias = c.delta_bias.has_value() ? at::zeros({c.dim}, f32) : at::empty({0}, f32);
  Tensor dz = c.z.defined() ? at::empty({c.batch, c.dim, c.L}, c.u.options()) : at::empty({0}, c.u.options());
  q.dout_ptr = dout.data_ptr();
  q.dout_batch_stride = dout.stride(0);
  q.dout_d_stride = dout.stride(1);
  q.du_ptr = du.data_ptr();
  q.du_batch_stride = du.stride(0);
  q.du_d_stride = du.stride(1);
  q.ddelta_ptr = ddelta.data_ptr();
  q.ddelta_batch_stride = ddelta.stride(0);
  q.ddelta_d_stride = ddelta.stride(1);
  q.dA_ptr = dA.data_ptr();
  q.dB_ptr = dB.data_ptr();
  q.dC_ptr = dC.data_ptr();
  q.dD_ptr = c.D.has_value() ? dD.data_ptr() : nullptr;
  q.ddelta_bias_ptr = c.delta_bias.has_value() ? ddelta_bias.data_ptr() : nullptr;
  if (c.z.defined()) {
    q.dz_ptr = dz.data_ptr();
    q.dz_batch_stride = dz.stride(0);
    q.dz_d_stride = dz.stride(1);
  }
  if (c.u.is_cpu()) {
    run_cpu(q, c, mamba_ssm_bwd_cpu, kBwd);
  } else {
#ifdef WITH_CUDA
    check_rc(mamba_ssm_bwd_cuda(&q, c10::cuda::getCurrentCUDAStream().stream()), kBwd, "CUDA");
#else
    TORCH_CHECK(false, kBwd, ": this build of mamba_ssm has no CUDA kernels (built with MAMBA_SKIP_CUDA_BUILD?)");
#endif
  }
  // gradients come back in their input's dtype (variable B/C are accumulated in fp32)
  if (dB.scalar_type() != c.B.scalar_type()) dB = dB.to(c.B.scalar_type());
  if (dC.scalar_type() != c.C.scalar_type()) dC = dC.to(c.C.scalar_type());
  return {du, ddelta, dA, dB, dC, dD, ddelta_bias, dz};
}

}  // namespace

TORCH_LIBRARY(mamba_ssm, m) {
  m.def(
      "selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus) -> (Tensor out, Tensor x, Tensor out_z)");
  m.def(
      "selective_scan_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, Tensor dout, Tensor x, Tensor? out, bool delta_softplus) -> (Tensor du, Tensor ddelta, "
      "Tensor dA, Tensor dB, Tensor dC, Tensor dD, Tensor ddelta_bias, Tensor dz)");
}

TORCH_LIBRARY_IMPL(mamba_ssm, CPU, m) {
  m.impl("selective_scan_fwd", &selective_scan_fwd);
  m.impl("selective_scan_bwd", &selective_scan_bwd);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(mamba_ssm, CUDA, m) {
  m.impl("selective_scan_fwd", &selective_scan_fwd);
  m.impl("selective_scan_bwd", &selective_scan_bwd);
}
#endif

// A plain CPython module so `import mamba_ssm._C` loads the library (and runs the
// registrations above); the ops themselves live in torch.ops.mamba_ssm.
static struct PyModuleDef mamba_ssm_c_module = {PyModuleDef_HEAD_INIT, "_C", "mamba_ssm selective-scan ops", -1,
                                                nullptr};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mamba_ssm_c_module); }
