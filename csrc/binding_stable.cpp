// Stable-ABI torch binding of the selective scan: the same ops, schemas, checks
// and semantics as binding.cpp, written only against torch/csrc/stable/ and
// torch/headeronly/. Built with TORCH_TARGET_VERSION (the floor) and
// TORCH_STABLE_ONLY, it calls libtorch only through its C shim (aoti_torch_*,
// torch_*), so one build loads under every torch >= the floor, with either C++
// ABI, and holds no Python symbol (the wheel is cp310-abi3). It is a plain
// shared library with no PyInit: mamba_ssm loads it with torch.ops.load_library.
//
// The checks, parameter filling and kernel calls are shared with binding.cpp
// (binding_common.h); this file supplies only the stable spelling: failed checks throw
// std::runtime_error (RuntimeError in Python, like c10::Error), the device guard
// and the current CUDA stream come from the shim (stream: -DUSE_CUDA), and CPU
// parallelism is torch::stable::parallel_for (torch_parallel_for, torch >= 2.10).
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace {

using Tensor = torch::stable::Tensor;
using OptTensor = std::optional<Tensor>;
using torch::headeronly::ScalarType;
using IntRef = torch::headeronly::IntHeaderOnlyArrayRef;

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

struct Dev {
  torch::stable::Device d;
};
std::ostream& operator<<(std::ostream& os, const Dev& v) {
  if (v.d.is_cpu()) return os << "cpu";
  os << (v.d.is_cuda() ? "cuda" : "device");
  return v.d.index() >= 0 ? os << ':' << static_cast<int>(v.d.index()) : os;
}

}  // namespace

// After MAMBA_CHECK, Shape and Dev: the shared templates use them.
#include "binding_common.h"

namespace {

// The stable-ABI spelling of what binding_common.h needs.
struct StableTraits {
  using Tensor = ::Tensor;
  using OptTensor = ::OptTensor;
  using ScalarType = torch::headeronly::ScalarType;
  static constexpr ScalarType kFloat = ScalarType::Float, kHalf = ScalarType::Half,
                              kBFloat16 = ScalarType::BFloat16;
#ifdef USE_CUDA
  static constexpr bool kCuda = true;
  static void* cuda_stream(const Tensor& t) {
    void* stream = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
    return stream;
  }
#else
  static constexpr bool kCuda = false;
#endif
  static Shape shape(const Tensor& t) { return {t.sizes()}; }
  static Dev dev(const Tensor& t) { return {t.device()}; }
  static Tensor contiguous(const Tensor& t) { return torch::stable::contiguous(t); }
  static Tensor to(const Tensor& t, ScalarType dtype) { return torch::stable::to(t, dtype); }
  static const void* cptr(const Tensor& t) { return t.const_data_ptr(); }
  static void* mptr(const Tensor& t) { return t.mutable_data_ptr(); }
  static Tensor empty(const Tensor& like, IntRef size, ScalarType dtype) {
    return torch::stable::empty(size, dtype, std::nullopt, like.device());
  }
  static Tensor zeros_f32(const Tensor& like, IntRef size) {
    return torch::stable::new_zeros(like, size, ScalarType::Float);
  }
  // Like c10::OptionalDeviceGuard: switch the current device only for device tensors.
  static std::unique_ptr<torch::stable::accelerator::DeviceGuard> guard(const Tensor& t) {
    if (t.is_cpu()) return nullptr;
    return std::make_unique<torch::stable::accelerator::DeviceGuard>(t.get_device_index());
  }
  template <class Fn>
  static void parallel_for(int64_t begin, int64_t end, int64_t grain, const Fn& fn) {
    torch::stable::parallel_for(begin, end, grain, fn);
  }
};

std::tuple<Tensor, Tensor, Tensor> selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, OptTensor D,
                                                      OptTensor z, OptTensor delta_bias, bool delta_softplus) {
  return mamba_ssm_binding::scan_fwd<StableTraits>(u, delta, A, B, C, D, z, delta_bias, delta_softplus);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> selective_scan_bwd(
    Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, OptTensor D, OptTensor z, OptTensor delta_bias, Tensor dout,
    Tensor x, OptTensor out, bool delta_softplus) {
  return mamba_ssm_binding::scan_bwd<StableTraits>(u, delta, A, B, C, D, z, delta_bias, dout, x, out, delta_softplus);
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
