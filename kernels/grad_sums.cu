/* CUDA kernels of a model file's sums into gradients (grad_sums.h): column
 * sums added to a parameter's gradient, and a norm's backward in one pass.
 * Each follows dps_col_sum_plan_for's order (elementwise.h), as
 * kernels.cu's col_sum_lanes_kernel: block (x, y) is 32 columns of run y,
 * thread (tx, ty) column tx's lane ty. */
#include "grad_sums.h"
#include "elementwise.h"
#include "grid.cuh"

struct f16_bits { uint16_t v; }; /* an IEEE binary16 element, told apart from bf16's */
__device__ __forceinline__ float load_f32(float x) { return x; }
__device__ __forceinline__ float load_f32(uint16_t x) { return dps_bf16_to_f32(x); }
__device__ __forceinline__ float load_f32(f16_bits x) { return dps_f16_to_f32(x.v); }

/* The lanes' sums of this thread's column combined; one run: added to
 * out[c] rounded to type rt, else stored as run y's partial sum. */
__device__ __forceinline__ void lanes_done(float (*lane)[32], int c, int cols, int rt,
                                           float *partial, float *out)
{
    float sum = dps_col_sum_lanes(&lane[0][threadIdx.x], 32);
    if (gridDim.y == 1) out[c] = __fadd_rn(out[c], dps_round_as(sum, rt));
    else partial[(int64_t)blockIdx.y * cols + c] = sum;
}

template <typename T>
__global__ void col_sum_add_lanes_kernel(int rows, int cols, int64_t ld, int chunk_rows,
                                         const T *x, int rt, float *partial, float *out)
{
    __shared__ float lane[DPS_COLSUM_LANES][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    float acc = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += DPS_COLSUM_LANES)
            acc += load_f32(x[(int64_t)r * ld + c]);
    lane[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) lanes_done(lane, c, cols, rt, partial, out);
}

/* A norm's backward: each element's dx (+= g·γ rounded to rt) written by
 * the thread that sums its g·x and g, as col_sum_add_lanes_kernel's lanes;
 * run y's partial sums of g·x at partial, of g at partial + runs·cols. */
template <typename T>
__global__ void norm_bwd_lanes_kernel(int rows, int cols, int chunk_rows, const float *g,
                                      const T *x, const float *gamma, float *dx, int rt,
                                      float *partial, float *dgamma, float *dbeta)
{
    __shared__ float lane[2][DPS_COLSUM_LANES][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    float gx = 0.0f, gs = 0.0f;
    if (c < cols) {
        float gam = gamma ? gamma[c] : 1.0f;
        for (int r = r0 + threadIdx.y; r < r1; r += DPS_COLSUM_LANES) {
            int64_t i = (int64_t)r * cols + c;
            float gi = g[i];
            if (dgamma) gx += __fmul_rn(gi, load_f32(x[i]));
            gs += gi;
            if (dx) dx[i] = __fadd_rn(dx[i], dps_round_as(gamma ? __fmul_rn(gi, gam) : gi, rt));
        }
    }
    lane[0][threadIdx.y][threadIdx.x] = gx;
    lane[1][threadIdx.y][threadIdx.x] = gs;
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
    if (dgamma) lanes_done(lane[0], c, cols, 0, partial, dgamma);
    if (dbeta) lanes_done(lane[1], c, cols, 0, partial + (int64_t)gridDim.y * cols, dbeta);
}

/* out[c] += the runs' partial sums added in run order, rounded to type rt */
__global__ void col_sum_add_runs_kernel(int cols, int chunks, const float *partial, int rt,
                                        float *out)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols;
         c += (int64_t)gridDim.x * blockDim.x) {
        float acc = partial[c];
        for (int k = 1; k < chunks; k++) acc += partial[(int64_t)k * cols + c];
        out[c] = __fadd_rn(out[c], dps_round_as(acc, rt));
    }
}

static unsigned blocks_for(int64_t n)
{
    int64_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

template <typename T>
static cudaError_t col_sum_add(cudaStream_t s, int rows, int cols, int64_t ld, const T *x, int rt,
                               float *out, float *workspace)
{
    if (cols <= 0 || rows <= 0) return cudaSuccess;
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)p.chunks), block(32, DPS_COLSUM_LANES);
    col_sum_add_lanes_kernel<T><<<grid, block, 0, s>>>(rows, cols, ld, p.chunk_rows, x, rt,
                                                       workspace, out);
    if (p.chunks > 1)
        col_sum_add_runs_kernel<<<blocks_for(cols), kThreads, 0, s>>>(cols, p.chunks, workspace, rt, out);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t norm_bwd(cudaStream_t s, int rows, int cols, const float *g, const T *x,
                            const float *gamma, float *dx, int rt, float *dgamma, float *dbeta,
                            float *workspace)
{
    if (cols <= 0 || rows <= 0) return cudaSuccess;
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)p.chunks), block(32, DPS_COLSUM_LANES);
    norm_bwd_lanes_kernel<T><<<grid, block, 0, s>>>(rows, cols, p.chunk_rows, g, x, gamma, dx, rt,
                                                    workspace, dgamma, dbeta);
    if (p.chunks == 1) return cudaGetLastError();
    float *pg = workspace + (int64_t)p.chunks * cols;
    if (dgamma)
        col_sum_add_runs_kernel<<<blocks_for(cols), kThreads, 0, s>>>(cols, p.chunks, workspace, 0, dgamma);
    if (dbeta)
        col_sum_add_runs_kernel<<<blocks_for(cols), kThreads, 0, s>>>(cols, p.chunks, pg, 0, dbeta);
    return cudaGetLastError();
}

extern "C" {

int64_t dps_k_grad_sums_workspace(int rows, int cols, int norm)
{
    return dps_col_sum_workspace(rows, cols) * (norm ? 2 : 1);
}

cudaError_t dps_k_col_sum_add(cudaStream_t s, int xt, int rt, int rows, int cols, int64_t ld,
                              const void *x, float *out, float *workspace)
{
    if (xt == 0) return col_sum_add(s, rows, cols, ld, (const float *)x, rt, out, workspace);
    if (xt == 2) return col_sum_add(s, rows, cols, ld, (const f16_bits *)x, rt, out, workspace);
    return col_sum_add(s, rows, cols, ld, (const uint16_t *)x, rt, out, workspace);
}

cudaError_t dps_k_norm_bwd(cudaStream_t s, int xt, int rt, int rows, int cols, const float *g,
                           const void *x, const float *gamma, float *dx, float *dgamma,
                           float *dbeta, float *workspace)
{
    if (xt == 0)
        return norm_bwd(s, rows, cols, g, (const float *)x, gamma, dx, rt, dgamma, dbeta, workspace);
    if (xt == 2)
        return norm_bwd(s, rows, cols, g, (const f16_bits *)x, gamma, dx, rt, dgamma, dbeta,
                        workspace);
    return norm_bwd(s, rows, cols, g, (const uint16_t *)x, gamma, dx, rt, dgamma, dbeta, workspace);
}

__global__ void add_round_kernel(int64_t n, float *dst, const float *src, int rt)
{
    GRID_STRIDE(i, n) dst[i] = __fadd_rn(dst[i], dps_round_as(src[i], rt));
}

cudaError_t dps_k_add_round(cudaStream_t s, int64_t n, float *dst, const float *src, int rt)
{
    if (n <= 0) return cudaSuccess;
    add_round_kernel<<<grid_for(n), kThreads, 0, s>>>(n, dst, src, rt);
    return cudaGetLastError();
}

}
