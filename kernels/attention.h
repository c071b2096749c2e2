/* C interface to the fused attention kernels (attention.cu), used by the
 * CUDA backend for a model file's attn op: FlashAttention-2's forward and
 * backward on one tensor of q, k and v a row, no t x t matrix in memory.
 * Every launcher takes its stream and returns the launch status
 * (cudaGetLastError); dt is be_dtype's code (0 fp32, 1 bf16, 2 fp16). */
#ifndef DPS_KERNELS_ATTENTION_H
#define DPS_KERNELS_ATTENTION_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest head dimension the kernels take (a thread holds a row of d in registers). */
#define DPS_ATTN_MAX_D 128

/* Per sample t rows of qkv: [q of each head | k of each head | v of each
 * head], d columns a head; out: t rows of heads·d; lse: [samples][heads][t],
 * each row's log-sum-exp of its scores q·kᵀ/√d (keys after the row masked
 * when causal). */
cudaError_t dps_k_attn_fwd(cudaStream_t s, int64_t samples, int heads, int t, int d, int causal,
                           int dt, const void *qkv, void *out, float *lse);
/* dqkv from dout, qkv, out and lse: two kernels, keys' and values'
 * gradients by key tile, then queries' by query tile, each making the
 * probabilities again from lse and D = rowsum(dout ∘ out). */
cudaError_t dps_k_attn_bwd(cudaStream_t s, int64_t samples, int heads, int t, int d, int causal,
                           int dt, const void *qkv, const void *out, const float *lse,
                           const void *dout, void *dqkv);

#ifdef __cplusplus
}
#endif
#endif
