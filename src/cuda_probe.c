/* Asks the CUDA runtime how many devices are visible, for --backend auto
 * and `dpscale info`; only built when the toolkit is. */
#include <stdio.h>
#include <cuda_runtime_api.h>

#include "dps_config.h"
#include "backend.h"

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
