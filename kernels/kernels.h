/* C interface to the CUDA kernels of kernels.cu, used by the CUDA backend.
 * Every launcher takes the stream it runs on and returns the launch status
 * (cudaGetLastError), so the caller's check macro can report it. */
#ifndef DPS_KERNELS_H
#define DPS_KERNELS_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pre[r, c] += bias[c]; out = gelu(pre) when out is non-NULL */
cudaError_t dps_k_bias_act(cudaStream_t s, int rows, int cols, float *pre,
                           const float *bias, float *out);
/* y = fn(x) (dps_act; fn a DPS_ACT_*), n elements; y may be x */
cudaError_t dps_k_act(cudaStream_t s, int fn, int64_t n, const float *x, float *y);
/* Every row of a rows x cols matrix c (leading dimension ld, elements of
 * elem_bytes: 2 or 4) set to `row`: the bias addmm adds through C */
cudaError_t dps_k_fill_rows(cudaStream_t s, int rows, int cols, const void *row, void *c, int ld,
                            int elem_bytes);
/* dx = dps_act_bwd(fn, g, v), n elements: v is fn's saved input or output
 * (dps_act_keeps_output); dx may be g */
cudaError_t dps_k_act_bwd(cudaStream_t s, int fn, int64_t n, const float *g, const float *v,
                          float *dx);
/* out[c] = sum over rows of x[r, c], in dps_col_sum_plan_for's order;
 * workspace: dps_col_sum_workspace(rows, cols) floats (NULL when 0) */
cudaError_t dps_k_col_sum(cudaStream_t s, int rows, int cols, const float *x, float *out,
                          float *workspace);
/* dpre = dh * gelu'(pre) (dps_k_act_bwd's for GELU) and out = its column sums
 * (dps_k_col_sum's, bit for bit) in one pass; dpre may be dh; workspace as
 * dps_k_col_sum's */
cudaError_t dps_k_gelu_bwd_col_sum(cudaStream_t s, int rows, int cols, const float *dh,
                                   const float *pre, float *dpre, float *out, float *workspace);
/* *out = sum of x[0..n), one block, deterministic order */
cudaError_t dps_k_sum(cudaStream_t s, int64_t n, const float *x, float *out);
cudaError_t dps_k_sgd(cudaStream_t s, int64_t n, float *p, const float *g, float *buf,
                      dps_opt_hparams h);
cudaError_t dps_k_adamw(cudaStream_t s, int64_t n, float *p, const float *g, float *m,
                        float *v, dps_opt_hparams h);
/* fp32 -> half and back; f16: IEEE binary16, else bfloat16 (elementwise.h) */
cudaError_t dps_k_cast_half(cudaStream_t s, int64_t n, const float *x, uint16_t *y, int f16);
cudaError_t dps_k_half_to_f32(cudaStream_t s, int64_t n, const uint16_t *x, float *y, int f16);
/* dps_k_act and dps_k_act_bwd on half tensors (dps_act_half, dps_act_bwd_half) */
cudaError_t dps_k_act_half(cudaStream_t s, int fn, int64_t n, const uint16_t *x, uint16_t *y,
                           int f16);
cudaError_t dps_k_act_bwd_half(cudaStream_t s, int fn, int64_t n, const uint16_t *g,
                               const uint16_t *v, uint16_t *dx, int f16);
/* dps_k_col_sum of a half matrix (fp32 sums) */
cudaError_t dps_k_col_sum_half(cudaStream_t s, int rows, int cols, const uint16_t *x, float *out,
                               float *workspace, int f16);
/* dps_k_gelu_bwd_col_sum on half tensors: dps_k_act_bwd_half's GELU dpre, its
 * dps_k_col_sum_half */
cudaError_t dps_k_gelu_bwd_col_sum_half(cudaStream_t s, int rows, int cols, const uint16_t *dh,
                                        const uint16_t *pre, uint16_t *dpre, float *out,
                                        float *workspace, int f16);
