/* Element-wise math shared by the CUDA kernels (kernels.cu) and the host
 * backend (src/backend/backend_host.c): the activations, optimizer updates, bf16 rounding and
 * the synthetic data generator. Written once so both backends compute the
 * same thing; compiles as C11 and as CUDA C++. The host backend evaluates
 * GELU and its derivative with its own vectorizable arithmetic, checked
 * against dps_gelu and dps_gelu_grad (test_backend host_math). */
#ifndef DPS_ELEMENTWISE_H
#define DPS_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>

#include "backend/opt_hparams.h"

#ifdef __CUDACC__
#define DPS_HD __host__ __device__ __forceinline__
#else
#define DPS_HD static inline
#endif

/* GELU as torch.nn.GELU() (the exact erf form). */
DPS_HD float dps_gelu(float x)
{
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

/* d gelu(x) / dx */
DPS_HD float dps_gelu_grad(float x)
{
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;
    return cdf + x * pdf;
}

/* An activation's function (a model file's act fn=, in model_file.h's
 * mf_fn order). Softmax is a row-wise function and the act op names no row
 * length: it runs GELU's element-wise pass in its place, keeping its input. */
#define DPS_ACT_RELU 0
#define DPS_ACT_GELU 1
#define DPS_ACT_SOFTMAX 2
#define DPS_ACT_TANH 3
#define DPS_ACT_SIGMOID 4
#define DPS_ACT_RELU6 5
#define DPS_ACT_SILU 6
#define DPS_ACT_HARDSWISH 7
#define DPS_ACT_HARDSIGMOID 8
#define DPS_ACT_MISH 9
#define DPS_ACT_COUNT 10

/* Whether fn's backward reads its output (relu, tanh, sigmoid: what
 * PyTorch's autograd saves for them) rather than its input. */
DPS_HD int dps_act_keeps_output(int fn)
{
    return fn == DPS_ACT_RELU || fn == DPS_ACT_TANH || fn == DPS_ACT_SIGMOID;
}

DPS_HD float dps_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* fn(x) as PyTorch's CPU kernels compute it in fp32. */
DPS_HD float dps_act(int fn, float x)
{
    switch (fn) {
    case DPS_ACT_RELU: return x > 0.0f || x != x ? x : 0.0f;
    case DPS_ACT_TANH: return tanhf(x);
    case DPS_ACT_SIGMOID: return dps_sigmoid(x);
    case DPS_ACT_RELU6: return x != x ? x : x < 0.0f ? 0.0f : x > 6.0f ? 6.0f : x;
    case DPS_ACT_SILU: return x / (1.0f + expf(-x));
    case DPS_ACT_HARDSWISH: return x <= -3.0f ? 0.0f : x >= 3.0f ? x : x * (x + 3.0f) / 6.0f;
    case DPS_ACT_HARDSIGMOID: return x <= -3.0f ? 0.0f : x >= 3.0f ? 1.0f : x / 6.0f + 0.5f;
    case DPS_ACT_MISH: return x * tanhf(log1pf(expf(x)));
    default: return dps_gelu(x); /* gelu, and softmax in its place */
    }
}

/* fn's backward of one element: g times fn's derivative, from v, its saved
 * value (the output where dps_act_keeps_output, else the input), in the
 * order of PyTorch's *_backward kernels. */
DPS_HD float dps_act_bwd(int fn, float g, float v)
{
    switch (fn) {
    case DPS_ACT_RELU: return v > 0.0f ? g : 0.0f;
    case DPS_ACT_TANH: return g * (1.0f - v * v);
    case DPS_ACT_SIGMOID: return g * (1.0f - v) * v;
    case DPS_ACT_RELU6: return v <= 0.0f || v >= 6.0f ? 0.0f : g;
    case DPS_ACT_SILU: {
        float s = dps_sigmoid(v);
        return g * s * (1.0f + v * (1.0f - s));
    }
    case DPS_ACT_HARDSWISH: return v < -3.0f ? 0.0f : v <= 3.0f ? g * (v / 3.0f + 0.5f) : g;
    case DPS_ACT_HARDSIGMOID: return v > -3.0f && v < 3.0f ? g / 6.0f : 0.0f;
    case DPS_ACT_MISH: {
        float s = dps_sigmoid(v), t = tanhf(log1pf(expf(v)));
        return g * (t + v * s * (1.0f - t * t));
    }
    default: return g * dps_gelu_grad(v);
    }
}

/* The bias gradient: column sums of a rows x cols row-major matrix, in an
 * order fixed by the shape alone, so that a sum is the same bit for bit
 * run to run, on every GPU and on the host backend (its col_sum follows
 * the same plan). The rows are cut into `chunks` runs of `chunk_rows`; in
 * a run, lane l of DPS_COLSUM_LANES sums rows l, l + LANES, ... in order,
 * the lanes are combined by dps_col_sum_lanes, and the runs' sums are added
 * in run order. On a GPU a block takes 32 columns of one run (lanes are
 * its threads' y), so a gpt2-sized layer (8192 x 1536) is 48 x 64 blocks. */
#define DPS_COLSUM_LANES 8
#define DPS_COLSUM_MIN_RUN 64                 /* rows a run has at least */
#define DPS_COLSUM_MAX_RUNS 64
#define DPS_COLSUM_WORKSPACE_FLOATS (1 << 20) /* the runs' partial sums: at most 4 MiB */

typedef struct dps_col_sum_plan {
    int chunks, chunk_rows;
} dps_col_sum_plan;

DPS_HD dps_col_sum_plan dps_col_sum_plan_for(int rows, int cols)
{
    int chunks = (rows + DPS_COLSUM_MIN_RUN - 1) / DPS_COLSUM_MIN_RUN;
    int by_space = cols > 0 ? DPS_COLSUM_WORKSPACE_FLOATS / cols : 1;
    if (chunks > DPS_COLSUM_MAX_RUNS) chunks = DPS_COLSUM_MAX_RUNS;
    if (chunks > by_space) chunks = by_space;
    if (chunks < 1) chunks = 1;
    dps_col_sum_plan p;
    p.chunk_rows = rows > 0 ? (rows + chunks - 1) / chunks : 0;
    p.chunks = p.chunk_rows > 0 ? (rows + p.chunk_rows - 1) / p.chunk_rows : 1;
    return p;
}

/* Floats of workspace the plan needs (the runs' partial sums); 0 for one run. */
DPS_HD int64_t dps_col_sum_workspace(int rows, int cols)
{
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
    return p.chunks > 1 ? (int64_t)p.chunks * cols : 0;
}

/* The lanes' sums of one column combined as a fixed tree:
 * ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). */
DPS_HD float dps_col_sum_lanes(const float *v, int stride)
{
    float t[DPS_COLSUM_LANES];
    for (int l = 0; l < DPS_COLSUM_LANES; l++) t[l] = v[l * stride];
    for (int w = DPS_COLSUM_LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) t[l] += t[l + w];
    return t[0];
}

/* torch.optim.SGD(momentum=m, dampening=0, nesterov=False) for one element.
 * On the first step buf is zero, so buf = g as PyTorch's clone(g). */
DPS_HD void dps_sgd_update(float *p, float g, float *buf, dps_opt_hparams h)
{
    if (h.weight_decay != 0.0f) g += h.weight_decay * *p;
    float b = h.momentum * *buf + g;
    *buf = b;
    *p -= h.lr * b;
}

/* torch.optim.AdamW (amsgrad=False, maximize=False) for one element, in
 * the order of PyTorch's single-tensor implementation. */
DPS_HD void dps_adamw_update(float *p, float g, float *m, float *v, dps_opt_hparams h)
{
    *p *= 1.0f - h.lr * h.weight_decay;
    *m = *m + (g - *m) * (1.0f - h.beta1);
    *v = h.beta2 * *v + (1.0f - h.beta2) * g * g;
    float bc1 = 1.0f - powf(h.beta1, (float)h.step);
    float bc2 = 1.0f - powf(h.beta2, (float)h.step);
    float denom = sqrtf(*v) / sqrtf(bc2) + h.eps;
    *p -= (h.lr / bc1) * (*m / denom);
}

/* DDP's bucket copy: a gradient divided by the world size while it is
 * copied into its bucket, in one pass (PyTorch's reducer: mul_out into the
 * bucket view "to save one scan"); dst may be src. */
DPS_HD float dps_scale_copy(float x, float a)
{
    return x * a;
}

/* float -> bfloat16 bits, round to nearest even (NaN kept quiet). */
DPS_HD uint16_t dps_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } x;
    x.f = f;
    if ((x.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x.u >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((x.u >> 16) & 1u);
    return (uint16_t)((x.u + rounding) >> 16);
}

DPS_HD float dps_bf16_to_f32(uint16_t b)
{
    union { float f; uint32_t u; } x;
    x.u = (uint32_t)b << 16;
    return x.f;
}

/* x rounded to TF32 (fp32's 8-bit exponent, 10 of its 23 mantissa bits),
 * kept in fp32: the 13 low bits rounded to nearest even, as CUTLASS's
 * float-to-tfloat32 converter rounds (NVIDIA documents no rounding for
 * cuBLAS's TF32 kernels; cvt.rna.tf32.f32 rounds ties away from zero and
 * the tensor cores' mma ignores the low bits, so a GPU's product may differ
 * from the host's in its last TF32 bits); inf and NaN kept. */
DPS_HD float dps_round_tf32(float f)
{
    union { float f; uint32_t u; } x;
    x.f = f;
    if ((x.u & 0x7f800000u) == 0x7f800000u) return f;
    x.u = (x.u + 0xfffu + ((x.u >> 13) & 1u)) & ~0x1fffu;
    return x.f;
}

/* float -> IEEE binary16 bits, round to nearest even, as a cast to
 * torch.float16: beyond 65504 (from 65520 up) it is inf, below 2^-14 a
 * subnormal, NaN stays a quiet NaN. */
DPS_HD uint16_t dps_f32_to_f16(float f)
{
    union { float f; uint32_t u; } x, magic;
    x.f = f;
    uint32_t sign = x.u & 0x80000000u, out;
    x.u ^= sign;
    if (x.u >= (uint32_t)(127 + 16) << 23) {          /* inf, NaN, or rounds to inf */
        out = x.u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (x.u < (uint32_t)113 << 23) {           /* a subnormal half, or zero */
        magic.u = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
        x.f += magic.f;                               /* the FPU rounds to even */
        out = x.u - magic.u;
    } else {
        uint32_t odd = (x.u >> 13) & 1u;
        x.u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        out = x.u >> 13;
    }
    return (uint16_t)(out | (sign >> 16));
}

DPS_HD float dps_f16_to_f32(uint16_t h)
{
    union { float f; uint32_t u; } o, magic;
    const uint32_t exp_mask = 0x7c00u << 13;
    magic.u = (uint32_t)113 << 23;
    o.u = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t exp = o.u & exp_mask;
    o.u += (uint32_t)(127 - 15) << 23;
    if (exp == exp_mask) {                            /* inf or NaN */
        o.u += (uint32_t)(128 - 16) << 23;
    } else if (exp == 0) {                            /* zero or subnormal */
        o.u += 1u << 23;
        o.f -= magic.f;
    }
    o.u |= (uint32_t)(h & 0x8000u) << 16;
    return o.f;
}

/* A half-precision value of autocast's type: fp16 when f16, else bf16. */
DPS_HD uint16_t dps_to_half(float f, int f16)
{
    return f16 ? dps_f32_to_f16(f) : dps_f32_to_bf16(f);
}

DPS_HD float dps_from_half(uint16_t h, int f16)
{
    return f16 ? dps_f16_to_f32(h) : dps_bf16_to_f32(h);
}

/* A Linear's output under autocast, one element: the bias (cast to the
 * half type, as autocast casts every input of a Linear) added to the fp32
 * product and rounded once, as addmm's half output (cuBLASLt's bias
 * epilogue). */
DPS_HD uint16_t dps_add_bias_half(float acc, uint16_t bias, int f16)
{
    return dps_to_half(acc + dps_from_half(bias, f16), f16);
}

/* An element of a tensor of type t (0: fp32, 1: bf16, 2: fp16, as
 * be_dtype) widened to fp32, and an fp32 value stored in type t: a model
 * file's element-wise ops under autocast on operands of mixed types. */
DPS_HD float dps_load_as(const void *p, int64_t i, int t)
{
    return t == 0 ? ((const float *)p)[i] : dps_from_half(((const uint16_t *)p)[i], t == 2);
}

DPS_HD void dps_store_as(void *p, int64_t i, int t, float v)
{
    if (t == 0) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dps_to_half(v, t == 2);
}

/* A norm's output element, y = x·γ + β as PyTorch's two element-wise
 * kernels leave it: the fp32 product rounded, then the fp32 sum rounded
 * (never one fused multiply-add); g == NULL: no scale, b == NULL: no shift. */
DPS_HD float dps_norm_affine(float x, const float *g, const float *b, int c)
{
#ifdef __CUDA_ARCH__
    if (g) x = __fmul_rn(x, g[c]);
    if (b) x = __fadd_rn(x, b[c]);
#else
    if (g) x = x * g[c];
    if (b) x = x + b[c];
#endif
    return x;
}

/* x rounded to the nearest value of the half type, kept in fp32. */
DPS_HD float dps_round_half(float x, int f16)
{
    return dps_from_half(dps_to_half(x, f16), f16);
}

/* x rounded to type t (0: fp32, as it is; 1: bf16; 2: fp16, as be_dtype),
 * kept in fp32. */
DPS_HD float dps_round_as(float x, int t)
{
    return t == 0 ? x : dps_round_half(x, t == 2);
}

/* GELU of a half value, rounded to the half type (GELU's half output). */
DPS_HD uint16_t dps_gelu_half(uint16_t x, int f16)
{
    return dps_to_half(dps_gelu(dps_from_half(x, f16)), f16);
}

/* GELU's backward on half tensors (gelu_backward's half output). */
DPS_HD uint16_t dps_gelu_bwd_half(uint16_t dh, uint16_t pre, int f16)
{
    return dps_to_half(dps_from_half(dh, f16) * dps_gelu_grad(dps_from_half(pre, f16)), f16);
}

/* fn of a half value, rounded to the half type (PyTorch's half kernels
 * compute in fp32). */
DPS_HD uint16_t dps_act_half(int fn, uint16_t x, int f16)
{
    return dps_to_half(dps_act(fn, dps_from_half(x, f16)), f16);
}

/* dps_act_bwd on half tensors, rounded to the half type. */
DPS_HD uint16_t dps_act_bwd_half(int fn, uint16_t g, uint16_t v, int f16)
{
    return dps_to_half(dps_act_bwd(fn, dps_from_half(g, f16), dps_from_half(v, f16)), f16);
}

/* GradScaler's unscale of one gradient: g / scale, as its
 * _amp_foreach_non_finite_check_and_unscale_ (a multiply by the inverse);
 * *found set when g is not finite. */
DPS_HD float dps_unscale(float g, float inv_scale, int *found)
{
    if (!(g - g == 0.0f)) *found = 1;                /* inf - inf and NaN are NaN */
    return g * inv_scale;
}

/* SplitMix64: the counter-based generator behind initialisation and data,
 * so any element can be produced independently (and reproduced in Python). */
DPS_HD uint64_t dps_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1) from (seed, stream, index): 24 random bits. */
DPS_HD float dps_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t r = dps_mix64(seed ^ dps_mix64(stream ^ dps_mix64(index)));
    return (float)(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

#endif
