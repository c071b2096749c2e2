/* Fused scaled dot-product attention (attention.h), FlashAttention-2's
 * algorithm as src/backend/host_attn.c runs it on the CPU: forward a block
 * a tile of query rows, a thread a row, the key and value tiles staged in
 * shared memory, an online softmax over them; backward two kernels, keys'
 * and values' gradients (a thread a key row, query tiles staged) and
 * queries' (a thread a query row, key tiles staged), each making the
 * probabilities again from the log-sum-exp. Operands are read as fp32 (a
 * half one widened, elementwise.h's dps_load_as), every sum is fp32 and
 * each output is rounded once to its type. */
#include <math.h>
#include <stdint.h>

#include "attention.h"
#include "elementwise.h"

namespace dps_attn {

constexpr int ROWS = 64; /* query (forward, dQ) or key (dK, dV) rows a block: a thread each */
constexpr int TILE = 32; /* rows of the other side staged in shared memory a step */

/* Where sample s's head h starts in qkv (its q; k and v hd and 2 hd later),
 * in out, and in lse; the row strides of qkv and out. */
struct layout {
    int64_t q, o, lse, row3, row, hd;
};

__device__ __forceinline__ layout layout_of(int64_t s, int h, int heads, int t, int d)
{
    layout p;
    p.hd = (int64_t)heads * d;
    p.row3 = 3 * p.hd;
    p.row = p.hd;
    p.q = s * t * p.row3 + (int64_t)h * d;
    p.o = s * t * p.row + (int64_t)h * d;
    p.lse = (s * heads + h) * t;
    return p;
}

/* rows [r0, r0 + TILE) of a matrix of d columns at `at` with row stride
 * `stride` into sh[TILE][D] as fp32, by the block's threads; rows past t zeroed */
template <int D>
__device__ void stage(float (*sh)[D], const void *buf, int dt, int64_t at, int64_t stride, int r0,
                      int t, int d)
{
    for (int e = threadIdx.x; e < TILE * d; e += blockDim.x) {
        int r = e / d, c = e % d;
        sh[r][c] = r0 + r < t ? dps_load_as(buf, at + (int64_t)(r0 + r) * stride + c, dt) : 0.0f;
    }
}

/* x[0..d) = a row as fp32, the rest 0 */
template <int D>
__device__ __forceinline__ void load_row(float (&x)[D], const void *buf, int dt, int64_t at, int d)
{
#pragma unroll
    for (int c = 0; c < D; c++) x[c] = c < d ? dps_load_as(buf, at + c, dt) : 0.0f;
}

template <int D>
__device__ __forceinline__ float dot(const float (&x)[D], const float *y)
{
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < D; c++) acc += x[c] * y[c];
    return acc;
}

/* grid (query tiles, heads, samples), ROWS threads: thread i's query row
 * against the key tiles it sees, m and l the running max and sum. */
template <int D>
__global__ void fwd(int heads, int t, int d, int causal, int dt, const void *qkv, void *out,
                    float *lse)
{
    __shared__ float ks[TILE][D], vs[TILE][D];
    int h = blockIdx.y, i0 = blockIdx.x * ROWS, i = i0 + threadIdx.x;
    layout p = layout_of(blockIdx.z, h, heads, t, d);
    float scale = 1.0f / sqrtf((float)d), q[D], acc[D], m = -INFINITY, l = 0.0f;
    if (i < t) load_row(q, qkv, dt, p.q + i * p.row3, d);
    else load_row(q, qkv, dt, 0, 0);
#pragma unroll
    for (int c = 0; c < D; c++) acc[c] = 0.0f;
    int end = causal ? min(t, i0 + ROWS) : t; /* the block's last row sees keys up to it */
    for (int j0 = 0; j0 < end; j0 += TILE) {
        stage<D>(ks, qkv, dt, p.q + p.hd, p.row3, j0, t, d);
        stage<D>(vs, qkv, dt, p.q + 2 * p.hd, p.row3, j0, t, d);
        __syncthreads();
        int nk = i < t ? min(TILE, (causal ? i + 1 : t) - j0) : 0;
        float mt = m, sc[TILE];
        for (int j = 0; j < nk; j++) {
            sc[j] = scale * dot(q, ks[j]);
            mt = fmaxf(mt, sc[j]);
        }
        if (nk > 0) {
            float r = expf(m - mt); /* 0 on the first tile, m = -inf */
            l *= r;
#pragma unroll
            for (int c = 0; c < D; c++) acc[c] *= r;
            for (int j = 0; j < nk; j++) {
                float e = expf(sc[j] - mt);
                l += e;
#pragma unroll
                for (int c = 0; c < D; c++) acc[c] += e * vs[j][c];
            }
            m = mt;
        }
        __syncthreads();
    }
    if (i >= t) return;
    for (int c = 0; c < d; c++) dps_store_as(out, p.o + i * p.row + c, dt, acc[c] / l);
    lse[p.lse + i] = m + logf(l);
}