/* GradScaler's unscale: g *= inv_scale; *found_inf = 1 where a g is not finite */
cudaError_t dps_k_unscale(cudaStream_t s, int64_t n, float *g, float inv_scale, float *found_inf);
cudaError_t dps_k_scale(cudaStream_t s, int64_t n, float *x, float a);
/* dst = src * a, one pass (dst may be src): DDP's bucket copy */
cudaError_t dps_k_scale_copy(cudaStream_t s, int64_t n, float *dst, const float *src, float a);
/* dst += src (the reduce-add of peer-copy collectives) */
cudaError_t dps_k_add(cudaStream_t s, int64_t n, float *dst, const float *src);
/* a model file's reshaping and its gradient, a norm's scale, a product (backend.h) */
cudaError_t dps_k_resample(cudaStream_t s, int64_t samples, int64_t n_in, int64_t n_out,
                           const float *x, float *y);
cudaError_t dps_k_resample_bwd(cudaStream_t s, int64_t samples, int64_t n_in, int64_t n_out,
                               const float *dy, float *dx);
cudaError_t dps_k_col_scale(cudaStream_t s, int64_t rows, int cols, const float *x, const float *g,
                            float *y);
/* a norm's forward in one pass (backend.h's norm_fwd): x of type xt (0:
 * fp32, 1: bf16, 2: fp16), gamma and beta fp32 or NULL, y of type yt */
cudaError_t dps_k_norm_fwd(cudaStream_t s, int xt, int yt, int rows, int cols, const void *x,
                           const float *gamma, const float *beta, void *y);
cudaError_t dps_k_mul(cudaStream_t s, int64_t n, const float *a, const float *b, float *y);
/* a model file's mul op and its scale's gradient (backend.h's row_scale, row_dot_add) */
cudaError_t dps_k_row_scale(cudaStream_t s, int64_t rows, int64_t cols, const float *x,
                            const float *sc, float *y);
cudaError_t dps_k_row_dot_add(cudaStream_t s, int64_t rows, int64_t cols, const float *a,
                              const float *b, float *out);
/* the same under autocast, each operand of type 0 (fp32), 1 (bf16) or 2
 * (fp16): y = x * sc stored once in y's type; out[r] += the sum of a * b,
 * each product rounded to type pt, the sum to type rt */
cudaError_t dps_k_row_scale_ex(cudaStream_t s, int64_t rows, int64_t cols, const void *x, int xt,
                               const void *sc, int sct, void *y, int yt);
cudaError_t dps_k_row_dot_add_ex(cudaStream_t s, int64_t rows, int64_t cols, const float *a,
                                 const void *b, int bt, int pt, int rt, float *out);
/* a mul and a cat over pixels: backend.h's pixel_scale_ex, pixel_dot_add_ex
 * (one thread a (row, col), its pixels in order), cat_cols, cat_cols_bwd */
cudaError_t dps_k_pixel_scale_ex(cudaStream_t s, int64_t rows, int64_t pixels, int64_t cols,
                                 const void *x, int xt, const void *sc, int sct, void *y, int yt);
cudaError_t dps_k_pixel_dot_add_ex(cudaStream_t s, int64_t rows, int64_t pixels, int64_t cols,
                                   const float *a, const void *b, int bt, int pt, int rt, float *out);
cudaError_t dps_k_cat_cols(cudaStream_t s, int64_t rows, int64_t ca, const void *a, int at,
                           int64_t cb, const void *b, int bt, void *y, int yt);
cudaError_t dps_k_cat_cols_bwd(cudaStream_t s, int64_t rows, int64_t ca, int64_t cb, const float *g,
                               float *da, int dat, float *db, int dbt);

/* a model file's ops under autocast: y = a + b, each of type 0 (fp32), 1
 * (bf16) or 2 (fp16) as be_dtype, in fp32 and stored once in y's type (y
 * may be a); x rounded in place to the half type; a resample of half elements */
cudaError_t dps_k_add_ex(cudaStream_t s, int64_t n, const void *a, int at, const void *b, int bt,
                         void *y, int yt);
cudaError_t dps_k_round_half(cudaStream_t s, int64_t n, float *x, int f16);
cudaError_t dps_k_resample_half(cudaStream_t s, int64_t samples, int64_t n_in, int64_t n_out,
                                const uint16_t *x, uint16_t *y);

/* One thread busy for us microseconds on stream s (a stretched phase). */
cudaError_t dps_k_spin(cudaStream_t s, double us);

#ifdef __cplusplus
}
#endif
#endif
