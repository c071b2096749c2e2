/* The cross-entropy loss's kernels (loss.h): one block per row of logits,
 * 16-byte loads and stores where the row's tensors share an alignment, the
 * row's max and sum of exponentials in one pass (online softmax), the
 * block's partial results combined through warp shuffles. */
#include <stdint.h>

#include "loss.h"

namespace dps_loss {

/* Threads of a row's block: enough for a few float4s each on wide rows. */
unsigned row_threads(int classes)
{
    unsigned t = 32;
    while (t < 1024 && (int)t * 16 < classes) t <<= 1;
    return t;
}

/* A row's softmax statistics: its max and the sum of exp(x - max). */
struct max_sum {
    float m, s;
};

__device__ __forceinline__ max_sum combine(max_sum a, max_sum b)
{
    float m = fmaxf(a.m, b.m);
    float sa = a.m == m ? a.s : a.s * expf(a.m - m);
    float sb = b.m == m ? b.s : b.s * expf(b.m - m);
    return {m, sa + sb};
}

/* One element into a running max and sum: a NaN makes the sum NaN, a
 * -inf adds nothing. */
__device__ __forceinline__ void add_one(max_sum &r, float x)
{
    if (x > r.m) {
        r.s = r.s * expf(r.m - x) + 1.0f;
        r.m = x;
    } else if (x != -INFINITY) {
        r.s += expf(x - r.m);
    }
}

/* The block's combined value, the same in every thread; identity: op's
 * neutral value (the lanes past the block's warps). */
template <typename T, typename Op>
__device__ T block_all(T v, Op op, T identity)
{
    __shared__ T part[32];
    __shared__ T result;
    for (int off = 16; off > 0; off >>= 1) {
        T o;
        o.m = __shfl_xor_sync(0xffffffffu, v.m, off);
        o.s = __shfl_xor_sync(0xffffffffu, v.s, off);
        v = op(v, o);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? part[lane] : identity;
        for (int off = 16; off > 0; off >>= 1) {
            T o;
            o.m = __shfl_xor_sync(0xffffffffu, v.m, off);
            o.s = __shfl_xor_sync(0xffffffffu, v.s, off);
            v = op(v, o);
        }
        if (lane == 0) result = v;
    }
    __syncthreads();
    return result;
}

/* A plain sum over the block, the same in every thread. */
struct sum1 {
    float m, s; /* m unused: the pair layout block_all shuffles */
};

__device__ __forceinline__ sum1 add_sums(sum1 a, sum1 b) { return {0.0f, a.s + b.s}; }

/* The elements of a row before its first 16-byte boundary: the row's
 * tensors are walked in float4s after them when every pointer has the same
 * offset from a boundary (else one float at a time: head = n). */
__device__ __forceinline__ int row_head(int n, const void *a, const void *b, const void *c)
{
    uintptr_t pa = (uintptr_t)a, off = pa & 15;
    int same = (!b || ((uintptr_t)b & 15) == off) && (!c || ((uintptr_t)c & 15) == off);
    if ((pa & 3) || !same) return n;
    int head = (int)(((16 - off) & 15) >> 2);
    return head < n ? head : n;
}

/* f(c, x[c]) for every c of a row of n, in float4s between head and tail. */
template <typename F>
__device__ __forceinline__ void each_of_row(const float *x, int n, int head, F f)
{
    for (int c = threadIdx.x; c < head; c += blockDim.x) f(c, x[c]);
    int nv = (n - head) >> 2, tail = head + 4 * nv;
    const float4 *v = (const float4 *)(x + head);
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float4 q = v[i];
        int c = head + 4 * i;
        f(c, q.x);
        f(c + 1, q.y);
        f(c + 2, q.z);
        f(c + 3, q.w);
    }
    for (int c = tail + threadIdx.x; c < n; c += blockDim.x) f(c, x[c]);
}

/* y[c] = g(c, x[c], z[c]) for every c of a row (z may be NULL: 0 passed),
 * in float4s between head and tail. */
template <typename G>
__device__ __forceinline__ void map_row(const float *x, const float *z, float *y, int n, int head,
                                        G g)
{
    for (int c = threadIdx.x; c < head; c += blockDim.x) y[c] = g(c, x[c], z ? z[c] : 0.0f);
    int nv = (n - head) >> 2, tail = head + 4 * nv;
    const float4 *xv = (const float4 *)(x + head), *zv = z ? (const float4 *)(z + head) : nullptr;
    float4 *yv = (float4 *)(y + head);
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float4 a = xv[i], b = zv ? zv[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        int c = head + 4 * i;
        yv[i] = make_float4(g(c, a.x, b.x), g(c + 1, a.y, b.y), g(c + 2, a.z, b.z),
                            g(c + 3, a.w, b.w));
    }
    for (int c = tail + threadIdx.x; c < n; c += blockDim.x) y[c] = g(c, x[c], z ? z[c] : 0.0f);
}

