/* The host backend's attention (be_ops.attn, attn_bwd): FlashAttention's
 * tiled algorithm on the CPU, the reference the CUDA kernels
 * (kernels/attention.cu) follow step for step. */
#ifndef DPS_HOST_ATTN_H
#define DPS_HOST_ATTN_H

#include "backend/backend.h"

/* Query and key tiles: rows of q a pass holds, keys a step of the online softmax takes. */
#define HOST_ATTN_TILE 64

/* out and lse from qkv (be_attn says the layout). */
dps_status host_attn_fwd(const be_attn *a, const void *qkv, void *out, float *lse) DPS_MUST_USE;
/* dqkv from dout, qkv, out and lse: P made again tile by tile from lse. */
dps_status host_attn_bwd(const be_attn *a, const void *qkv, const void *out, const float *lse,
                         const void *dout, void *dqkv) DPS_MUST_USE;

#endif
