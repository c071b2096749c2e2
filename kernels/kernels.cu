/* CUDA kernels for the element-wise parts of the model and the optimizers.
 * The math is in elementwise.h (shared with the host backend); this file
 * only maps it onto threads. Launchers follow kernels.h. */
#include "kernels.h"
#include "grid.cuh"

__global__ void bias_act_kernel(int rows, int cols, float *pre, const float *bias, float *out)
{
    int64_t n = (int64_t)rows * cols;
    GRID_STRIDE(i, n) {
        float x = pre[i] + bias[i % cols];
        pre[i] = x;
        if (out) out[i] = dps_gelu(x);
    }
}

__global__ void act_kernel(int fn, int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n) y[i] = dps_act(fn, x[i]);
}

__global__ void act_half_kernel(int fn, int64_t n, const uint16_t *x, uint16_t *y, int f16)
{
    GRID_STRIDE(i, n) y[i] = dps_act_half(fn, x[i], f16);
}

/* Every row of a rows x cols matrix (leading dimension ld) set to `row`. */
template <typename T>
__global__ void fill_rows_kernel(int64_t rows, int cols, const T *row, T *c, int64_t ld)
{
    GRID_STRIDE(i, rows * cols) c[(i / cols) * ld + i % cols] = row[i % cols];
}

__global__ void act_bwd_kernel(int fn, int64_t n, const float *g, const float *v, float *dx)
{
    GRID_STRIDE(i, n) dx[i] = dps_act_bwd(fn, g[i], v[i]);
}

/* Column sums in the order of dps_col_sum_plan_for (elementwise.h): block
 * (x, y) is 32 columns of run y; thread (tx, ty) is column tx's lane ty, so
 * a warp reads 32 consecutive floats of one row. One run: the lanes'
 * combination is the sum; else it is run y's partial sum, which
 * col_sum_runs_kernel adds up in run order. */
__device__ __forceinline__ float as_f32(float x) { return x; }
__device__ __forceinline__ float as_f32(uint16_t x) { return dps_bf16_to_f32(x); }
struct f16_bits { uint16_t v; }; /* an IEEE binary16 element, told apart from bf16's */
__device__ __forceinline__ float as_f32(f16_bits x) { return dps_f16_to_f32(x.v); }

template <typename T>
__global__ void col_sum_lanes_kernel(int rows, int cols, int chunk_rows, const T *x, float *partial)
{
    __shared__ float lane[DPS_COLSUM_LANES][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    float acc = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += DPS_COLSUM_LANES)
            acc += as_f32(x[(int64_t)r * cols + c]);
    lane[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols)
        partial[(int64_t)blockIdx.y * cols + c] = dps_col_sum_lanes(&lane[0][threadIdx.x], 32);
}

/* GELU's backward of one element in T's type: act_bwd_kernel's product in
 * fp32, act_bwd_half_kernel's rounded value in a half type. */
__device__ __forceinline__ float gelu_bwd_of(float dh, float pre) { return dh * dps_gelu_grad(pre); }
__device__ __forceinline__ uint16_t gelu_bwd_of(uint16_t dh, uint16_t pre)
{
    return dps_gelu_bwd_half(dh, pre, 0);
}
__device__ __forceinline__ f16_bits gelu_bwd_of(f16_bits dh, f16_bits pre)
{
    f16_bits g = {dps_gelu_bwd_half(dh.v, pre.v, 1)};
    return g;
}

/* GELU's backward fused with the bias gradient: thread (tx, ty) of block
 * (x, y) takes the elements col_sum_lanes_kernel's would, in the same
 * order, writes each one's dpre and sums what it wrote, so that the sums
 * are col_sum's of dpre bit for bit. dpre may be dh (each element is read
 * and written by one thread). */
template <typename T>
__global__ void gelu_bwd_col_sum_lanes_kernel(int rows, int cols, int chunk_rows, const T *dh,
                                              const T *pre, T *dpre, float *partial)
{
    __shared__ float lane[DPS_COLSUM_LANES][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
    float acc = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += DPS_COLSUM_LANES) {
            int64_t i = (int64_t)r * cols + c;
            T g = gelu_bwd_of(dh[i], pre[i]);
            dpre[i] = g;
            acc += as_f32(g);
        }
    lane[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols)
        partial[(int64_t)blockIdx.y * cols + c] = dps_col_sum_lanes(&lane[0][threadIdx.x], 32);
}

