// Stable-ABI torch binding of the selective scan: the same ops, schemas, checks
// and semantics as binding.cpp, written only against torch/csrc/stable/ and
// torch/headeronly/. Built with TORCH_TARGET_VERSION (the floor) and
// TORCH_STABLE_ONLY, it calls libtorch only through its C shim (aoti_torch_*,
// torch_*), so one build loads under every torch >= the floor, with either C++
// ABI, and holds no Python symbol (the wheel is cp310-abi3). It is a plain
// shared library with no PyInit: mamba_ssm loads it with torch.ops.load_library.
//
// Differences from binding.cpp are only in spelling: failed checks throw
// std::runtime_error (RuntimeError in Python, like c10::Error), the device guard
// and the current CUDA stream come from the shim (stream: -DUSE_CUDA), and CPU
// parallelism is torch::stable::parallel_for (torch_parallel_for, torch >= 2.10).
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "selective_scan.h"

namespace {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;
using torch::headeronly::ScalarType;
using IntRef = torch::headeronly::IntHeaderOnlyArrayRef;

constexpr const char* kFwd = "mamba_ssm.selective_scan_fwd";
constexpr const char* kBwd = "mamba_ssm.selective_scan_bwd";

// The message alone, as TORCH_CHECK's first line reads (STD_TORCH_CHECK would prefix the
// C++ function, file and line); torch turns std::runtime_error into Python's RuntimeError.
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw std::runtime_error(os.str());
}
#define MAMBA_CHECK(cond, ...) \
  do {                         \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

// Printable shapes and devices, formatted as c10 prints them ("[2, 3, 4]", "cuda:0"),
// so error messages read the same as the classic binding's.
struct Shape {
  IntRef s;
};
std::ostream& operator<<(std::ostream& os, const Shape& v) {
  os << '[';
  for (size_t i = 0; i < v.s.size(); ++i) os << (i ? ", " : "") << v.s[i];
  return os << ']';
}
Shape shape(const Tensor& t) { return {t.sizes()}; }

struct Dev {
  torch::stable::Device d;
};
std::ostream& operator<<(std::ostream& os, const Dev& v) {
  if (v.d.is_cpu()) return os << "cpu";
  os << (v.d.is_cuda() ? "cuda" : "device");
  return v.d.index() >= 0 ? os << ':' << static_cast<int>(v.d.index()) : os;
}
Dev dev(const Tensor& t) { return {t.device()}; }

int to_mamba_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return MAMBA_F32;
    case ScalarType::Half: return MAMBA_F16;
    case ScalarType::BFloat16: return MAMBA_BF16;
    default: return -1;
  }
}

// The kernels need the seqlen dimension contiguous; anything else is copied once.
Tensor last_contig(const Tensor& t) { return t.stride(-1) == 1 ? t : torch::stable::contiguous(t); }

Tensor check_bc(const Tensor& t, const char* name, const Tensor& u, int64_t dim, int64_t dstate) {
  const int64_t batch = u.size(0), L = u.size(2);
  MAMBA_CHECK(t.device() == u.device(), kFwd, ": ", name, " is on ", dev(t), " but u is on ", dev(u));
  if (t.dim() == 2) {
    MAMBA_CHECK(t.size(0) == dim && t.size(1) == dstate, kFwd, ": constant ", name, " must have shape (dim, dstate) = (",
                dim, ", ", dstate, "), got ", shape(t));
    MAMBA_CHECK(t.scalar_type() == ScalarType::Float, kFwd, ": constant ", name, " (dim, dstate) must be float32, got ",
                t.scalar_type(), "; pass it as B.float()");
    return t;
  }
  MAMBA_CHECK(t.dim() == 3 || t.dim() == 4, kFwd, ": ", name,
              " must be (dim, dstate), (batch, dstate, seqlen) or (batch, groups, dstate, seqlen), got ", shape(t));
  const int64_t groups = t.dim() == 4 ? t.size(1) : 1;
  const int64_t n_ax = t.dim() - 2;
  MAMBA_CHECK(t.size(0) == batch && t.size(n_ax) == dstate && t.size(n_ax + 1) == L, kFwd, ": variable ", name,
              " must have batch ", batch, ", dstate ", dstate, " and seqlen ", L, ", got ", shape(t));
  MAMBA_CHECK(groups >= 1 && dim % groups == 0, kFwd, ": dim (", dim, ") must be a multiple of the number of groups of ",
              name, " (", groups, ")");
  MAMBA_CHECK(t.scalar_type() == u.scalar_type(), kFwd, ": variable ", name, " must have u's dtype ", u.scalar_type(),
              ", got ", t.scalar_type());
  return last_contig(t);
}

