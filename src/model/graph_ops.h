/* What model/graph.c and model/graph_autocast.c share: the context of one
 * forward or backward pass, where each op's output and gradient lie, and
 * the fp32 ops that the autocast ones reuse (model/graph_ops.c). Private
 * to model/graph*.c. */
#ifndef DPS_GRAPH_OPS_H
#define DPS_GRAPH_OPS_H

#include "model/graph.h"

/* One op of forward: op i's output from its input (x or an op's output). */
typedef struct graph_fwd_ctx {
    backend *be;
    be_stream *st;
    const model_file *mf;
    const graph_layout *l;
    const float *params;
    graph_acts *a;
    int samples;
    const float *x;
} graph_fwd_ctx;

/* One op of backward: its parameters' gradients added into grads, its
 * input's gradient into work (then added to the input op's gradient). */
typedef struct graph_bwd_ctx {
    graph_fwd_ctx f;
    float *grads;
} graph_bwd_ctx;

/* The rows a pass over per_sample elements a sample takes, as the int the backend's ops take. */
dps_status graph_rows_of(const mf_op *o, int samples, size_t per_sample, int *rows) DPS_MUST_USE;
/* Op i's output and its gradient in their arenas (an output of a half
 * type holds its 2-byte elements at the same place); the last op's: the
 * caller's logits (under autocast with a half output: a->out16) and dlogits. */
float *graph_out_of(const graph_acts *a, int i);
float *graph_grad_of(const graph_acts *a, int i);
const float *graph_input_of(const graph_acts *a, int op_in, const float *x);
/* *v: what act op i's backward reads: its output where its function's
 * backward does (dps_act_keeps_output: relu, tanh, sigmoid), else in, its
 * input. The last op's output is the caller's logits, not kept: made again
 * from in into din (in op i's type), which the backward may overwrite. */
dps_status graph_act_saved(const graph_bwd_ctx *c, int i, const float *in, float *din,
                           const float **v) DPS_MUST_USE;
/* The type of op_in's output: fp32 for the model's input, and without autocast. */
be_dtype graph_type_of(const graph_acts *a, int op_in);
/* n floats from src to dst on the device; nothing when they are one buffer. */
dps_status graph_copy(backend *be, be_stream *st, int dev, float *dst, const float *src, size_t n)
    DPS_MUST_USE;
/* Tensor t's parameters, and its gradients; NULL for t < 0. */
const float *graph_tensor_at(const graph_fwd_ctx *c, int t);
float *graph_grad_at(const graph_bwd_ctx *c, int t);
/* grads of tensor t += the column sums of a rows x cols matrix */
dps_status graph_add_col_sums(const graph_bwd_ctx *c, int t, int rows, int cols, const float *g)
    DPS_MUST_USE;

/* The fp32 ops (in may be y for the forwards; for the norm's backward in
 * may be din, the workspace: it reads in before it writes din). */
dps_status graph_norm_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y,
                          int dev) DPS_MUST_USE;
dps_status graph_embedding_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y,
                               int dev) DPS_MUST_USE;
dps_status graph_norm_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g,
                          float *din) DPS_MUST_USE;
dps_status graph_embedding_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *g, float *din)
    DPS_MUST_USE;
/* A recomputing gemm's input made again (graph.c's `again`), in its type. */
dps_status graph_again(const graph_bwd_ctx *c, const mf_op *o, const float **in) DPS_MUST_USE;

/* model/graph_autocast.c: every op's output type under autocast in half
 * type `half` (graph.h says the rules), into dt[nops]. */
void graph_autocast_types(const model_file *mf, be_dtype half, be_dtype *dt);
/* The bytes of the autocast buffers graph_acts_alloc adds for max_samples
 * samples (0 in fp32), and their allocation. */
uint64_t graph_autocast_bytes(const model_file *mf, const be_dtype *dt, uint64_t max_samples);
dps_status graph_autocast_alloc(backend *be, int dev, const model_file *mf, graph_acts *a)
    DPS_MUST_USE;
/* Op i's forward under autocast. */
dps_status graph_fwd_half(const graph_fwd_ctx *c, int i) DPS_MUST_USE;
/* Op i's backward under autocast: its output's gradient rounded to its
 * type first, din (NULL: not needed) receives its input's gradient in
 * *din_t, which graph.c rounds to the input's type as it adds it. */
dps_status graph_bwd_half(const graph_bwd_ctx *c, int i, float *din, be_dtype *din_t) DPS_MUST_USE;

#endif