__global__ void col_sum_runs_kernel(int cols, int chunks, const float *partial, float *out)
{
    GRID_STRIDE(c, cols) {
        float acc = partial[c];
        for (int k = 1; k < chunks; k++) acc += partial[(int64_t)k * cols + c];
        out[c] = acc;
    }
}

__device__ float block_reduce(float v, float (*op)(float, float), float init)
{
    __shared__ float shared[32];
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    int nwarps = (blockDim.x + 31) >> 5;
    v = (int)threadIdx.x < nwarps ? shared[threadIdx.x] : init;
    if (warp == 0)
        for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    __shared__ float result;
    if (threadIdx.x == 0) result = v;
    __syncthreads();
    return result;
}

__device__ float op_add(float a, float b) { return a + b; }

__global__ void sum_kernel(int64_t n, const float *x, float *out)
{
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    acc = block_reduce(acc, op_add, 0.0f);
    if (threadIdx.x == 0) *out = acc;
}

__global__ void sgd_kernel(int64_t n, float *p, const float *g, float *buf, dps_opt_hparams h)
{
    GRID_STRIDE(i, n) dps_sgd_update(&p[i], g[i], &buf[i], h);
}

__global__ void adamw_kernel(int64_t n, float *p, const float *g, float *m, float *v,
                             dps_opt_hparams h)
{
    GRID_STRIDE(i, n) dps_adamw_update(&p[i], g[i], &m[i], &v[i], h);
}

__global__ void cast_half_kernel(int64_t n, const float *x, uint16_t *y, int f16)
{
    GRID_STRIDE(i, n) y[i] = dps_to_half(x[i], f16);
}

__global__ void half_to_f32_kernel(int64_t n, const uint16_t *x, float *y, int f16)
{
    GRID_STRIDE(i, n) y[i] = dps_from_half(x[i], f16);
}

/* The casts 8 elements a thread at a time: two float4s and one 16-byte
 * vector of halves (the lower address in the lower bits). */
__device__ __forceinline__ uint32_t half_pair(float lo, float hi, int f16)
{
    return (uint32_t)dps_to_half(lo, f16) | (uint32_t)dps_to_half(hi, f16) << 16;
}

__global__ void cast_half8_kernel(int64_t n8, const float4 *x, uint4 *y, int f16)
{
    GRID_STRIDE(i, n8) {
        float4 a = x[2 * i], b = x[2 * i + 1];
        y[i] = make_uint4(half_pair(a.x, a.y, f16), half_pair(a.z, a.w, f16),
                          half_pair(b.x, b.y, f16), half_pair(b.z, b.w, f16));
    }
}

/* The fp32 values of a 32-bit word's two halves, the lower first. */
__device__ __forceinline__ float2 pair_f32(uint32_t w, int f16)
{
    return make_float2(dps_from_half((uint16_t)w, f16), dps_from_half((uint16_t)(w >> 16), f16));
}

__global__ void half8_to_f32_kernel(int64_t n8, const uint4 *x, float4 *y, int f16)
{
    GRID_STRIDE(i, n8) {
        uint4 h = x[i];
        float2 a = pair_f32(h.x, f16), b = pair_f32(h.y, f16), c = pair_f32(h.z, f16),
               d = pair_f32(h.w, f16);
        y[2 * i] = make_float4(a.x, a.y, b.x, b.y);
        y[2 * i + 1] = make_float4(c.x, c.y, d.x, d.y);
    }
}

__global__ void act_bwd_half_kernel(int fn, int64_t n, const uint16_t *g, const uint16_t *v,
                                    uint16_t *dx, int f16)
{
    GRID_STRIDE(i, n) dx[i] = dps_act_bwd_half(fn, g[i], v[i], f16);
}

/* Every thread that meets a non-finite gradient writes the same 1. */
__global__ void unscale_kernel(int64_t n, float *g, float inv_scale, float *found_inf)
{
    int found = 0;
    GRID_STRIDE(i, n) g[i] = dps_unscale(g[i], inv_scale, &found);
    if (found) *found_inf = 1.0f;
}

__global__ void scale_kernel(int64_t n, float *x, float a)
{
    GRID_STRIDE(i, n) x[i] *= a;
}

