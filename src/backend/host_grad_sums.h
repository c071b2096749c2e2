/* The host backend's sums into gradients (be_ops' col_sum_add, norm_bwd,
 * add_round; backend.h), bit for bit what kernels/grad_sums.cu computes. */
#ifndef DPS_HOST_GRAD_SUMS_H
#define DPS_HOST_GRAD_SUMS_H

#include <stdint.h>

#include "backend/backend.h"

void host_col_sum_add_run(be_dtype xt, be_dtype rt, int rows, int cols, int64_t ld, const void *x,
                          float *out);
void host_norm_bwd_run(be_dtype xt, be_dtype rt, int rows, int cols, const float *g, const void *x,
                       const float *gamma, float *dx, float *dgamma, float *dbeta);
void host_add_round_run(be_dtype rt, int64_t n, float *dst, const float *src);

#endif