/* D_i = rowsum(dO_i ∘ O_i) */
__device__ __forceinline__ float row_dot(const void *dout, const void *out, int dt, int64_t at, int d)
{
    float acc = 0.0f;
    for (int c = 0; c < d; c++) acc += dps_load_as(dout, at + c, dt) * dps_load_as(out, at + c, dt);
    return acc;
}

/* grid (key tiles, heads, samples), ROWS threads: thread j's key row's
 * dK_j = Σ_i dS_ij q_i / √d and dV_j = Σ_i P_ij dO_i over the query rows
 * that see it, the query tiles staged with their lse and D. */
template <int D>
__global__ void bwd_kv(int heads, int t, int d, int causal, int dt, const void *qkv,
                       const void *out, const float *lse, const void *dout, void *dqkv)
{
    __shared__ float qs[TILE][D], gs[TILE][D], ls[TILE], ds[TILE];
    int h = blockIdx.y, j0 = blockIdx.x * ROWS, j = j0 + threadIdx.x;
    layout p = layout_of(blockIdx.z, h, heads, t, d);
    float scale = 1.0f / sqrtf((float)d), k[D], v[D], dk[D], dv[D];
    int live = j < t;
    load_row(k, qkv, dt, p.q + p.hd + (live ? j : 0) * p.row3, live ? d : 0);
    load_row(v, qkv, dt, p.q + 2 * p.hd + (live ? j : 0) * p.row3, live ? d : 0);
#pragma unroll
    for (int c = 0; c < D; c++) dk[c] = dv[c] = 0.0f;
    for (int i0 = causal ? j0 / TILE * TILE : 0; i0 < t; i0 += TILE) {
        stage<D>(qs, qkv, dt, p.q, p.row3, i0, t, d);
        stage<D>(gs, dout, dt, p.o, p.row, i0, t, d);
        for (int r = threadIdx.x; r < TILE; r += blockDim.x) {
            int i = i0 + r;
            ls[r] = i < t ? lse[p.lse + i] : 0.0f;
            ds[r] = i < t ? row_dot(dout, out, dt, p.o + i * p.row, d) : 0.0f;
        }
        __syncthreads();
        for (int r = 0; live && r < TILE && i0 + r < t; r++) {
            if (causal && i0 + r < j) continue;
            float pr = expf(scale * dot(k, qs[r]) - ls[r]);
            float dsr = pr * (dot(v, gs[r]) - ds[r]);
#pragma unroll
            for (int c = 0; c < D; c++) {
                dv[c] += pr * gs[r][c];
                dk[c] += dsr * scale * qs[r][c];
            }
        }
        __syncthreads();
    }
    if (!live) return;
    for (int c = 0; c < d; c++) {
        dps_store_as(dqkv, p.q + p.hd + j * p.row3 + c, dt, dk[c]);
        dps_store_as(dqkv, p.q + 2 * p.hd + j * p.row3 + c, dt, dv[c]);
    }
}

/* grid (query tiles, heads, samples), ROWS threads: thread i's query row's
 * dQ_i = Σ_j dS_ij k_j / √d over the keys it sees, the key and value tiles staged. */