__global__ void scale_copy_kernel(int64_t n, float *dst, const float *src, float a)
{
    GRID_STRIDE(i, n) dst[i] = dps_scale_copy(src[i], a);
}

__global__ void add_kernel(int64_t n, float *dst, const float *src)
{
    GRID_STRIDE(i, n) dst[i] += src[i];
}

__global__ void resample_kernel(int64_t samples, int64_t n_in, int64_t n_out, const float *x,
                                float *y)
{
    GRID_STRIDE(t, samples * n_out) {
        int64_t r = t / n_out, i = t % n_out;
        y[t] = x[r * n_in + i % n_in];
    }
}

/* one thread per input element: its sum over the outputs it fed, in order */
__global__ void resample_bwd_kernel(int64_t samples, int64_t n_in, int64_t n_out, const float *dy,
                                    float *dx)
{
    GRID_STRIDE(t, samples * n_in) {
        int64_t r = t / n_in, j = t % n_in;
        float acc = 0.0f;
        for (int64_t i = j; i < n_out; i += n_in) acc += dy[r * n_out + i];
        dx[t] = acc;
    }
}

/* a model file's ops under autocast (backend.h: add_ex, round_half, resample_half) */
__global__ void add_ex_kernel(int64_t n, const void *a, int at, const void *b, int bt, void *y,
                              int yt)
{
    GRID_STRIDE(i, n) dps_store_as(y, i, yt, dps_load_as(a, i, at) + dps_load_as(b, i, bt));
}

__global__ void round_half_kernel(int64_t n, float *x, int f16)
{
    GRID_STRIDE(i, n) x[i] = dps_round_half(x[i], f16);
}

__global__ void resample_half_kernel(int64_t samples, int64_t n_in, int64_t n_out,
                                     const uint16_t *x, uint16_t *y)
{
    GRID_STRIDE(t, samples * n_out) {
        int64_t r = t / n_out, i = t % n_out;
        y[t] = x[r * n_in + i % n_in];
    }
}

__global__ void col_scale_kernel(int64_t rows, int cols, const float *x, const float *g, float *y)
{
    GRID_STRIDE(t, rows * cols) y[t] = x[t] * g[t % cols];
}

/* one thread an element: widened, scaled and shifted in fp32 (dps_norm_affine's
 * __fmul_rn and __fadd_rn, never contracted into an fma), stored once */
__global__ void norm_fwd_kernel(int xt, int yt, int rows, int cols, const void *x,
                                const float *gamma, const float *beta, void *y)
{
    GRID_STRIDE(t, (int64_t)rows * cols)
        dps_store_as(y, t, yt, dps_norm_affine(dps_load_as(x, t, xt), gamma, beta, (int)(t % cols)));
}

__global__ void mul_kernel(int64_t n, const float *a, const float *b, float *y)
{
    GRID_STRIDE(i, n) y[i] = a[i] * b[i];
}

__global__ void row_scale_kernel(int64_t rows, int64_t cols, const float *x, const float *sc, float *y)
{
    GRID_STRIDE(t, rows * cols) y[t] = x[t] * sc[t / cols];
}

/* one thread a row, its columns in order: the host backend's sum, bit for bit */
__global__ void row_dot_add_kernel(int64_t rows, int64_t cols, const float *a, const float *b,
                                   float *out)
{
    GRID_STRIDE(r, rows) {
        float acc = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            acc = __fadd_rn(acc, __fmul_rn(a[r * cols + c], b[r * cols + c]));
        out[r] += acc;
    }
}

__global__ void row_scale_ex_kernel(int64_t rows, int64_t cols, const void *x, int xt,
                                    const void *sc, int sct, void *y, int yt)
{
    GRID_STRIDE(t, rows * cols)
        dps_store_as(y, t, yt, __fmul_rn(dps_load_as(x, t, xt), dps_load_as(sc, t / cols, sct)));
}

/* as row_dot_add_kernel: one thread a row, its columns in order */
__global__ void row_dot_add_ex_kernel(int64_t rows, int64_t cols, const float *a, const void *b,
                                      int bt, int pt, int rt, float *out)
{
    GRID_STRIDE(r, rows) {
        float acc = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            acc = __fadd_rn(acc, dps_round_as(__fmul_rn(a[r * cols + c],
                                                        dps_load_as(b, r * cols + c, bt)), pt));
        out[r] = __fadd_rn(out[r], dps_round_as(acc, rt));
    }
}