void check_vec(const OptTensor& t, const char* name, const Tensor& u, int64_t dim) {
  if (!t.has_value()) return;
  MAMBA_CHECK(t->device() == u.device(), kFwd, ": ", name, " is on ", dev(*t), " but u is on ", dev(u));
  MAMBA_CHECK(t->dim() == 1 && t->size(0) == dim, kFwd, ": ", name, " must have shape (dim,) = (", dim, "), got ",
              shape(*t));
  MAMBA_CHECK(t->scalar_type() == ScalarType::Float, kFwd, ": ", name, " must be float32, got ", t->scalar_type());
}

struct Checked {
  Tensor u, delta, A, B, C, z;  // z undefined: no gating
  OptTensor D, delta_bias;
  int64_t batch, dim, L, dstate;
};

Checked check_inputs(const Tensor& u_, const Tensor& delta_, const Tensor& A, const Tensor& B_, const Tensor& C_,
                     const OptTensor& D, const OptTensor& z_, const OptTensor& delta_bias) {
  Checked c;
  MAMBA_CHECK(u_.dim() == 3, kFwd, ": u must be (batch, dim, seqlen), got ", shape(u_));
  MAMBA_CHECK(to_mamba_dtype(u_.scalar_type()) >= 0, kFwd, ": u must be float32, float16 or bfloat16, got ",
              u_.scalar_type());
  MAMBA_CHECK(delta_.sizes() == u_.sizes(), kFwd, ": delta must have u's shape ", shape(u_), ", got ", shape(delta_));
  MAMBA_CHECK(delta_.scalar_type() == u_.scalar_type(), kFwd, ": delta must have u's dtype ", u_.scalar_type(),
              ", got ", delta_.scalar_type());
  MAMBA_CHECK(delta_.device() == u_.device(), kFwd, ": delta is on ", dev(delta_), " but u is on ", dev(u_));
  MAMBA_CHECK(u_.size(2) > 0, kFwd, ": seqlen must be at least 1");
  MAMBA_CHECK(A.dim() == 2 && A.size(0) == u_.size(1), kFwd, ": A must be (dim, dstate) with dim = ", u_.size(1),
              ", got ", shape(A));
  MAMBA_CHECK(A.scalar_type() == ScalarType::Float, kFwd,
              ": A must be real float32 (complex A is not supported), got ", A.scalar_type());
  MAMBA_CHECK(A.device() == u_.device(), kFwd, ": A is on ", dev(A), " but u is on ", dev(u_));
  c.batch = u_.size(0);
  c.dim = u_.size(1);
  c.L = u_.size(2);
  c.dstate = A.size(1);
  MAMBA_CHECK(c.dstate >= 1, kFwd, ": dstate (A.size(1)) must be at least 1");
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
    MAMBA_CHECK(z_->sizes() == u_.sizes() && z_->scalar_type() == u_.scalar_type() && z_->device() == u_.device(), kFwd,
                ": z must match u in shape, dtype and device (", shape(u_), ", ", u_.scalar_type(), "), got ",
                shape(*z_), ", ", z_->scalar_type());
    c.z = last_contig(*z_);
  }
  return c;
}

void fill_bc(const Tensor& t, bool& variable, int64_t& bs, int64_t& gs, int64_t& ds, int64_t& ns, const void*& ptr) {
  variable = t.dim() >= 3;
  ptr = t.const_data_ptr();
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
  MAMBA_CHECK(!(vb && vc) || gb == gc, kFwd, ": B and C must have the same number of groups, got ", gb, " and ", gc);
  p.n_groups = vb ? gb : vc ? gc : 1;
  p.u_ptr = c.u.const_data_ptr();
  p.delta_ptr = c.delta.const_data_ptr();
  p.A_ptr = c.A.const_data_ptr();
  p.D_ptr = c.D.has_value() ? c.D->const_data_ptr() : nullptr;
  p.delta_bias_ptr = c.delta_bias.has_value() ? c.delta_bias->const_data_ptr() : nullptr;
  if (c.z.defined()) {
    p.z_ptr = c.z.const_data_ptr();
    p.z_batch_stride = c.z.stride(0);
    p.z_d_stride = c.z.stride(1);
  }
  return p;
}

void check_rc(int rc, const char* op, const char* where) {
  MAMBA_CHECK(rc == MAMBA_OK, op, " (", where, "): ", mamba_ssm_error_string(rc));
}

