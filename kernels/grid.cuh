/* Launch shapes of the element-wise kernels: kThreads threads a block, and
 * a grid of at most 65535 * 8 blocks whose grid-stride loops (GRID_STRIDE)
 * cover the n elements. */
#ifndef DPS_GRID_CUH
#define DPS_GRID_CUH

#include <stdint.h>

static const int kThreads = 256;

static inline unsigned grid_for(int64_t n)
{
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 65535 * 8) blocks = 65535 * 8; /* grid-stride loops cover the rest */
    return (unsigned)(blocks > 0 ? blocks : 1);
}

#define GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

#endif