__global__ void pixel_scale_ex_kernel(int64_t rows, int64_t pixels, int64_t cols, const void *x,
                                      int xt, const void *sc, int sct, void *y, int yt)
{
    GRID_STRIDE(t, rows * pixels * cols)
        dps_store_as(y, t, yt, __fmul_rn(dps_load_as(x, t, xt),
                                         dps_load_as(sc, t / (pixels * cols) * cols + t % cols, sct)));
}

/* one thread a (row, col), its pixels in order: the host backend's sum */
__global__ void pixel_dot_add_ex_kernel(int64_t rows, int64_t pixels, int64_t cols, const float *a,
                                        const void *b, int bt, int pt, int rt, float *out)
{
    GRID_STRIDE(rc, rows * cols) {
        int64_t r = rc / cols, c = rc % cols;
        float acc = 0.0f;
        for (int64_t p = 0; p < pixels; p++) {
            int64_t t = (r * pixels + p) * cols + c;
            acc = __fadd_rn(acc, dps_round_as(__fmul_rn(a[t], dps_load_as(b, t, bt)), pt));
        }
        out[rc] = __fadd_rn(out[rc], dps_round_as(acc, rt));
    }
}

__global__ void cat_cols_kernel(int64_t rows, int64_t ca, const void *a, int at, int64_t cb,
                                const void *b, int bt, void *y, int yt)
{
    GRID_STRIDE(t, rows * (ca + cb)) {
        int64_t r = t / (ca + cb), c = t % (ca + cb);
        dps_store_as(y, t, yt, c < ca ? dps_load_as(a, r * ca + c, at)
                                      : dps_load_as(b, r * cb + c - ca, bt));
    }
}

__global__ void cat_cols_bwd_kernel(int64_t rows, int64_t ca, int64_t cb, const float *g, float *da,
                                    int dat, float *db, int dbt)
{
    GRID_STRIDE(t, rows * (ca + cb)) {
        int64_t r = t / (ca + cb), c = t % (ca + cb);
        if (c < ca) {
            if (da) da[r * ca + c] = __fadd_rn(da[r * ca + c], dps_round_as(g[t], dat));
        } else if (db) {
            db[r * cb + c - ca] = __fadd_rn(db[r * cb + c - ca], dps_round_as(g[t], dbt));
        }
    }
}

cudaError_t dps_k_pixel_scale_ex(cudaStream_t s, int64_t rows, int64_t pixels, int64_t cols,
                                 const void *x, int xt, const void *sc, int sct, void *y, int yt)
{
    int64_t n = rows * pixels * cols;
    if (n <= 0) return cudaSuccess;
    pixel_scale_ex_kernel<<<grid_for(n), kThreads, 0, s>>>(rows, pixels, cols, x, xt, sc, sct, y, yt);
    return cudaGetLastError();
}

cudaError_t dps_k_pixel_dot_add_ex(cudaStream_t s, int64_t rows, int64_t pixels, int64_t cols,
                                   const float *a, const void *b, int bt, int pt, int rt, float *out)
{
    if (rows * cols <= 0) return cudaSuccess;
    pixel_dot_add_ex_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, pixels, cols, a, b, bt,
                                                                        pt, rt, out);
    return cudaGetLastError();
}

cudaError_t dps_k_cat_cols(cudaStream_t s, int64_t rows, int64_t ca, const void *a, int at,
                           int64_t cb, const void *b, int bt, void *y, int yt)
{
    int64_t n = rows * (ca + cb);
    if (n <= 0) return cudaSuccess;
    cat_cols_kernel<<<grid_for(n), kThreads, 0, s>>>(rows, ca, a, at, cb, b, bt, y, yt);
    return cudaGetLastError();
}

