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
    size_t *again_at;    /* per op that recomputes: where, in the outputs' arena */
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
 * or to the last backward that reads it again (a gemm's, a scaled norm's,
 * an act's and a mul's input, a mul's scale; for a gemm that recomputes its input, the resample's
 * input, and the recomputed input during that backward alone); a gradient
 * from the backward of the last op that
 * reads its op's output (its first writer; its own op's when none does) to
 * its op's backward. Greedy by size, the largest first, each at the lowest
 * offset clear of those placed that are alive with it. */
dps_status graph_plan_make(const model_file *mf, graph_plan *p) DPS_MUST_USE;
void graph_plan_free(graph_plan *p);

#endif