/* The row's max and sum of exp(x - max), one read of the row. */
__device__ max_sum row_max_sum(const float *x, int n, int head)
{
    max_sum r = {-INFINITY, 0.0f};
    each_of_row(x, n, head, [&](int, float v) { add_one(r, v); });
    return block_all(r, combine, max_sum{-INFINITY, 0.0f});
}

__global__ void log_softmax_kernel(int classes, const float *logits, float *logp)
{
    const float *x = logits + (int64_t)blockIdx.x * classes;
    float *y = logp + (int64_t)blockIdx.x * classes;
    int head = row_head(classes, x, y, NULL);
    max_sum r = row_max_sum(x, classes, head);
    float lse = logf(r.s) + r.m;
    map_row(x, NULL, y, classes, head, [lse](int, float v, float) { return v - lse; });
}

/* Fused softmax cross-entropy (the lean loss): the row's loss, and its
 * gradient (softmax - onehot) * scale, from one read for the statistics and
 * one for the gradient. */
__global__ void xent_kernel(int classes, const float *logits, const int32_t *labels, float scale,
                            float *dlogits, float *row_loss)
{
    const float *x = logits + (int64_t)blockIdx.x * classes;
    float *dx = dlogits + (int64_t)blockIdx.x * classes;
    int head = row_head(classes, x, dx, NULL), label = labels[blockIdx.x];
    max_sum r = row_max_sum(x, classes, head);
    float mx = r.m, sum = r.s;
    if (threadIdx.x == 0) row_loss[blockIdx.x] = logf(sum) + mx - x[label];
    __syncthreads(); /* dlogits may be logits: the label's logit read first */
    map_row(x, NULL, dx, classes, head, [=](int c, float v, float) {
        return (expf(v - mx) / sum - (c == label ? 1.0f : 0.0f)) * scale;
    });
}

/* nll's forward and its gradient's non-zeros (the rest zeroed before). */
__global__ void nll_pick_kernel(int rows, int classes, const float *logp, const int32_t *labels,
                                float scale, float *row_loss, float *dlogp)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int64_t at = (int64_t)r * classes + labels[r];
    row_loss[r] = -logp[at];
    dlogp[at] = -scale;
}

/* dlogits = dlogp - exp(logp) * (row sum of dlogp) */
__global__ void log_softmax_bwd_kernel(int classes, const float *logp, const float *dlogp,
                                       float *dlogits)
{
    int64_t base = (int64_t)blockIdx.x * classes;
    const float *g = dlogp + base, *lp = logp + base;
    float *y = dlogits + base;
    int head = row_head(classes, g, lp, y);
    sum1 acc = {0.0f, 0.0f};
    each_of_row(g, classes, head, [&](int, float v) { acc.s += v; });
    float sum = block_all(acc, add_sums, sum1{0.0f, 0.0f}).s;
    map_row(g, lp, y, classes, head, [sum](int, float gv, float l) { return gv - expf(l) * sum; });
}

} // namespace dps_loss

using namespace dps_loss;

extern "C" {

cudaError_t dps_k_xent(cudaStream_t s, int rows, int classes, const float *logits,
                       const int32_t *labels, float scale, float *dlogits, float *row_loss)
{
    if (rows <= 0) return cudaSuccess;
    xent_kernel<<<rows, row_threads(classes), 0, s>>>(classes, logits, labels, scale, dlogits,
                                                      row_loss);
    return cudaGetLastError();
}

cudaError_t dps_k_log_softmax(cudaStream_t s, int rows, int classes, const float *logits,
                              float *logp)
{
    if (rows <= 0) return cudaSuccess;
    log_softmax_kernel<<<rows, row_threads(classes), 0, s>>>(classes, logits, logp);
    return cudaGetLastError();
}

cudaError_t dps_k_nll(cudaStream_t s, int rows, int classes, const float *logp,
                      const int32_t *labels, float scale, float *row_loss, float *dlogp)
{
    if (rows <= 0 || classes <= 0) return cudaSuccess;
    cudaError_t e = cudaMemsetAsync(dlogp, 0, (size_t)rows * (size_t)classes * sizeof(float), s);
    if (e != cudaSuccess) return e;
    nll_pick_kernel<<<(rows + 255) / 256, 256, 0, s>>>(rows, classes, logp, labels, scale, row_loss,
                                                       dlogp);
    return cudaGetLastError();
}

cudaError_t dps_k_log_softmax_bwd(cudaStream_t s, int rows, int classes, const float *logp,
                                  const float *dlogp, float *dlogits)
{
    if (rows <= 0) return cudaSuccess;
    log_softmax_bwd_kernel<<<rows, row_threads(classes), 0, s>>>(classes, logp, dlogp, dlogits);
    return cudaGetLastError();
}

} /* extern "C" */
