/* Where a model file's activations and their gradients live: each op's
 * output and each op's gradient placed in one of two arenas by when it is
 * alive (forward op i at time i, its backward at 2 nops - 1 - i), two alive
 * at once never sharing bytes, as PyTorch's caching allocator reuses what
 * a step has freed. Offsets are in elements a sample. */
#ifndef DPS_GRAPH_PLAN_H
#define DPS_GRAPH_PLAN_H

#include <stddef.h>

#include "core/err.h"
#include "model/model_file.h"

typedef struct graph_plan {
    size_t *out_at;      /* per op but the last: its output's offset in the outputs' arena */
    int *recompute;      /* per op: a gemm whose input, a resample's output (an im2col), its
                            backward makes again from the resample's input, as a convolution's
                            backward does, rather than keeping it from forward */
    size_t *again_at;    /* per op that recomputes: where, in the outputs' arena; an attn
                            that is the last op: where its backward makes its output again
                            (the caller's logits are not kept for backward) */
    size_t *idx_at;      /* per max pool: its int64 indices (2 elements each, kept
                            from its forward to its backward, as max_pool2d_with_indices
                            saves them) at this even offset in the outputs' arena */
    size_t *lse_at;      /* per attn op: its log-sum-exp's offset in the outputs' arena,
                            heads·t floats a sample, alive from its forward to its backward */
    int *direct;         /* per op: a convolution run as the backend's convolution straight
                            from its im2col resample's input (model/graph_conv.h) */
    int *skip;           /* per op: such a convolution's resample, which does not run: no
                            output, no gradient, no forward and no backward */
    size_t *grad_at;     /* per op but the last: its gradient's offset in the gradients' arena */
    int *begins_at, *begins;       /* op i's backward first zeroes the gradients of the ops
                                      begins[begins_at[i] .. begins_at[i + 1]) */
    int *completes_at, *completes; /* and completes the gradients of the tensors
                                      completes[completes_at[i] .. completes_at[i + 1]),
                                      in ready order */
    size_t out_elems;    /* the outputs' arena, elements a sample */
    size_t grad_elems;   /* the gradients' arena, elements a sample */
} graph_plan;

/* An output lives from its op's forward to the last forward that reads it,
 * a direct convolution reading its resample's input,
 * or to the last backward that reads it again (a gemm's, a scaled norm's,
 * an act's, a mul's and an attn's input, a mul's scale, an attn's output
 * and its log-sum-exp; for a gemm that recomputes its input, the resample's
 * input, and the recomputed input during that backward alone; a max pool's
 * indices from its forward to its backward); a gradient
 * from the backward of the last op that
 * reads its op's output (its first writer; its own op's when none does) to
 * its op's backward. Greedy by size, the largest first, each at the lowest
 * offset clear of those placed that are alive with it. */
/* direct_convs: the backend has convolutions (be_ops.conv_fwd), and each
 * convolution that graph_conv_direct allows runs as one (its im2col is
 * neither made nor kept: the resample's input is kept for its backward);
 * 0: every convolution is its im2col GEMM. */
dps_status graph_plan_make(const model_file *mf, int direct_convs, graph_plan *p) DPS_MUST_USE;
void graph_plan_free(graph_plan *p);

#endif
