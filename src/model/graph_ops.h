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
 * input's added into that op's gradient (graph_writes_din says how). */
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
/* The gradient of o's input; NULL for the model's input. */
float *graph_din_grad(const graph_bwd_ctx *c, const mf_op *o);
/* The op whose output's gradient op i's backward gives: its input, or for
 * a direct convolution (plan p's) its resample's input; MF_INPUT: none. */
int graph_grad_input_of(const model_file *mf, const graph_plan *p, int i);
/* The per-sample elements of that gradient. */
size_t graph_din_elems(const model_file *mf, const graph_plan *p, int i);
/* Whether op i's backward writes that gradient into a buffer (a gemm, a
 * direct convolution, a resample, a mul, an fp32 act: graph.c's din, added
 * after), or adds it into that gradient itself (a norm, an add, an
 * embedding, a cat, a half act), or has none (it reads the model's input,
 * or is a skipped resample); dt: the autocast types, NULL in fp32. */
int graph_writes_din(const model_file *mf, const graph_plan *p, const be_dtype *dt, int i);
/* Whether op i's backward begins that gradient (the op is its last
 * reader, reading it once): then it writes it whole, in place. */
int graph_begins_input(const model_file *mf, const graph_plan *p, int i);
/* Whether op i writes that gradient over the gradient itself: it
 * writes one (graph_writes_din), in fp32 (a half attn writes a half one, to
 * be added), and begins it. */
int graph_din_in_place(const model_file *mf, const graph_plan *p, const be_dtype *dt, int i);

/* The fp32 ops (in may be y for the forwards); the backwards add their
 * input's gradient into it themselves, a norm in one pass reading its
 * input in its type, rounding what it adds to that type. */
dps_status graph_norm_fwd(const graph_fwd_ctx *c, const mf_op *o, const void *in, void *y)
    DPS_MUST_USE;
dps_status graph_embedding_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y,
                               int dev) DPS_MUST_USE;
dps_status graph_norm_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g)
    DPS_MUST_USE;
dps_status graph_embedding_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *g) DPS_MUST_USE;
/* An attn op i's forward: y (type t) and its log-sum-exp from qkv (type t);
 * its backward: din (type t; NULL: nothing to do) from g (type t), qkv,
 * its output (as the last op, made again first at its again_at) and the
 * log-sum-exp. */
dps_status graph_attn_fwd(const graph_fwd_ctx *c, int i, const void *qkv, be_dtype t, void *y)
    DPS_MUST_USE;
dps_status graph_attn_bwd(const graph_bwd_ctx *c, int i, const void *qkv, be_dtype t,
                          const void *g, void *din) DPS_MUST_USE;
/* A recomputing gemm's input made again (graph.c's `again`), in its type. */
dps_status graph_again(const graph_bwd_ctx *c, const mf_op *o, const float **in) DPS_MUST_USE;
/* Resample op r's forward on x into y, both of type t: its window
 * (kernels/windowed.h; a max pool's indices at their place in the outputs'
 * arena) or, without one, y[i] = x[i mod n_in]. */
dps_status graph_resample_fwd(const graph_fwd_ctx *c, int r, const void *x, void *y, be_dtype t)
    DPS_MUST_USE;
/* Its backward: din, fp32, the sum of what each input element fed. */
dps_status graph_resample_bwd(const graph_bwd_ctx *c, int r, const float *g, float *din)
    DPS_MUST_USE;

/* model/graph_autocast.c: every op's output type under autocast in half
 * type `half` (graph.h says the rules), into dt[nops]. */
void graph_autocast_types(const model_file *mf, be_dtype half, be_dtype *dt);
/* The bytes of the autocast buffers graph_acts_alloc adds for max_samples
 * samples under plan p (0 in fp32), and their allocation (a->plan's). */
uint64_t graph_autocast_bytes(const model_file *mf, const graph_plan *p, const be_dtype *dt,
                              uint64_t max_samples);
dps_status graph_autocast_alloc(backend *be, int dev, const model_file *mf, graph_acts *a)
    DPS_MUST_USE;
/* Op i's forward under autocast. */
dps_status graph_fwd_half(const graph_fwd_ctx *c, int i) DPS_MUST_USE;
/* Op i's backward under autocast: its output's gradient rounded to its
 * type first, din (NULL: not needed) receives its input's gradient in
 * *din_t, which graph.c rounds to the input's type as it adds it. */
dps_status graph_bwd_half(const graph_bwd_ctx *c, int i, float *din, be_dtype *din_t) DPS_MUST_USE;

#endif
