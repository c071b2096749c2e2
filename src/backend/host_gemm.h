/* The host backend's single-precision GEMM, through the library chosen when
 * dpscale was configured (meson option host-gemm: oneDNN, OpenBLAS, BLIS,
 * another CBLAS, or a portable C loop). Every call computes on the calling
 * thread alone: an emulated device is one host thread. */
#ifndef DPS_HOST_GEMM_H
#define DPS_HOST_GEMM_H

#include <stddef.h>

#include "core/err.h"

/* Process-wide settings of the library (its own threading turned off);
 * called when the host backend opens, before any GEMM. */
void host_sgemm_init(void);

/* Row-major C = alpha op(A) op(B) + beta C, op(X) = X or X^T (ta, tb), with
 * C m x n, op(A) m x k, op(B) k x n and leading dimensions lda, ldb, ldc in
 * elements. C is not read when beta is 0; k = 0 scales C by beta. With
 * oneDNN the calling thread holds back signals for the call (host_gemm.c). */
dps_status host_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc);

/* GFLOP/s of this library on one thread, from square fp32 GEMMs of 512
 * timed for about 50 ms (dry runs' time estimates); 0 when it failed. */
double host_gemm_gflops(void);

/* The library, its version and how it runs (meta.json's versions.blas). */
void host_sgemm_library(char *buf, size_t len);

#endif
