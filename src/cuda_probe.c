/* Asks the CUDA runtime, cuBLAS and NCCL what is there: the visible device
 * count (for --backend auto) and the library versions (for `dpscale info`
 * and meta.json). Only built when the toolkit is. */
#include <stdio.h>
#include <cuda_runtime_api.h>
#include <cublas_api.h>

#include "dps_config.h"
#include "backend.h"
#ifdef DPS_HAVE_NCCL
#include <nccl.h>
#endif

int dps_cuda_device_count(char *why, size_t len)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        snprintf(why, len, "cudaGetDeviceCount: %s", cudaGetErrorString(rc));
        return 0;
    }
    if (n == 0) snprintf(why, len, "cudaGetDeviceCount found 0 devices");
    else snprintf(why, len, "%d device(s)", n);
    return n;
}

static void fmt_cuda(char *buf, size_t len, int v)
{
    if (v <= 0) snprintf(buf, len, "none");
    else snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

void dps_cuda_versions(char *buf, size_t len)
{
    int drv = 0, rt = 0, major = 0, minor = 0, patch = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    char d[16], r[16], nccl[32] = "not built";
#ifdef DPS_HAVE_NCCL
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess)
        snprintf(nccl, sizeof nccl, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
#endif
    fmt_cuda(d, sizeof d, drv);
    fmt_cuda(r, sizeof r, rt);
    snprintf(buf, len, "CUDA driver %s, runtime %s, cuBLAS %d.%d.%d, NCCL %s", d, r, major,
             minor, patch, nccl);
}