template <int D>
__global__ void bwd_q(int heads, int t, int d, int causal, int dt, const void *qkv,
                      const void *out, const float *lse, const void *dout, void *dqkv)
{
    __shared__ float ks[TILE][D], vs[TILE][D];
    int h = blockIdx.y, i0 = blockIdx.x * ROWS, i = i0 + threadIdx.x;
    layout p = layout_of(blockIdx.z, h, heads, t, d);
    int live = i < t;
    float scale = 1.0f / sqrtf((float)d), q[D], g[D], dq[D];
    load_row(q, qkv, dt, p.q + (live ? i : 0) * p.row3, live ? d : 0);
    load_row(g, dout, dt, p.o + (live ? i : 0) * p.row, live ? d : 0);
    float li = live ? lse[p.lse + i] : 0.0f;
    float di = live ? row_dot(dout, out, dt, p.o + i * p.row, d) : 0.0f;
#pragma unroll
    for (int c = 0; c < D; c++) dq[c] = 0.0f;
    int end = causal ? min(t, i0 + ROWS) : t;
    for (int j0 = 0; j0 < end; j0 += TILE) {
        stage<D>(ks, qkv, dt, p.q + p.hd, p.row3, j0, t, d);
        stage<D>(vs, qkv, dt, p.q + 2 * p.hd, p.row3, j0, t, d);
        __syncthreads();
        int nk = live ? min(TILE, (causal ? i + 1 : t) - j0) : 0;
        for (int j = 0; j < nk; j++) {
            float pr = expf(scale * dot(q, ks[j]) - li);
            float dsj = pr * (dot(g, vs[j]) - di);
#pragma unroll
            for (int c = 0; c < D; c++) dq[c] += dsj * scale * ks[j][c];
        }
        __syncthreads();
    }
    if (!live) return;
    for (int c = 0; c < d; c++) dps_store_as(dqkv, p.q + i * p.row3 + c, dt, dq[c]);
}

dim3 grid_of(int64_t samples, int heads, int t)
{
    return dim3((unsigned)((t + ROWS - 1) / ROWS), (unsigned)heads, (unsigned)samples);
}

} // namespace dps_attn

using namespace dps_attn;

/* The kernels instantiated for head dimensions up to 64 and up to 128. */
extern "C" cudaError_t dps_k_attn_fwd(cudaStream_t s, int64_t samples, int heads, int t, int d,
                                      int causal, int dt, const void *qkv, void *out, float *lse)
{
    if (d < 1 || d > DPS_ATTN_MAX_D || samples > 65535 || heads > 65535) return cudaErrorInvalidValue;
    if (samples == 0 || t == 0) return cudaSuccess;
    if (d <= 64) fwd<64><<<grid_of(samples, heads, t), ROWS, 0, s>>>(heads, t, d, causal, dt, qkv, out, lse);
    else fwd<128><<<grid_of(samples, heads, t), ROWS, 0, s>>>(heads, t, d, causal, dt, qkv, out, lse);
    return cudaGetLastError();
}

extern "C" cudaError_t dps_k_attn_bwd(cudaStream_t s, int64_t samples, int heads, int t, int d,
                                      int causal, int dt, const void *qkv, const void *out,
                                      const float *lse, const void *dout, void *dqkv)
{
    if (d < 1 || d > DPS_ATTN_MAX_D || samples > 65535 || heads > 65535) return cudaErrorInvalidValue;
    if (samples == 0 || t == 0) return cudaSuccess;
    dim3 g = grid_of(samples, heads, t);
    if (d <= 64) {
        bwd_kv<64><<<g, ROWS, 0, s>>>(heads, t, d, causal, dt, qkv, out, lse, dout, dqkv);
        bwd_q<64><<<g, ROWS, 0, s>>>(heads, t, d, causal, dt, qkv, out, lse, dout, dqkv);
    } else {
        bwd_kv<128><<<g, ROWS, 0, s>>>(heads, t, d, causal, dt, qkv, out, lse, dout, dqkv);
        bwd_q<128><<<g, ROWS, 0, s>>>(heads, t, d, causal, dt, qkv, out, lse, dout, dqkv);
    }
    return cudaGetLastError();
}