// Per-channel work is batch * seqlen * dstate; keep tiny problems on one thread.
int64_t grain_for(const Checked& c) {
  const int64_t work = std::max<int64_t>(1, c.batch * c.L * c.dstate);
  return std::max<int64_t>(1, (int64_t{1} << 15) / work);
}

template <class Params, class Fn>
void run_cpu(const Params& p, const Checked& c, Fn fn, const char* op) {
  std::atomic<int> err{MAMBA_OK};
  torch::stable::parallel_for(0, c.dim, grain_for(c), [&](int64_t d0, int64_t d1) {
    const int rc = fn(&p, d0, d1);
    if (rc != MAMBA_OK) err = rc;
  });
  check_rc(err.load(), op, "CPU");
}

// Like c10::OptionalDeviceGuard: switch the current device only for device tensors.
std::unique_ptr<torch::stable::accelerator::DeviceGuard> guard_for(const Tensor& t) {
  if (t.is_cpu()) return nullptr;
  return std::make_unique<torch::stable::accelerator::DeviceGuard>(t.get_device_index());
}

#ifdef USE_CUDA
void* current_stream(const Tensor& t) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return stream;
}
#endif

Tensor empty_like_u(const Checked& c, IntRef size, std::optional<ScalarType> dtype = std::nullopt) {
  return torch::stable::empty(size, dtype.value_or(c.u.scalar_type()), std::nullopt, c.u.device());
}

Tensor zeros_f32(const Checked& c, IntRef size) { return torch::stable::new_zeros(c.u, size, ScalarType::Float); }

