// CPU selective scan (forward and backward) behind the C contract of
// selective_scan.h. No torch headers, no std:: types across the interface: the
// object is the same for every torch, Python and C++ ABI.
//
// Work order per call (a range of channels [d0, d1)): batch -> chunk of
// MAMBA_SCAN_CHUNK steps -> group -> channel -> tile of states. Variable B/C
// are converted to fp32 and transposed to (tile, t, lane) once per
// (batch, chunk, group) and shared by all channels of the group, so the hot
// loops only see contiguous fp32 rows.
#include "selective_scan.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

namespace mamba_cpu {

// The row passes of one ISA build (selective_scan_cpu_impl.inc defines one of these per namespace).
struct RowOps {
  void (*softplus)(int64_t, float*);
  void (*mul_sigmoid)(int64_t, float*, const float*);
  void (*silu_gate)(int64_t, float*, const float*);
  void (*silu_grad)(int64_t, float*, const float*, float*);
};

namespace generic {
#include "selective_scan_cpu_impl.inc"
}  // namespace generic

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MAMBA_CPU_DISPATCH 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
#include "selective_scan_cpu_impl.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

// ---- dtype conversion (round to nearest even, as torch does) ----

static inline float h2f(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t bits;
  if (e == 0) {
    const float f = (float)m * 5.9604644775390625e-08f;  // subnormal: m * 2^-24
    return sign ? -f : f;
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t f2h(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf
  if (x < 0x38800000u) {                         // fp16 subnormal: round |f| * 2^24 to an integer
    float v;
    memcpy(&v, &x, 4);
    v = (v * 16777216.0f + 12582912.0f) - 12582912.0f;
    return sign | (uint16_t)v;
  }
  x += 0xfffu + ((x >> 13) & 1u);
  x -= 112u << 23;
  return sign | (uint16_t)(x >> 13);
}

static inline float b2f(uint16_t b) {
  const uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t f2b(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static void to_float(const void* src, int dtype, int64_t n, float* dst) {
  if (dtype == MAMBA_F32) {
    memcpy(dst, src, (size_t)n * 4);
  } else if (dtype == MAMBA_F16) {
    const uint16_t* s = (const uint16_t*)src;
    for (int64_t i = 0; i < n; ++i) dst[i] = h2f(s[i]);
  } else {
    const uint16_t* s = (const uint16_t*)src;
    for (int64_t i = 0; i < n; ++i) dst[i] = b2f(s[i]);
  }
}

static void from_float(const float* src, int dtype, int64_t n, void* dst) {
  if (dtype == MAMBA_F32) {
    memcpy(dst, src, (size_t)n * 4);
  } else if (dtype == MAMBA_F16) {
    uint16_t* d = (uint16_t*)dst;
    for (int64_t i = 0; i < n; ++i) d[i] = f2h(src[i]);
  } else {
    uint16_t* d = (uint16_t*)dst;
    for (int64_t i = 0; i < n; ++i) d[i] = f2b(src[i]);
  }
}

static inline int64_t esize(int dtype) { return dtype == MAMBA_F32 ? 4 : 2; }

static inline const void* at(const void* base, int dtype, int64_t offset) {
  return (const char*)base + offset * esize(dtype);
}

static inline void* at_mut(void* base, int dtype, int64_t offset) {
  return (char*)base + offset * esize(dtype);
}

// ---- ISA selection ----

static bool use_avx2() {
#ifdef MAMBA_CPU_DISPATCH
  static const bool ok = [] {
    const char* force = getenv("MAMBA_CPU_ISA");  // "generic" pins the baseline path (benchmarks)
    if (force && strcmp(force, "generic") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
#else
  return false;
#endif
}

static generic::fwd_tile_fn fwd_tile_for(int W) {
#ifdef MAMBA_CPU_DISPATCH
  if (use_avx2()) return avx2::pick_fwd(W);
#endif
  return generic::pick_fwd(W);
}

static generic::bwd_tile_fn bwd_tile_for(int W, bool vb, bool vc) {
#ifdef MAMBA_CPU_DISPATCH
  if (use_avx2()) return avx2::pick_bwd(W, vb, vc);
#endif
  return generic::pick_bwd(W, vb, vc);
}

static const RowOps& row_ops_for() {
#ifdef MAMBA_CPU_DISPATCH
  if (use_avx2()) return avx2::row_ops;
#endif
  return generic::row_ops;
}

static int tile_width(int64_t dstate) { return dstate <= 8 ? 8 : 16; }  // 1 or 2 vectors of 8 lanes

// Variable B or C of (batch b, group g), steps [t0, t0 + len), to fp32 (tile, t, lane).
static void transpose_bc(const void* ptr, int dtype, int64_t batch_stride, int64_t group_stride,
                         int64_t dstate_stride, int64_t b, int64_t g, int64_t t0, int64_t len,
                         int64_t dstate, int W, int64_t chunk, float* row, float* out) {
  const int64_t ntile = (dstate + W - 1) / W;
  memset(out, 0, sizeof(float) * (size_t)(ntile * chunk * W));
  for (int64_t n = 0; n < dstate; ++n) {
    to_float(at(ptr, dtype, b * batch_stride + g * group_stride + n * dstate_stride + t0), dtype, len, row);
    float* dst = out + (n / W) * chunk * W + (n % W);
    for (int64_t t = 0; t < len; ++t) dst[t * W] = row[t];
  }
}

// A row (fp32) or a constant B/C row of channel d, zero-padded to the tile width.
static void load_row(const void* ptr, int64_t d_stride, int64_t dstate_stride, int64_t d, int64_t dstate,
                     int64_t padded, float* out) {
  const float* p = (const float*)ptr + d * d_stride;
  for (int64_t n = 0; n < padded; ++n) out[n] = n < dstate ? p[n * dstate_stride] : 0.f;
}

// Per-step rows are padded to a multiple of 8 floats: the row passes work in whole vectors.
static inline int64_t pad8(int64_t n) { return (n + 7) / 8 * 8; }

static bool valid(const mamba_ssm_fwd_params* p, int64_t d0, int64_t d1) {
  return p->batch >= 0 && p->dim > 0 && p->seqlen >= 0 && p->dstate > 0 && p->n_groups > 0 &&
         p->dim % p->n_groups == 0 && d0 >= 0 && d1 <= p->dim && d0 <= d1 &&
         p->n_chunks == (p->seqlen + MAMBA_SCAN_CHUNK - 1) / MAMBA_SCAN_CHUNK;
}

static std::mutex g_reduce_mutex;  // guards the shared (per group) variable dB/dC

}  // namespace mamba_cpu

using namespace mamba_cpu;

extern "C" const char* mamba_ssm_error_string(int code) {
  switch (code) {
    case MAMBA_OK: return "ok";
    case MAMBA_ERR_DTYPE: return "unsupported dtype (expected float32, float16 or bfloat16)";
    case MAMBA_ERR_SHAPE: return "inconsistent shapes or sizes in the scan parameters";
    case MAMBA_ERR_LAUNCH: return "the kernel could not be launched (out of memory or no device)";
    default: return "unknown mamba_ssm error";
  }
}

extern "C" int mamba_ssm_fwd_cpu(const mamba_ssm_fwd_params* p, int64_t d0, int64_t d1) {
  if (p->dtype != MAMBA_F32 && p->dtype != MAMBA_F16 && p->dtype != MAMBA_BF16) return MAMBA_ERR_DTYPE;
  if (!valid(p, d0, d1)) return MAMBA_ERR_SHAPE;
  if (d0 == d1 || p->seqlen == 0 || p->batch == 0) return MAMBA_OK;
  const int dt = p->dtype;
  const int64_t L = p->seqlen, N = p->dstate, dpg = p->dim / p->n_groups;
  const int W = tile_width(N);
  const int64_t ntile = (N + W - 1) / W, Np = ntile * W;
  const int64_t CH = L < MAMBA_SCAN_CHUNK ? L : MAMBA_SCAN_CHUNK, CHp = pad8(CH);
  const generic::fwd_tile_fn tile = fwd_tile_for(W);
  const RowOps& ops = row_ops_for();

  // workspace: Bt, Ct (Np*CH each), A/B/C rows + state (4*Np), dt, dtu, y, u, row (5*CHp)
  const size_t nfloat = (size_t)(2 * Np * CH + 4 * Np + 5 * CHp);
  float* ws = (float*)calloc(nfloat, sizeof(float));
  if (!ws) return MAMBA_ERR_LAUNCH;
  float *Bt = ws, *Ct = Bt + Np * CH, *Ar = Ct + Np * CH, *Br = Ar + Np, *Cr = Br + Np, *st = Cr + Np;
  float *dtb = st + Np, *dtu = dtb + CHp, *y = dtu + CHp, *ub = y + CHp, *row = ub + CHp;

  for (int64_t b = 0; b < p->batch; ++b) {
    for (int64_t c = 0; c < p->n_chunks; ++c) {
      const int64_t t0 = c * MAMBA_SCAN_CHUNK, len = (L - t0) < CH ? (L - t0) : CH;
      for (int64_t g = d0 / dpg; g <= (d1 - 1) / dpg; ++g) {
        if (p->is_variable_B)
          transpose_bc(p->B_ptr, dt, p->B_batch_stride, p->B_group_stride, p->B_dstate_stride, b, g, t0, len,
                       N, W, CH, row, Bt);
        if (p->is_variable_C)
          transpose_bc(p->C_ptr, dt, p->C_batch_stride, p->C_group_stride, p->C_dstate_stride, b, g, t0, len,
                       N, W, CH, row, Ct);
        const int64_t dlo = d0 > g * dpg ? d0 : g * dpg, dhi = d1 < (g + 1) * dpg ? d1 : (g + 1) * dpg;
        for (int64_t d = dlo; d < dhi; ++d) {
          load_row(p->A_ptr, p->A_d_stride, p->A_dstate_stride, d, N, Np, Ar);
          if (!p->is_variable_B) load_row(p->B_ptr, p->B_d_stride, p->B_dstate_stride, d, N, Np, Br);
          if (!p->is_variable_C) load_row(p->C_ptr, p->C_d_stride, p->C_dstate_stride, d, N, Np, Cr);
          const float bias = p->delta_bias_ptr ? ((const float*)p->delta_bias_ptr)[d] : 0.f;
          to_float(at(p->u_ptr, dt, b * p->u_batch_stride + d * p->u_d_stride + t0), dt, len, ub);
          to_float(at(p->delta_ptr, dt, b * p->delta_batch_stride + d * p->delta_d_stride + t0), dt, len, dtb);
          for (int64_t t = 0; t < len; ++t) dtb[t] += bias;
          if (p->delta_softplus) ops.softplus(len, dtb);
          for (int64_t t = 0; t < len; ++t) {
            dtu[t] = dtb[t] * ub[t];
            y[t] = 0.f;
          }
          float* xck = (float*)p->x_ptr + ((b * p->dim + d) * p->n_chunks) * N;
          for (int64_t n = 0; n < Np; ++n) st[n] = (c > 0 && n < N) ? xck[(c - 1) * N + n] : 0.f;
          for (int64_t k = 0; k < ntile; ++k) {
            const float* Bs = p->is_variable_B ? Bt + k * CH * W : Br + k * W;
            const float* Cs = p->is_variable_C ? Ct + k * CH * W : Cr + k * W;
            tile(len, dtb, dtu, Ar + k * W, Bs, p->is_variable_B ? W : 0, Cs, p->is_variable_C ? W : 0,
                 st + k * W, y);
          }
          memcpy(xck + c * N, st, sizeof(float) * (size_t)N);
          if (p->D_ptr) {
            const float Dv = ((const float*)p->D_ptr)[d];
            for (int64_t t = 0; t < len; ++t) y[t] += Dv * ub[t];
          }
          from_float(y, dt, len, at_mut(p->out_ptr, dt, b * p->out_batch_stride + d * p->out_d_stride + t0));
          if (p->z_ptr) {
            to_float(at(p->z_ptr, dt, b * p->z_batch_stride + d * p->z_d_stride + t0), dt, len, row);
            ops.silu_gate(len, y, row);
            from_float(y, dt, len,
                       at_mut(p->out_z_ptr, dt, b * p->out_z_batch_stride + d * p->out_z_d_stride + t0));
          }
        }
      }
    }
  }
  free(ws);
  return MAMBA_OK;
}

extern "C" int mamba_ssm_bwd_cpu(const mamba_ssm_bwd_params* q, int64_t d0, int64_t d1) {
  const mamba_ssm_fwd_params* p = &q->fwd;
  if (p->dtype != MAMBA_F32 && p->dtype != MAMBA_F16 && p->dtype != MAMBA_BF16) return MAMBA_ERR_DTYPE;
  if (!valid(p, d0, d1)) return MAMBA_ERR_SHAPE;
  if (d0 == d1 || p->seqlen == 0 || p->batch == 0) return MAMBA_OK;
  const int dt = p->dtype;
  const bool vb = p->is_variable_B != 0, vc = p->is_variable_C != 0;
  const int64_t L = p->seqlen, N = p->dstate, dpg = p->dim / p->n_groups, G = p->n_groups;
  const int W = tile_width(N);
  const int64_t ntile = (N + W - 1) / W, Np = ntile * W;
  const int64_t CH = L < MAMBA_SCAN_CHUNK ? L : MAMBA_SCAN_CHUNK, CHp = pad8(CH);
  const int64_t nch = d1 - d0;
  const generic::bwd_tile_fn tile = bwd_tile_for(W, vb, vc);
  const RowOps& ops = row_ops_for();

  // workspace: Bt, Ct, dBt, dCt (Np*CH each), xs (W*CH), rows A/B/C/x0/dA/dB/dC (7*Np),
  // per-step dtr, dtb, ub, dy, ddt, du, row (7*CHp), carried h per channel (nch*Np)
  const size_t nfloat = (size_t)(4 * Np * CH + W * CH + 7 * Np + 7 * CHp + nch * Np);
  float* ws = (float*)calloc(nfloat, sizeof(float));
  if (!ws) return MAMBA_ERR_LAUNCH;
  float *Bt = ws, *Ct = Bt + Np * CH, *dBt = Ct + Np * CH, *dCt = dBt + Np * CH, *xs = dCt + Np * CH;
  float *Ar = xs + W * CH, *Br = Ar + Np, *Cr = Br + Np, *x0 = Cr + Np, *gA = x0 + Np, *gB = gA + Np,
        *gC = gB + Np;
  float *dtr = gC + Np, *dtb = dtr + CHp, *ub = dtb + CHp, *dy = ub + CHp, *ddt = dy + CHp, *du = ddt + CHp,
        *row = du + CHp;
  float* hcar = row + CHp;

  float* dA = (float*)q->dA_ptr;  // (dim, dstate), contiguous
  for (int64_t b = 0; b < p->batch; ++b) {
    memset(hcar, 0, sizeof(float) * (size_t)(nch * Np));
    for (int64_t c = p->n_chunks - 1; c >= 0; --c) {
      const int64_t t0 = c * MAMBA_SCAN_CHUNK, len = (L - t0) < CH ? (L - t0) : CH;
      for (int64_t g = d0 / dpg; g <= (d1 - 1) / dpg; ++g) {
        if (vb) {
          transpose_bc(p->B_ptr, dt, p->B_batch_stride, p->B_group_stride, p->B_dstate_stride, b, g, t0, len, N,
                       W, CH, row, Bt);
          memset(dBt, 0, sizeof(float) * (size_t)(Np * CH));
        }
        if (vc) {
          transpose_bc(p->C_ptr, dt, p->C_batch_stride, p->C_group_stride, p->C_dstate_stride, b, g, t0, len, N,
                       W, CH, row, Ct);
          memset(dCt, 0, sizeof(float) * (size_t)(Np * CH));
        }
        const int64_t dlo = d0 > g * dpg ? d0 : g * dpg, dhi = d1 < (g + 1) * dpg ? d1 : (g + 1) * dpg;
        for (int64_t d = dlo; d < dhi; ++d) {
          load_row(p->A_ptr, p->A_d_stride, p->A_dstate_stride, d, N, Np, Ar);
          if (!vb) load_row(p->B_ptr, p->B_d_stride, p->B_dstate_stride, d, N, Np, Br);
          if (!vc) load_row(p->C_ptr, p->C_d_stride, p->C_dstate_stride, d, N, Np, Cr);
          memset(gA, 0, sizeof(float) * (size_t)(3 * Np));  // gA, gB, gC
          const float bias = p->delta_bias_ptr ? ((const float*)p->delta_bias_ptr)[d] : 0.f;
          const float Dv = p->D_ptr ? ((const float*)p->D_ptr)[d] : 0.f;
          to_float(at(p->u_ptr, dt, b * p->u_batch_stride + d * p->u_d_stride + t0), dt, len, ub);
          to_float(at(p->delta_ptr, dt, b * p->delta_batch_stride + d * p->delta_d_stride + t0), dt, len, dtr);
          to_float(at(q->dout_ptr, dt, b * q->dout_batch_stride + d * q->dout_d_stride + t0), dt, len, dy);
          for (int64_t t = 0; t < len; ++t) {
            dtr[t] += bias;
            dtb[t] = dtr[t];
            du[t] = 0.f;
          }
          if (p->delta_softplus) ops.softplus(len, dtb);
          if (p->z_ptr) {
            // out = y * silu(z): dz = dout * y * silu'(z), dy = dout * silu(z); y is the saved pre-gating output
            to_float(at(p->z_ptr, dt, b * p->z_batch_stride + d * p->z_d_stride + t0), dt, len, row);
            to_float(at(p->out_ptr, dt, b * p->out_batch_stride + d * p->out_d_stride + t0), dt, len, ddt);
            ops.silu_grad(len, dy, ddt, row);
            from_float(row, dt, len, at_mut(q->dz_ptr, dt, b * q->dz_batch_stride + d * q->dz_d_stride + t0));
          }
          for (int64_t t = 0; t < len; ++t) ddt[t] = 0.f;
          const float* xck = (const float*)p->x_ptr + ((b * p->dim + d) * p->n_chunks) * N;
          for (int64_t n = 0; n < Np; ++n) x0[n] = (c > 0 && n < N) ? xck[(c - 1) * N + n] : 0.f;
          float* h = hcar + (d - d0) * Np;
          for (int64_t k = 0; k < ntile; ++k) {
            const float* Bs = vb ? Bt + k * CH * W : Br + k * W;
            const float* Cs = vc ? Ct + k * CH * W : Cr + k * W;
            float* dBs = vb ? dBt + k * CH * W : gB + k * W;
            float* dCs = vc ? dCt + k * CH * W : gC + k * W;
            tile(len, dtb, ub, dy, Ar + k * W, Bs, Cs, x0 + k * W, h + k * W, xs, ddt, du, gA + k * W, dBs, dCs);
          }
          if (p->delta_softplus) ops.mul_sigmoid(len, ddt, dtr);
          float dD = 0.f, dbias = 0.f;
          for (int64_t t = 0; t < len; ++t) {
            du[t] += dy[t] * Dv;
            dD += dy[t] * ub[t];
            dbias += ddt[t];
          }
          from_float(du, dt, len, at_mut(q->du_ptr, dt, b * q->du_batch_stride + d * q->du_d_stride + t0));
          from_float(ddt, dt, len,
                     at_mut(q->ddelta_ptr, dt, b * q->ddelta_batch_stride + d * q->ddelta_d_stride + t0));
          if (q->dD_ptr) ((float*)q->dD_ptr)[d] += dD;
          if (q->ddelta_bias_ptr) ((float*)q->ddelta_bias_ptr)[d] += dbias;
          for (int64_t n = 0; n < N; ++n) dA[d * N + n] += gA[n];
          if (!vb) for (int64_t n = 0; n < N; ++n) ((float*)q->dB_ptr)[d * N + n] += gB[n];
          if (!vc) for (int64_t n = 0; n < N; ++n) ((float*)q->dC_ptr)[d * N + n] += gC[n];
        }
        // channels of one group may be split across threads: add this thread's share under a lock
        if (vb || vc) {
          std::lock_guard<std::mutex> lock(g_reduce_mutex);
          for (int pass = 0; pass < 2; ++pass) {
            if (pass == 0 ? !vb : !vc) continue;
            const float* src = pass == 0 ? dBt : dCt;
            float* dst = (float*)(pass == 0 ? q->dB_ptr : q->dC_ptr) + ((b * G + g) * N) * L + t0;
            for (int64_t n = 0; n < N; ++n) {
              const float* s = src + (n / W) * CH * W + (n % W);
              float* o = dst + n * L;
              for (int64_t t = 0; t < len; ++t) o[t] += s[t * W];
            }
          }
        }
      }
    }
  }
  free(ws);
  return MAMBA_OK;
}
