// Checks the CUDA launchers (run on the CPU through emu.h) against the CPU kernels of
// csrc/selective_scan_cpu.cpp on the same parameter structs. Exit 0 when every case
// matches; prints one line per case. Built and run by tests/test_cuda_emulation.py.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/scan_common.cuh"

namespace {

struct Case {
  int dtype;
  int64_t L;
  bool var_B, var_C;
  int groups;
  bool has_D, has_z, has_bias, softplus;
  int64_t N = 3;
};

uint16_t to_bits(float f, int dtype) {
  return dtype == MAMBA_F16 ? __half_as_ushort(__float2half_rn(f)) : mamba_scan::float_to_bf16_bits(f);
}
float from_bits(uint16_t b, int dtype) {
  return dtype == MAMBA_F16 ? __half2float(__ushort_as_half(b)) : mamba_scan::bf16_bits_to_float(b);
}

// A tensor in the input dtype (or fp32) with a float view for comparisons.
struct Buf {
  int dtype;
  std::vector<float> f32;
  std::vector<uint16_t> h16;
  Buf(size_t n, int dt) : dtype(dt), f32(dt == MAMBA_F32 ? n : 0), h16(dt == MAMBA_F32 ? 0 : n) {}
  void* ptr() { return dtype == MAMBA_F32 ? (void*)f32.data() : (void*)h16.data(); }
  size_t size() const { return dtype == MAMBA_F32 ? f32.size() : h16.size(); }
  float get(size_t i) const { return dtype == MAMBA_F32 ? f32[i] : from_bits(h16[i], dtype); }
  void set(size_t i, float v) {
    if (dtype == MAMBA_F32) f32[i] = v;
    else h16[i] = to_bits(v, dtype);
  }
};

Buf random_buf(size_t n, int dt, std::mt19937& rng, float lo, float hi, bool normal) {
  Buf b(n, dt);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(lo, hi);
  for (size_t i = 0; i < n; ++i) b.set(i, normal ? nd(rng) : ud(rng));
  return b;
}

double rel_err(const Buf& got, const Buf& want) {
  double num = 0, den = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = got.get(i), b = want.get(i);
    if (!std::isfinite(a)) return INFINITY;
    num = std::max(num, std::abs(a - b));
    den = std::max(den, std::abs(b));
  }
  return num / den;
}