std::tuple<Tensor, Tensor, Tensor> selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, OptTensor D,
                                                      OptTensor z, OptTensor delta_bias, bool delta_softplus) {
  Checked c = check_inputs(u, delta, A, B, C, D, z, delta_bias);
  auto guard = guard_for(c.u);
  mamba_ssm_fwd_params p = make_fwd(c, delta_softplus);
  Tensor out = empty_like_u(c, {c.batch, c.dim, c.L});
  Tensor x = empty_like_u(c, {c.batch, c.dim, p.n_chunks, c.dstate}, ScalarType::Float);
  Tensor out_z = c.z.defined() ? empty_like_u(c, {c.batch, c.dim, c.L}) : empty_like_u(c, {0});
  p.out_ptr = out.mutable_data_ptr();
  p.out_batch_stride = out.stride(0);
  p.out_d_stride = out.stride(1);
  p.x_ptr = x.mutable_data_ptr();
  if (c.z.defined()) {
    p.out_z_ptr = out_z.mutable_data_ptr();
    p.out_z_batch_stride = out_z.stride(0);
    p.out_z_d_stride = out_z.stride(1);
  }
  if (c.u.is_cpu()) {
    run_cpu(p, c, mamba_ssm_fwd_cpu, kFwd);
  } else {
#ifdef USE_CUDA
    check_rc(mamba_ssm_fwd_cuda(&p, current_stream(c.u)), kFwd, "CUDA");
#else
    MAMBA_CHECK(false, kFwd, ": this build of mamba_ssm has no CUDA kernels (built with MAMBA_SKIP_CUDA_BUILD?)");
#endif
  }
  return {out, x, out_z};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> selective_scan_bwd(
    Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, OptTensor D, OptTensor z, OptTensor delta_bias, Tensor dout_,
    Tensor x, OptTensor out, bool delta_softplus) {
  Checked c = check_inputs(u, delta, A, B, C, D, z, delta_bias);
  auto guard = guard_for(c.u);
  MAMBA_CHECK(dout_.sizes() == u.sizes() && dout_.scalar_type() == u.scalar_type(), kBwd,
              ": dout must match u in shape and dtype (", shape(u), ", ", u.scalar_type(), "), got ", shape(dout_), ", ",
              dout_.scalar_type());
  const int64_t n_chunks = (c.L + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK;
  MAMBA_CHECK(x.scalar_type() == ScalarType::Float && x.dim() == 4 && x.size(0) == c.batch && x.size(1) == c.dim &&
                  x.size(2) == n_chunks && x.size(3) == c.dstate,
              kBwd, ": x must be the float32 checkpoints (batch, dim, n_chunks, dstate) = (", c.batch, ", ", c.dim, ", ",
              n_chunks, ", ", c.dstate, ") returned by selective_scan_fwd, got ", shape(x), " ", x.scalar_type());
  MAMBA_CHECK(!c.z.defined() || (out.has_value() && out->sizes() == u.sizes() && out->scalar_type() == u.scalar_type()),
              kBwd, ": with z, `out` (the un-gated output returned by selective_scan_fwd) is required");
  Tensor dout = last_contig(dout_);
  Tensor xc = torch::stable::contiguous(x);
  Tensor outc = c.z.defined() ? last_contig(*out) : Tensor();

  mamba_ssm_bwd_params q;
  std::memset(&q, 0, sizeof(q));
  q.fwd = make_fwd(c, delta_softplus);
  q.fwd.x_ptr = xc.mutable_data_ptr();
  if (outc.defined()) {
    q.fwd.out_ptr = outc.mutable_data_ptr();
    q.fwd.out_batch_stride = outc.stride(0);
    q.fwd.out_d_stride = outc.stride(1);
  }
  Tensor du = empty_like_u(c, {c.batch, c.dim, c.L});
  Tensor ddelta = empty_like_u(c, {c.batch, c.dim, c.L});
  Tensor dA = zeros_f32(c, {c.dim, c.dstate});
  Tensor dB = zeros_f32(c, c.B.sizes());
  Tensor dC = zeros_f32(c, c.C.sizes());
  Tensor dD = c.D.has_value() ? zeros_f32(c, {c.dim}) : empty_like_u(c, {0}, ScalarType::Float);
  Tensor ddelta_bias = c.delta_bias.has_value() ? zeros_f32(c, {c.dim}) : empty_like_u(c, {0}, ScalarType::Float);
  Tensor dz = c.z.defined() ? empty_like_u(c, {c.batch, c.dim, c.L}) : empty_like_u(c, {0});
  q.dout_ptr = dout.const_data_ptr();
  q.dout_batch_stride = dout.stride(0);
  q.dout_d_stride = dout.stride(1);
  q.du_ptr = du.mutable_data_ptr();
  q.du_batch_stride = du.stride(0);
  q.du_d_stride = du.stride(1);
  q.ddelta_ptr = ddelta.mutable_data_ptr();
  q.ddelta_batch_stride = ddelta.stride(0);
  q.ddelta_d_stride = ddelta.stride(1);
  q.dA_ptr = dA.mutable_data_ptr();
  q.dB_ptr = dB.mutable_data_ptr();
  q.dC_ptr = dC.mutable_data_ptr();
  q.dD_ptr = c.D.has_value() ? dD.mutable_data_ptr() : nullptr;
  q.ddelta_bias_ptr = c.delta_bias.has_value() ? ddelta_bias.mutable_data_ptr() : nullptr;
  if (c.z.defined()) {
    q.dz_ptr = dz.mutable_data_ptr();
    q.dz_batch_stride = dz.stride(0);
    q.dz_d_stride = dz.stride(1);
  }
  if (c.u.is_cpu()) {
    run_cpu(q, c, mamba_ssm_bwd_cpu, kBwd);
  } else {
#ifdef USE_CUDA
    check_rc(mamba_ssm_bwd_cuda(&q, current_stream(c.u)), kBwd, "CUDA");
#else
    MAMBA_CHECK(false, kBwd, ": this build of mamba_ssm has no CUDA kernels (built with MAMBA_SKIP_CUDA_BUILD?)");
#endif
  }
  // gradients come back in their input's dtype (variable B/C are accumulated in fp32)
  if (dB.scalar_type() != c.B.scalar_type()) dB = torch::stable::to(dB, c.B.scalar_type());
  if (dC.scalar_type() != c.C.scalar_type()) dC = torch::stable::to(dC, c.C.scalar_type());
  return {du, ddelta, dA, dB, dC, dD, ddelta_bias, dz};
}

}  // namespace

STABLE_TORCH_LIBRARY(mamba_ssm, m) {
  m.def(
      "selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus) -> (Tensor out, Tensor x, Tensor out_z)");
  m.def(
      "selective_scan_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, Tensor dout, Tensor x, Tensor? out, bool delta_softplus) -> (Tensor du, Tensor ddelta, "
      "Tensor dA, Tensor dB, Tensor dC, Tensor dD, Tensor ddelta_bias, Tensor dz)");
}

STABLE_TORCH_LIBRARY_IMPL(mamba_ssm, CPU, m) {
  m.impl("selective_scan_fwd", TORCH_BOX(&selective_scan_fwd));
  m.impl("selective_scan_bwd", TORCH_BOX(&selective_scan_bwd));
}

#ifdef USE_CUDA
STABLE_TORCH_LIBRARY_IMPL(mamba_ssm, CUDA, m) {
  m.impl("selective_scan_fwd", TORCH_BOX(&selective_scan_fwd));
  m.impl("selective_scan_bwd", TORCH_BOX(&selective_scan_bwd));
}
#endif