cudaError_t dps_k_cat_cols_bwd(cudaStream_t s, int64_t rows, int64_t ca, int64_t cb, const float *g,
                               float *da, int dat, float *db, int dbt)
{
    int64_t n = rows * (ca + cb);
    if (n <= 0) return cudaSuccess;
    cat_cols_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(rows, ca, cb, g, da, dat, db, dbt);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t col_sum(cudaStream_t s, int rows, int cols, const T *x, float *out, float *workspace)
{
    if (cols <= 0) return cudaSuccess;
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
    if (rows <= 0) return cudaMemsetAsync(out, 0, (size_t)cols * sizeof(float), s);
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)p.chunks), block(32, DPS_COLSUM_LANES);
    float *partial = p.chunks > 1 ? workspace : out;
    col_sum_lanes_kernel<T><<<grid, block, 0, s>>>(rows, cols, p.chunk_rows, x, partial);
    if (p.chunks > 1) col_sum_runs_kernel<<<grid_for(cols), kThreads, 0, s>>>(cols, p.chunks, partial, out);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t gelu_bwd_col_sum(cudaStream_t s, int rows, int cols, const T *dh, const T *pre,
                                    T *dpre, float *out, float *workspace)
{
    if (cols <= 0) return cudaSuccess;
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
    if (rows <= 0) return cudaMemsetAsync(out, 0, (size_t)cols * sizeof(float), s);
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)p.chunks), block(32, DPS_COLSUM_LANES);
    float *partial = p.chunks > 1 ? workspace : out;
    gelu_bwd_col_sum_lanes_kernel<T><<<grid, block, 0, s>>>(rows, cols, p.chunk_rows, dh, pre, dpre,
                                                            partial);
    if (p.chunks > 1) col_sum_runs_kernel<<<grid_for(cols), kThreads, 0, s>>>(cols, p.chunks, partial, out);
    return cudaGetLastError();
}

