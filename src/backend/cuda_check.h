/* One way to check CUDA runtime, cuBLAS and NCCL calls: a failing call
 * returns from the calling function with a dps_status whose message names
 * file:line, the call and the library's own error string. A CUDA
 * out-of-memory becomes DPS_ERR_OOM. */
#ifndef DPS_CUDA_CHECK_H
#define DPS_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "core/err.h"

dps_status cuda_check_fail(cudaError_t rc, const char *file, int line, const char *call) DPS_MUST_USE;

#define CUDA_TRY(call)                                                      \
    do {                                                                    \
        cudaError_t cuda_rc_ = (call);                                      \
        if (cuda_rc_ != cudaSuccess)                                        \
            return cuda_check_fail(cuda_rc_, __FILE__, __LINE__, #call);      \
    } while (0)

#ifdef CUBLAS_V2_H_
dps_status cuda_check_cublas_fail(cublasStatus_t rc, const char *file, int line, const char *call) DPS_MUST_USE;
#define CUBLAS_TRY(call)                                                    \
    do {                                                                    \
        cublasStatus_t blas_rc_ = (call);                                   \
        if (blas_rc_ != CUBLAS_STATUS_SUCCESS)                              \
            return cuda_check_cublas_fail(blas_rc_, __FILE__, __LINE__, #call);    \
    } while (0)
#endif

#ifdef NCCL_H_
/* Failure (ncclInProgress is not one: non-blocking communicators return it). */
static inline int cuda_check_nccl_failed(ncclResult_t rc) { return rc != ncclSuccess && rc != ncclInProgress; }
dps_status cuda_check_nccl_fail(ncclResult_t rc, const char *file, int line, const char *call) DPS_MUST_USE;
#define NCCL_TRY(call)                                                      \
    do {                                                                    \
        ncclResult_t nccl_rc_ = (call);                                     \
        if (cuda_check_nccl_failed(nccl_rc_))                                      \
            return cuda_check_nccl_fail(nccl_rc_, __FILE__, __LINE__, #call);      \
    } while (0)
#endif

#endif
