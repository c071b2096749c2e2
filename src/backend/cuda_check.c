/* The failure messages of CUDA_TRY, CUBLAS_TRY and NCCL_TRY (cuda_check.h). */
#include "build_config.h"
#include <cublas_v2.h>
#ifdef DPS_HAVE_NCCL
#include <nccl.h>
#endif

#include "backend/cuda_check.h"

dps_status cuda_check_fail(cudaError_t rc, const char *file, int line, const char *call)
{
    cudaGetLastError(); /* reset the runtime's last error, so later calls are not blamed */
    dps_status st = rc == cudaErrorMemoryAllocation ? DPS_ERR_OOM : DPS_ERR_RUNTIME;
    return dps_fail(st, "%s:%d: %s failed: %s (%s)", file, line, call, cudaGetErrorName(rc),
                    cudaGetErrorString(rc));
}

dps_status cuda_check_cublas_fail(cublasStatus_t rc, const char *file, int line, const char *call)
{
    return dps_fail(DPS_ERR_RUNTIME, "%s:%d: %s failed: %s (%s)", file, line, call,
                    cublasGetStatusName(rc), cublasGetStatusString(rc));
}

#ifdef DPS_HAVE_NCCL
dps_status cuda_check_nccl_fail(ncclResult_t rc, const char *file, int line, const char *call)
{
    const char *last = ncclGetLastError(NULL);
    return dps_fail(DPS_ERR_RUNTIME, "%s:%d: %s failed: %s%s%s%s", file, line, call,
                    ncclGetErrorString(rc), last && *last ? " (" : "", last ? last : "",
                    last && *last ? ")" : "");
}
#endif
