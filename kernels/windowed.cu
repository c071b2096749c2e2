/* CUDA kernels of the windowed resamples: one thread an element, the math
 * in windowed.h (shared with the host backend). The gradient is gathered,
 * each input element summing the outputs it fed in the host's order (a max
 * pool's through its indices), so no two threads write one element. */
#include "windowed_k.h"
#include "grid.cuh"

__global__ void window_kernel(dps_window w, int64_t samples, int t, const void *x, void *y,
                              int64_t *idx)
{
    int64_t n_in = dps_window_in_elems(&w), n_out = dps_window_out_elems(&w);
    size_t eb = t == 0 ? 4 : 2;
    GRID_STRIDE(i, samples * n_out) {
        int64_t r = i / n_out, arg = 0;
        const char *xs = (const char *)x + (size_t)(r * n_in) * eb;
        dps_store_as(y, i, t, dps_window_at(&w, xs, t, i % n_out, &arg));
        if (idx) idx[i] = arg;
    }
}

__global__ void window_bwd_kernel(dps_window w, int64_t samples, const float *dy,
                                  const int64_t *idx, float *dx)
{
    int64_t n_in = dps_window_in_elems(&w), n_out = dps_window_out_elems(&w);
    GRID_STRIDE(i, samples * n_in) {
        int64_t r = i / n_in;
        dx[i] = dps_window_grad_at(&w, dy + r * n_out, idx ? idx + r * n_out : NULL, i % n_in);
    }
}

cudaError_t dps_k_window(cudaStream_t s, const dps_window *w, int64_t samples, int t,
                         const void *x, void *y, int64_t *idx)
{
    int64_t n = samples * dps_window_out_elems(w);
    if (n <= 0) return cudaSuccess;
    window_kernel<<<grid_for(n), kThreads, 0, s>>>(*w, samples, t, x, y, idx);
    return cudaGetLastError();
}

cudaError_t dps_k_window_bwd(cudaStream_t s, const dps_window *w, int64_t samples,
                             const float *dy, const int64_t *idx, float *dx)
{
    int64_t n = samples * dps_window_in_elems(w);
    if (n <= 0) return cudaSuccess;
    window_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(*w, samples, dy, idx, dx);
    return cudaGetLastError();
}