bool run_case(const Case& k, std::mt19937& rng) {
  const int64_t Bt = 2, Dm = 4, L = k.L, N = k.N, G = k.groups, nch = (L + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK;
  const int dt = k.dtype;
  const size_t act = Bt * Dm * L;
  Buf u = random_buf(act, dt, rng, 0, 0, true);
  Buf delta = k.softplus ? random_buf(act, dt, rng, -3.f, 1.f, false) : random_buf(act, dt, rng, 0.01f, 0.3f, false);
  Buf z = random_buf(act, dt, rng, 0, 0, true);
  Buf A = random_buf(Dm * N, MAMBA_F32, rng, -2.f, -0.3f, false);
  const size_t bc_var = Bt * G * N * L;
  Buf Bm = k.var_B ? random_buf(bc_var, dt, rng, 0, 0, true) : random_buf(Dm * N, MAMBA_F32, rng, 0, 0, true);
  Buf Cm = k.var_C ? random_buf(bc_var, dt, rng, 0, 0, true) : random_buf(Dm * N, MAMBA_F32, rng, 0, 0, true);
  Buf Dv = random_buf(Dm, MAMBA_F32, rng, 0, 0, true);
  Buf bias = random_buf(Dm, MAMBA_F32, rng, 0.f, 0.5f, false);  // keeps dt > 0 without softplus
  Buf dout = random_buf(act, dt, rng, 0, 0, true);

  mamba_ssm_fwd_params p{};
  p.batch = Bt, p.dim = Dm, p.seqlen = L, p.dstate = N, p.n_groups = k.var_B || k.var_C ? G : 1, p.n_chunks = nch;
  p.dtype = dt, p.is_variable_B = k.var_B, p.is_variable_C = k.var_C, p.delta_softplus = k.softplus;
  p.u_batch_stride = p.delta_batch_stride = p.z_batch_stride = p.out_batch_stride = p.out_z_batch_stride = Dm * L;
  p.u_d_stride = p.delta_d_stride = p.z_d_stride = p.out_d_stride = p.out_z_d_stride = L;
  p.A_d_stride = N, p.A_dstate_stride = 1;
  for (int which = 0; which < 2; ++which) {
    const bool var = which ? k.var_C : k.var_B;
    int64_t* s = which ? &p.C_batch_stride : &p.B_batch_stride;  // batch, group, d, dstate
    s[0] = var ? G * N * L : 0, s[1] = var ? N * L : 0, s[2] = var ? 0 : N, s[3] = var ? L : 1;
  }
  p.u_ptr = u.ptr(), p.delta_ptr = delta.ptr(), p.A_ptr = A.ptr(), p.B_ptr = Bm.ptr(), p.C_ptr = Cm.ptr();
  p.D_ptr = k.has_D ? Dv.ptr() : nullptr;
  p.delta_bias_ptr = k.has_bias ? bias.ptr() : nullptr;
  p.z_ptr = k.has_z ? z.ptr() : nullptr;

  struct Fwd {
    Buf out, out_z, x;
  };
  auto fwd = [&](bool gpu, Fwd& r) {
    mamba_ssm_fwd_params q = p;
    q.out_ptr = r.out.ptr(), q.out_z_ptr = k.has_z ? r.out_z.ptr() : nullptr, q.x_ptr = r.x.ptr();
    return gpu ? mamba_ssm_fwd_cuda(&q, nullptr) : mamba_ssm_fwd_cpu(&q, 0, Dm);
  };
  Fwd fc{Buf(act, dt), Buf(act, dt), Buf(Bt * Dm * nch * N, MAMBA_F32)};
  Fwd fg{Buf(act, dt), Buf(act, dt), Buf(Bt * Dm * nch * N, MAMBA_F32)};
  const int rc1 = fwd(false, fc), rc2 = fwd(true, fg);

  struct Bwd {
    Buf du, ddelta, dz, dA, dB, dC, dD, dbias;
  };
  const size_t nB = k.var_B ? bc_var : Dm * N, nC = k.var_C ? bc_var : Dm * N;
  auto mk = [&] {
    return Bwd{Buf(act, dt), Buf(act, dt), Buf(act, dt), Buf(Dm * N, MAMBA_F32), Buf(nB, MAMBA_F32),
               Buf(nC, MAMBA_F32), Buf(Dm, MAMBA_F32), Buf(Dm, MAMBA_F32)};
  };
  auto bwd = [&](bool gpu, Bwd& r) {
    mamba_ssm_bwd_params q{};
    q.fwd = p;
    q.fwd.out_ptr = fc.out.ptr(), q.fwd.out_z_ptr = k.has_z ? fc.out_z.ptr() : nullptr, q.fwd.x_ptr = fc.x.ptr();
    q.dout_batch_stride = q.du_batch_stride = q.ddelta_batch_stride = q.dz_batch_stride = Dm * L;
    q.dout_d_stride = q.du_d_stride = q.ddelta_d_stride = q.dz_d_stride = L;
    q.dout_ptr = dout.ptr(), q.du_ptr = r.du.ptr(), q.ddelta_ptr = r.ddelta.ptr(), q.dA_ptr = r.dA.ptr();
    q.dB_ptr = r.dB.ptr(), q.dC_ptr = r.dC.ptr();
    q.dD_ptr = k.has_D ? r.dD.ptr() : nullptr, q.ddelta_bias_ptr = k.has_bias ? r.dbias.ptr() : nullptr;
    q.dz_ptr = k.has_z ? r.dz.ptr() : nullptr;
    return gpu ? mamba_ssm_bwd_cuda(&q, nullptr) : mamba_ssm_bwd_cpu(&q, 0, Dm);
  };
  Bwd bc = mk(), bg = mk();
  const int rc3 = bwd(false, bc), rc4 = bwd(true, bg);

  const double tol = dt == MAMBA_F32 ? 2e-4 : dt == MAMBA_F16 ? 4e-3 : 3e-2;
  struct Cmp {
    const char* name;
    const Buf *got, *want;
    bool on;
  } cmps[] = {{"out", &fg.out, &fc.out, true},       {"out_z", &fg.out_z, &fc.out_z, k.has_z},
              {"x", &fg.x, &fc.x, true},             {"du", &bg.du, &bc.du, true},
              {"ddelta", &bg.ddelta, &bc.ddelta, true}, {"dz", &bg.dz, &bc.dz, k.has_z},
              {"dA", &bg.dA, &bc.dA, true},          {"dB", &bg.dB, &bc.dB, true},
              {"dC", &bg.dC, &bc.dC, true},          {"dD", &bg.dD, &bc.dD, k.has_D},
              {"ddelta_bias", &bg.dbias, &bc.dbias, k.has_bias}};
  bool ok = rc1 == 0 && rc2 == 0 && rc3 == 0 && rc4 == 0;
  std::string worst;
  double worst_err = 0;
  for (const Cmp& c : cmps) {
    if (!c.on) continue;
    const double e = rel_err(*c.got, *c.want);
    if (!(e <= tol)) ok = false;
    if (!(e <= worst_err)) worst_err = e, worst = c.name;
  }
  std::printf("%s dtype=%d L=%lld varB=%d varC=%d groups=%d D=%d z=%d bias=%d softplus=%d rc=%d/%d/%d/%d "
              "worst=%s %.2e (tol %.0e)\n",
              ok ? "OK  " : "FAIL", dt, (long long)L, k.var_B, k.var_C, (int)p.n_groups, k.has_D, k.has_z,
              k.has_bias, k.softplus, rc1, rc2, rc3, rc4, worst.c_str(), worst_err, tol);
  return ok;
}

}  // namespace

int main() {
  std::mt19937 rng(1234);
  const Case cases[] = {
      // narrow mode (one warp per channel), both B/C layouts, all options
      {MAMBA_F32, 100, true, true, 2, true, true, true, true},
      {MAMBA_F32, 37, false, false, 1, false, false, false, false},
      // wide mode, one chunk, partly filled
      {MAMBA_F32, 700, true, false, 2, true, false, true, false},
      {MAMBA_F32, 2048, false, true, 2, false, true, false, true},
      // several chunks (carries across chunks), a ragged last one
      {MAMBA_F32, 4500, true, true, 2, true, true, true, true},
      {MAMBA_F32, 4100, false, false, 1, true, false, false, false},
      // half precision loads/stores (aligned and unaligned rows)
      {MAMBA_F16, 700, true, true, 2, true, true, true, true},
      {MAMBA_BF16, 2100, true, true, 1, true, true, true, true},
      {MAMBA_BF16, 90, false, false, 1, false, true, false, true},
  };
  bool ok = true;
  for (const Case& k : cases) ok = run_case(k, rng) && ok;
  return ok ? 0 : 1;
}
