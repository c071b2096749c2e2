/* Launchers of kernels/grad_sums.cu: a model file's sums into gradients,
 * in dps_col_sum_plan_for's order (elementwise.h). Types are be_dtype's
 * numbers: 0 fp32, 1 bf16, 2 fp16. */
#ifndef DPS_GRAD_SUMS_H
#define DPS_GRAD_SUMS_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of workspace a rows x cols call takes (the runs' partial sums; a
 * norm's two sums twice); 0 for one run. */
int64_t dps_k_grad_sums_workspace(int rows, int cols, int norm);
/* out[c] += the sum over rows of x[r * ld + c] (type xt), rounded to type rt */
cudaError_t dps_k_col_sum_add(cudaStream_t s, int xt, int rt, int rows, int cols, int64_t ld,
                              const void *x, float *out, float *workspace);
/* A norm's backward in one pass: dgamma[c] += sum of g·x (x of type xt),
 * dbeta[c] += sum of g, dx += (gamma ? g·gamma : g) rounded to type rt;
 * gamma, dx, dgamma and dbeta may be NULL (x too without dgamma) */
cudaError_t dps_k_norm_bwd(cudaStream_t s, int xt, int rt, int rows, int cols, const float *g,
                           const void *x, const float *gamma, float *dx, float *dgamma,
                           float *dbeta, float *workspace);
/* dst += src rounded to type rt */
cudaError_t dps_k_add_round(cudaStream_t s, int64_t n, float *dst, const float *src, int rt);

#ifdef __cplusplus
}
#endif
#endif