extern "C" {

cudaError_t dps_k_bias_act(cudaStream_t s, int rows, int cols, float *pre,
                           const float *bias, float *out)
{
    bias_act_kernel<<<grid_for((int64_t)rows * cols), kThreads, 0, s>>>(rows, cols, pre, bias, out);
    return cudaGetLastError();
}

cudaError_t dps_k_act_bwd(cudaStream_t s, int fn, int64_t n, const float *g, const float *v,
                          float *dx)
{
    if (n <= 0) return cudaSuccess;
    act_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(fn, n, g, v, dx);
    return cudaGetLastError();
}

cudaError_t dps_k_col_sum(cudaStream_t s, int rows, int cols, const float *x, float *out,
                          float *workspace)
{
    return col_sum(s, rows, cols, x, out, workspace);
}

cudaError_t dps_k_col_sum_half(cudaStream_t s, int rows, int cols, const uint16_t *x, float *out,
                               float *workspace, int f16)
{
    if (f16) return col_sum(s, rows, cols, (const f16_bits *)x, out, workspace);
    return col_sum(s, rows, cols, x, out, workspace);
}

cudaError_t dps_k_gelu_bwd_col_sum(cudaStream_t s, int rows, int cols, const float *dh,
                                   const float *pre, float *dpre, float *out, float *workspace)
{
    return gelu_bwd_col_sum(s, rows, cols, dh, pre, dpre, out, workspace);
}

cudaError_t dps_k_gelu_bwd_col_sum_half(cudaStream_t s, int rows, int cols, const uint16_t *dh,
                                        const uint16_t *pre, uint16_t *dpre, float *out,
                                        float *workspace, int f16)
{
    if (f16)
        return gelu_bwd_col_sum(s, rows, cols, (const f16_bits *)dh, (const f16_bits *)pre,
                                (f16_bits *)dpre, out, workspace);
    return gelu_bwd_col_sum(s, rows, cols, dh, pre, dpre, out, workspace);
}

cudaError_t dps_k_sum(cudaStream_t s, int64_t n, const float *x, float *out)
{
    sum_kernel<<<1, 1024, 0, s>>>(n, x, out);
    return cudaGetLastError();
}

cudaError_t dps_k_sgd(cudaStream_t s, int64_t n, float *p, const float *g, float *buf,
                      dps_opt_hparams h)
{
    sgd_kernel<<<grid_for(n), kThreads, 0, s>>>(n, p, g, buf, h);
    return cudaGetLastError();
}

cudaError_t dps_k_adamw(cudaStream_t s, int64_t n, float *p, const float *g, float *m,
                        float *v, dps_opt_hparams h)
{
    adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(n, p, g, m, v, h);
    return cudaGetLastError();
}

/* The elements of a cast that go 8 at a time: all but the last n % 8 when
 * both ends are 16-byte aligned, else none. */
static int64_t by_eight(int64_t n, const void *x, const void *y)
{
    return (((uintptr_t)x | (uintptr_t)y) & 15) ? 0 : n / 8 * 8;
}

cudaError_t dps_k_cast_half(cudaStream_t s, int64_t n, const float *x, uint16_t *y, int f16)
{
    if (n <= 0) return cudaSuccess;
    int64_t v = by_eight(n, x, y);
    if (v)
        cast_half8_kernel<<<grid_for(v / 8), kThreads, 0, s>>>(v / 8, (const float4 *)x,
                                                                (uint4 *)y, f16);
    if (n > v) cast_half_kernel<<<grid_for(n - v), kThreads, 0, s>>>(n - v, x + v, y + v, f16);
    return cudaGetLastError();
}

cudaError_t dps_k_half_to_f32(cudaStream_t s, int64_t n, const uint16_t *x, float *y, int f16)
{
    if (n <= 0) return cudaSuccess;
    int64_t v = by_eight(n, x, y);
    if (v)
        half8_to_f32_kernel<<<grid_for(v / 8), kThreads, 0, s>>>(v / 8, (const uint4 *)x,
                                                                  (float4 *)y, f16);
    if (n > v) half_to_f32_kernel<<<grid_for(n - v), kThreads, 0, s>>>(n - v, x + v, y + v, f16);
    return cudaGetLastError();
}

cudaError_t dps_k_act(cudaStream_t s, int fn, int64_t n, const float *x, float *y)
{
    if (n <= 0) return cudaSuccess;
    act_kernel<<<grid_for(n), kThreads, 0, s>>>(fn, n, x, y);
    return cudaGetLastError();
}

cudaError_t dps_k_act_half(cudaStream_t s, int fn, int64_t n, const uint16_t *x, uint16_t *y,
                           int f16)
{
    if (n <= 0) return cudaSuccess;
    act_half_kernel<<<grid_for(n), kThreads, 0, s>>>(fn, n, x, y, f16);
    return cudaGetLastError();
}

cudaError_t dps_k_fill_rows(cudaStream_t s, int rows, int cols, const void *row, void *c, int ld,
                            int elem_bytes)
{
    int64_t n = (int64_t)rows * cols;
    if (n <= 0) return cudaSuccess;
    if (elem_bytes == 2)
        fill_rows_kernel<<<grid_for(n), kThreads, 0, s>>>(rows, cols, (const uint16_t *)row,
                                                          (uint16_t *)c, ld);
    else
        fill_rows_kernel<<<grid_for(n), kThreads, 0, s>>>(rows, cols, (const float *)row,
                                                          (float *)c, ld);
    return cudaGetLastError();
}

cudaError_t dps_k_act_bwd_half(cudaStream_t s, int fn, int64_t n, const uint16_t *g,
                               const uint16_t *v, uint16_t *dx, int f16)
{
    if (n <= 0) return cudaSuccess;
    act_bwd_half_kernel<<<grid_for(n), kThreads, 0, s>>>(fn, n, g, v, dx, f16);
    return cudaGetLastError();
}

cudaError_t dps_k_unscale(cudaStream_t s, int64_t n, float *g, float inv_scale, float *found_inf)
{
    if (n <= 0) return cudaSuccess;
    unscale_kernel<<<grid_for(n), kThreads, 0, s>>>(n, g, inv_scale, found_inf);
    return cudaGetLastError();
}

cudaError_t dps_k_scale(cudaStream_t s, int64_t n, float *x, float a)
{
    scale_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, a);
    return cudaGetLastError();
}

cudaError_t dps_k_scale_copy(cudaStream_t s, int64_t n, float *dst, const float *src, float a)
{
    if (n <= 0) return cudaSuccess;
    scale_copy_kernel<<<grid_for(n), kThreads, 0, s>>>(n, dst, src, a);
    return cudaGetLastError();
}

cudaError_t dps_k_add(cudaStream_t s, int64_t n, float *dst, const float *src)
{
    add_kernel<<<grid_for(n), kThreads, 0, s>>>(n, dst, src);
    return cudaGetLastError();
}

cudaError_t dps_k_resample(cudaStream_t s, int64_t samples, int64_t n_in, int64_t n_out,
                           const float *x, float *y)
{
    if (samples * n_out <= 0) return cudaSuccess;
    resample_kernel<<<grid_for(samples * n_out), kThreads, 0, s>>>(samples, n_in, n_out, x, y);
    return cudaGetLastError();
}

