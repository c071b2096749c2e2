/* C interface to the windowed resamples' CUDA kernels (windowed.cu), used by
 * the CUDA backend; each launcher takes its stream and returns the launch
 * status (cudaGetLastError). */
#ifndef DPS_WINDOWED_K_H
#define DPS_WINDOWED_K_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "windowed.h"

#ifdef __cplusplus
extern "C" {
#endif

/* backend.h's window: samples of w's input into its output, x and y of type
 * t (0: fp32, 1: bf16, 2: fp16); idx: a max pool's indices, else NULL */
cudaError_t dps_k_window(cudaStream_t s, const dps_window *w, int64_t samples, int t,
                         const void *x, void *y, int64_t *idx);
/* backend.h's window_bwd: dx from dy (and a max pool's idx), fp32 */
cudaError_t dps_k_window_bwd(cudaStream_t s, const dps_window *w, int64_t samples,
                             const float *dy, const int64_t *idx, float *dx);

#ifdef __cplusplus
}
#endif
#endif
