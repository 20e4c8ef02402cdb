// torch binding of the selective scan: validates tensors, allocates outputs,
// fills the C parameter structs of selective_scan.h and calls the kernels.
// Registers torch.ops.mamba_ssm.selective_scan_fwd / selective_scan_bwd with a
// CPU implementation and, when built WITH_CUDA, a CUDA one (also HIP: torch
// keeps the CUDA dispatch key for ROCm builds). The checks, parameter filling
// and kernel calls are shared with binding_stable.cpp (binding_common.h).
//
// Only light ATen headers on purpose (no torch/extension.h, no pybind11, no Python.h:
// the module init is module.cpp): this is the one TU compiled per torch version, so its
// compile time is paid per torch, once for all Pythons.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <tuple>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

// Failed checks raise c10::Error with exactly the streamed message.
#define MAMBA_CHECK(...) TORCH_CHECK(__VA_ARGS__)
#include "binding_common.h"

namespace {

using at::Tensor;
using OptTensor = c10::optional<Tensor>;

// The ATen spelling of what binding_common.h needs.
struct AtenTraits {
  using Tensor = at::Tensor;
  using OptTensor = c10::optional<at::Tensor>;
  using ScalarType = at::ScalarType;
  static constexpr ScalarType kFloat = at::kFloat, kHalf = at::kHalf, kBFloat16 = at::kBFloat16;
#ifdef WITH_CUDA
  static constexpr bool kCuda = true;
  static void* cuda_stream(const Tensor&) { return c10::cuda::getCurrentCUDAStream().stream(); }
#else
  static constexpr bool kCuda = false;
#endif
  static at::IntArrayRef shape(const Tensor& t) { return t.sizes(); }
  static c10::Device dev(const Tensor& t) { return t.device(); }
  static Tensor contiguous(const Tensor& t) { return t.contiguous(); }
  static Tensor to(const Tensor& t, ScalarType dtype) { return t.to(dtype); }
  static const void* cptr(const Tensor& t) { return t.data_ptr(); }
  static void* mptr(const Tensor& t) { return t.data_ptr(); }
  static Tensor empty(const Tensor& like, at::IntArrayRef size, ScalarType dtype) {
    return at::empty(size, like.options().dtype(dtype));
  }
  static Tensor zeros_f32(const Tensor& like, at::IntArrayRef size) {
    return at::zeros(size, like.options().dtype(at::kFloat));
  }
  static c10::OptionalDeviceGuard guard(const Tensor& t) { return c10::OptionalDeviceGuard(t.device()); }
  template <class Fn>
  static void parallel_for(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
    at::parallel_for(begin, end, grain, fn);
  }
};

std::tuple<Tensor, Tensor, Tensor> selective_scan_fwd(const Tensor& u, const Tensor& delta, const Tensor& A,
                                                      const Tensor& B, const Tensor& C, const OptTensor& D,
                                                      const OptTensor& z, const OptTensor& delta_bias,
                                                      bool delta_softplus) {
  return mamba_ssm_binding::scan_fwd<AtenTraits>(u, delta, A, B, C, D, z, delta_bias, delta_softplus);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> selective_scan_bwd(
    const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C, const OptTensor& D,
    const OptTensor& z, const OptTensor& delta_bias, const Tensor& dout, const Tensor& x, const OptTensor& out,
    bool delta_softplus) {
  return mamba_ssm_binding::scan_bwd<AtenTraits>(u, delta, A, B, C, D, z, delta_bias, dout, x, out, delta_softplus);
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