cudaError_t dps_k_resample_bwd(cudaStream_t s, int64_t samples, int64_t n_in, int64_t n_out,
                               const float *dy, float *dx)
{
    if (samples * n_in <= 0) return cudaSuccess;
    resample_bwd_kernel<<<grid_for(samples * n_in), kThreads, 0, s>>>(samples, n_in, n_out, dy, dx);
    return cudaGetLastError();
}

cudaError_t dps_k_add_ex(cudaStream_t s, int64_t n, const void *a, int at, const void *b, int bt,
                         void *y, int yt)
{
    if (n <= 0) return cudaSuccess;
    add_ex_kernel<<<grid_for(n), kThreads, 0, s>>>(n, a, at, b, bt, y, yt);
    return cudaGetLastError();
}

cudaError_t dps_k_round_half(cudaStream_t s, int64_t n, float *x, int f16)
{
    if (n <= 0) return cudaSuccess;
    round_half_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, f16);
    return cudaGetLastError();
}

cudaError_t dps_k_resample_half(cudaStream_t s, int64_t samples, int64_t n_in, int64_t n_out,
                                const uint16_t *x, uint16_t *y)
{
    if (samples * n_out <= 0) return cudaSuccess;
    resample_half_kernel<<<grid_for(samples * n_out), kThreads, 0, s>>>(samples, n_in, n_out, x, y);
    return cudaGetLastError();
}

cudaError_t dps_k_col_scale(cudaStream_t s, int64_t rows, int cols, const float *x, const float *g,
                            float *y)
{
    if (rows * cols <= 0) return cudaSuccess;
    col_scale_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, x, g, y);
    return cudaGetLastError();
}

cudaError_t dps_k_row_scale(cudaStream_t s, int64_t rows, int64_t cols, const float *x,
                            const float *sc, float *y)
{
    if (rows * cols <= 0) return cudaSuccess;
    row_scale_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, x, sc, y);
    return cudaGetLastError();
}

cudaError_t dps_k_row_dot_add(cudaStream_t s, int64_t rows, int64_t cols, const float *a,
                              const float *b, float *out)
{
    if (rows <= 0) return cudaSuccess;
    row_dot_add_kernel<<<grid_for(rows), kThreads, 0, s>>>(rows, cols, a, b, out);
    return cudaGetLastError();
}

cudaError_t dps_k_row_scale_ex(cudaStream_t s, int64_t rows, int64_t cols, const void *x, int xt,
                               const void *sc, int sct, void *y, int yt)
{
    if (rows * cols <= 0) return cudaSuccess;
    row_scale_ex_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, x, xt, sc, sct, y, yt);
    return cudaGetLastError();
}

cudaError_t dps_k_row_dot_add_ex(cudaStream_t s, int64_t rows, int64_t cols, const float *a,
                                 const void *b, int bt, int pt, int rt, float *out)
{
    if (rows <= 0) return cudaSuccess;
    row_dot_add_ex_kernel<<<grid_for(rows), kThreads, 0, s>>>(rows, cols, a, b, bt, pt, rt, out);
    return cudaGetLastError();
}

cudaError_t dps_k_norm_fwd(cudaStream_t s, int xt, int yt, int rows, int cols, const void *x,
                           const float *gamma, const float *beta, void *y)
{
    int64_t n = (int64_t)rows * cols;
    if (n <= 0) return cudaSuccess;
    norm_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(xt, yt, rows, cols, x, gamma, beta, y);
    return cudaGetLastError();
}

cudaError_t dps_k_mul(cudaStream_t s, int64_t n, const float *a, const float *b, float *y)
{
    if (n <= 0) return cudaSuccess;
    mul_kernel<<<grid_for(n), kThreads, 0, s>>>(n, a, b, y);
    return cudaGetLastError();
}

/* Busy for ns nanoseconds of the GPU's global timer: --inject-slowdown. */
__global__ void spin_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

cudaError_t dps_k_spin(cudaStream_t s, double us)
{
    spin_kernel<<<1, 1, 0, s>>>((unsigned long long)(us * 1e3));
    return cudaGetLastError();
}

} /* extern "C" */
