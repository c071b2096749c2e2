/* A model file's forward and backward on a backend (see graph.h). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elementwise.h"
#include "model/graph.h"
#include "core/util.h"
#include "model/graph_conv.h"
#include "model/graph_ops.h"

#define F(b) ((float *)(b).ptr)
/* The generator's streams of a model file's tensors, RNG_GRAPH_PARAMS + t:
 * above every step's input and label streams (2 and 3 + step << 8). */
#define RNG_GRAPH_PARAMS ((uint64_t)1 << 40)

dps_status graph_layout_make(const model_file *mf, graph_layout *l)
{
    int n = mf->ntensors, *order = malloc((size_t)n * sizeof *order);
    l->offset = malloc((size_t)n * sizeof *l->offset);
    l->total = 0;
    if (!order || !l->offset) {
        free(order);
        graph_layout_free(l);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory laying out %s's parameters", mf->name);
    }
    model_file_bucket_order(mf, order);
    for (int i = 0; i < n; i++) {
        l->offset[order[i]] = l->total;
        l->total += mf->tensors[order[i]].numel;
    }
    free(order);
    return DPS_OK;
}

void graph_layout_free(graph_layout *l)
{
    free(l->offset);
    l->offset = NULL;
    l->total = 0;
}

void graph_init_params(const model_file *mf, const graph_layout *l, uint64_t seed, float *params)
{
    for (int t = 0; t < mf->ntensors; t++) {
        const mf_tensor *ts = &mf->tensors[t];
        size_t fan_in = ts->ndims > 1 ? ts->numel / (size_t)ts->dims[0] : ts->numel;
        float bound = 1.0f / sqrtf((float)fan_in);
        for (size_t i = 0; i < ts->numel; i++)
            params[l->offset[t] + i] = bound * dps_uniform(seed, RNG_GRAPH_PARAMS + (uint64_t)t, i);
    }
}

/* The elements a sample of the largest gradient contribution that op
 * backward cannot write in place: its input's gradient (a direct
 * convolution's: its resample's input's) begun by a later op, from a kind
 * that writes rather than adds (graph_writes_din). */
static size_t contrib_elems(const model_file *mf, const graph_plan *p, const be_dtype *dt)
{
    size_t most = 0;
    for (int i = 0; i < mf->nops; i++) {
        size_t din = graph_din_elems(mf, p, i);
        if (graph_writes_din(mf, p, dt, i) && !graph_din_in_place(mf, p, dt, i) && din > most)
            most = din;
    }
    return most;
}

/* Under autocast in prec's half type: each op's output type (malloc'd
 * into *dt); fp32: *dt NULL. */
static dps_status autocast_types(const model_file *mf, dps_precision prec, be_dtype *half,
                                 be_dtype **dt)
{
    *half = prec == PREC_BF16 ? BE_BF16 : prec == PREC_FP16 ? BE_F16 : BE_F32;
    *dt = NULL;
    if (*half == BE_F32) return DPS_OK;
    *dt = malloc((size_t)mf->nops * sizeof **dt);
    if (!*dt) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %s's op types", mf->name);
    graph_autocast_types(mf, *half, *dt);
    return DPS_OK;
}

int graph_direct_convs(const backend *be)
{
    return be && be->ops->conv_fwd != NULL;
}

uint64_t graph_acts_bytes(const model_file *mf, uint64_t max_samples, dps_precision prec,
                          int direct_convs)
{
    size_t total;
    graph_plan p;
    be_dtype half, *dt;
    if (autocast_types(mf, prec, &half, &dt) != DPS_OK) return UINT64_MAX;
    if (graph_plan_make(mf, direct_convs, &p) != DPS_OK) {
        free(dt);
        return UINT64_MAX;
    }
    total = (p.out_elems + p.grad_elems + contrib_elems(mf, &p, dt)) * (size_t)max_samples * sizeof(float);
    if (dt) total += graph_autocast_bytes(mf, &p, dt, max_samples);
    graph_plan_free(&p);
    free(dt);
    return total;
}

dps_status graph_acts_alloc(backend *be, int dev, const model_file *mf, int max_samples,
                            dps_precision prec, graph_acts *a)
{
    memset(a, 0, sizeof *a);
    a->max_samples = max_samples;
    a->dev = dev;
    a->last = mf->nops - 1;
    DPS_TRY(autocast_types(mf, prec, &a->half, &a->dt));
    /* a backend with convolutions runs a model file's as they are, without im2col */
    dps_status rc0 = graph_plan_make(mf, graph_direct_convs(be), &a->plan);
    if (rc0) {
        free(a->dt);
        a->dt = NULL;
        return rc0;
    }
    size_t s = (size_t)max_samples * sizeof(float), contrib = contrib_elems(mf, &a->plan, a->dt);
    dps_status rc = DPS_OK;
    if (a->plan.out_elems) rc = be_buf_alloc(be, dev, s * a->plan.out_elems, "activations", &a->outs);
    if (!rc && a->plan.grad_elems)
        rc = be_buf_alloc(be, dev, s * a->plan.grad_elems, "activation gradients", &a->grads);
    if (!rc && contrib) rc = be_buf_alloc(be, dev, s * contrib, "activation gradient contributions", &a->contrib);
    if (!rc && a->dt) rc = graph_autocast_alloc(be, dev, mf, a);
    if (!rc && dps_test_plant("graph_null_stream") && a->outs.ptr) /* the workspace zeroed on no stream */
        rc = be->ops->memset0(be, NULL, a->outs.ptr, a->outs.bytes);
    if (rc) graph_acts_free(be, a);
    return rc;
}

void graph_acts_free(backend *be, graph_acts *a)
{
    be_buf_free(be, &a->outs);
    be_buf_free(be, &a->grads);
    graph_plan_free(&a->plan);
    be_buf_free(be, &a->contrib);
    dps_buf *half[] = {&a->w16, &a->g16, &a->x16, &a->out16, &a->dlast};
    for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) be_buf_free(be, half[i]);
    free(a->dt);
    memset(a, 0, sizeof *a);
}

/* A grouped gemm (a grouped or depthwise convolution): group j's columns
 * of y, n/g of them, are its k/g columns of x times its n/g rows of W, one
 * GEMM a group on the rows' strides; then the bias. */
static dps_status gemm_groups_fwd(const graph_fwd_ctx *c, const mf_op *o, int rows, const float *in,
                                  float *y)
{
    backend *be = c->be;
    int k = (int)o->k, n = (int)o->n, kg = (int)(o->k / o->g), ng = (int)(o->n / o->g);
    const float *w = graph_tensor_at(c, o->weight);
    for (int j = 0; j < (int)o->g; j++)
        DPS_TRY(be->ops->gemm(be, c->st, 0, 1, rows, ng, kg, 1.0f, in + (size_t)j * kg, k,
                              w + (size_t)j * ng * kg, kg, 0.0f, y + (size_t)j * ng, n));
    return o->bias < 0 ? DPS_OK : be->ops->bias_act(be, c->st, rows, n, y, graph_tensor_at(c, o->bias), NULL);
}

/* The stream's fp32 GEMMs set to TF32 or not for op o, as PyTorch's flags
 * choose for a convolution or a Linear or matmul (--tf32). */
static dps_status gemm_math(backend *be, be_stream *st, const model_file *mf, const graph_acts *a,
                            const mf_op *o)
{
    int conv = model_file_is_conv(mf, (int)(o - mf->ops));
    return be->ops->gemm_tf32(be, st, dps_tf32_for(a->tf32, conv));
}

/* y = x·Wᵀ (+ b: addmm, the bias added before the product is stored), by
 * groups when it has them, or without a weight the batched GEMM of x's two
 * halves. */
static dps_status gemm_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y)
{
    backend *be = c->be;
    int m = (int)o->m, k = (int)o->k, n = (int)o->n, rows = 0;
    DPS_TRY(gemm_math(be, c->st, c->mf, c->a, o));
    if (o->weight >= 0 && o->g > 1) {
        DPS_TRY(graph_rows_of(o, c->samples, (size_t)o->m, &rows));
        return gemm_groups_fwd(c, o, rows, in, y);
    }
    if (o->weight >= 0) {
        DPS_TRY(graph_rows_of(o, c->samples, (size_t)o->m, &rows));
        const float *w = graph_tensor_at(c, o->weight);
        if (o->bias >= 0)
            return be->ops->gemm_bias(be, c->st, 0, 1, rows, n, k, in, BE_F32, k, w, BE_F32, k,
                                      graph_tensor_at(c, o->bias), y, BE_F32, n);
        return be->ops->gemm(be, c->st, 0, 1, rows, n, k, 1.0f, in, k, w, k, 0.0f, y, n);
    }
    size_t a_elems = (size_t)(m * (int64_t)k), b_elems = (size_t)(k * (int64_t)n);
    for (int s = 0; s < c->samples; s++)
        for (int j = 0; j < (int)o->b; j++) {
            const float *A = in + (size_t)s * o->in_elems + (size_t)j * a_elems;
            const float *B = in + (size_t)s * o->in_elems + (size_t)o->b * a_elems + (size_t)j * b_elems;
            float *C = y + (size_t)s * o->out_elems + (size_t)j * m * (size_t)n;
            DPS_TRY(be->ops->gemm(be, c->st, 0, 0, m, n, k, 1.0f, A, k, B, n, 0.0f, C, n));
        }
    return DPS_OK;
}

/* Op i's unit entered through the sharded strategy's window, if it has one. */
static dps_status enter(const graph_acts *a, int i, int backward, const float **params,
                        float **grads)
{
    const net_window *w = a->window;
    if (!w || w->unit_of[i] < 0) return DPS_OK;
    return w->enter(w->ctx, w->unit_of[i], backward, params, grads);
}

/* y[i] = x[i] * s[i / (n / n_s)]: each of s's elements scales its run of
 * x; over pixels (pixels=P), y[p,c] = x[p,c] * s[c] in each sample */
static dps_status mul_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y)
{
    size_t ns = o->from == MF_INPUT ? c->mf->input : c->mf->ops[o->from].out_elems;
    if (o->pixels > 1)
        return c->be->ops->pixel_scale_ex(c->be, c->st, c->samples, o->pixels, (int64_t)ns, in, BE_F32,
                                          graph_input_of(c->a, o->from, c->x), BE_F32, y, BE_F32);
    return c->be->ops->row_scale(c->be, c->st, (int64_t)((size_t)c->samples * ns),
                                 (int64_t)(o->out_elems / ns), in, graph_input_of(c->a, o->from, c->x), y);
}

/* Each sample's y = its x, then its other operand's (an op's output, or a
 * tensor's elements, the same for every sample); over pixels (pixels=P),
 * each pixel's channels of x, then its channels of the other operand */
static dps_status cat_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y, int dev)
{
    size_t tail = o->out_elems - o->in_elems;
    const float *other = o->weight >= 0 ? graph_tensor_at(c, o->weight) : graph_input_of(c->a, o->from, c->x);
    if (o->pixels > 1)
        return c->be->ops->cat_cols(c->be, c->st, (int64_t)c->samples * o->pixels,
                                    (int64_t)o->in_elems / o->pixels, in, BE_F32,
                                    (int64_t)tail / o->pixels, other, BE_F32, y, BE_F32);
    for (int s = 0; s < c->samples; s++) {
        float *ys = y + (size_t)s * o->out_elems;
        DPS_TRY(graph_copy(c->be, c->st, dev, ys, in + (size_t)s * o->in_elems, o->in_elems));
        size_t at = o->weight >= 0 ? 0 : (size_t)s * tail;
        DPS_TRY(graph_copy(c->be, c->st, dev, ys + o->in_elems, other + at, tail));
    }
    return DPS_OK;
}

/* The elements of op o's other operand (an add's, a mul's, a cat's), per sample. */
static size_t other_elems(const model_file *mf, const mf_op *o)
{
    if (o->kind != MF_ADD && o->kind != MF_MUL && o->kind != MF_CAT) return 0;
    if (o->kind == MF_CAT) return o->out_elems - o->in_elems;
    return o->from == MF_INPUT ? mf->input : mf->ops[o->from].out_elems;
}

/* Op o's forward over samples for the trace: its GEMM FLOP, and bytes with
 * each operand read and its output written once, 4 bytes an element. */
static void op_cost(const model_file *mf, const mf_op *o, int samples, double *flop, double *bytes)
{
    double params = (o->weight >= 0 ? (double)mf->tensors[o->weight].numel : 0) +
                    (o->bias >= 0 ? (double)mf->tensors[o->bias].numel : 0);
    double per = (double)(o->in_elems + o->out_elems + other_elems(mf, o));
    *flop = mf_op_flops(o) * samples;
    *bytes = 4.0 * (per * samples + params);
}

/* Its backward's: a GEMM's two products (one without its input's gradient:
 * the weight's alone, or none without a weight), an attn's 2.5 times its
 * forward's (FlashAttention-2's count: five products of t x t by d for
 * forward's two), none without its input's gradient; twice the forward's bytes
 * (the output's gradient and what forward read, in; their gradients, out). */
static dps_status trace_begin(const graph_fwd_ctx *c, const mf_op *o, op_dir dir)
{
    double flop, bytes;
    op_cost(c->mf, o, c->samples, &flop, &bytes);
    if (dir == OP_BACKWARD) {
        int din = o->in != MF_INPUT;
        flop *= o->kind == MF_ATTN ? 2.5 * din : o->weight >= 0 ? 1 + din : 2 * din;
        bytes *= 2;
    }
    return op_trace_begin(c->a->trace, mf_kind_names[o->kind], dir, flop, bytes);
}

static dps_status op_fwd(const graph_fwd_ctx *c, int i)
{
    if (c->a->plan.direct[i]) return graph_conv_fwd(c, i);
    if (c->a->dt) return graph_fwd_half(c, i);
    const mf_op *o = &c->mf->ops[i];
    backend *be = c->be;
    const float *in = graph_input_of(c->a, o->in, c->x);
    float *y = graph_out_of(c->a, i);
    int dev = c->a->dev;
    size_t n = (size_t)c->samples * o->out_elems;
    switch (o->kind) {
    case MF_GEMM: return gemm_fwd(c, o, in, y);
    case MF_RESAMPLE: return graph_resample_fwd(c, i, in, y, BE_F32);
    case MF_NORM: return graph_norm_fwd(c, o, in, y);
    case MF_ACT: return be->ops->act(be, c->st, (int)o->fn, (int64_t)n, in, y);
    case MF_ADD:
        DPS_TRY(graph_copy(be, c->st, dev, y, in, n));
        return be->ops->add(be, c->st, (int64_t)n, y, graph_input_of(c->a, o->from, c->x));
    case MF_EMBEDDING: return graph_embedding_fwd(c, o, in, y, dev);
    case MF_MUL: return mul_fwd(c, o, in, y);
    case MF_CAT: return cat_fwd(c, o, in, y, dev);
    case MF_ATTN: return graph_attn_fwd(c, i, in, BE_F32, y);
    case MF_KIND_COUNT: break;
    }
    return dps_fail(DPS_ERR_RUNTIME, "op %s: kind %d has no forward", o->name, (int)o->kind);
}

dps_status graph_forward(backend *be, be_stream *st, const model_file *mf, const graph_layout *l,
                         const float *params, graph_acts *a, int samples, const float *x,
                         float *logits)
{
    if (samples > a->max_samples)
        return dps_fail(DPS_ERR_RUNTIME, "graph_forward: %d samples, activations for %d", samples,
                        a->max_samples);
    a->logits = logits;
    graph_fwd_ctx c = {be, st, mf, l, params, a, samples, x};
    for (int i = 0; i < mf->nops; i++) {
        if (a->plan.skip[i]) continue; /* a direct convolution's im2col: not made */
        DPS_TRY(enter(a, i, 0, &c.params, NULL));
        DPS_TRY(trace_begin(&c, &mf->ops[i], OP_FORWARD));
        DPS_TRY(op_fwd(&c, i));
        DPS_TRY(op_trace_end(a->trace));
    }
    if (graph_type_of(a, a->last) == BE_F32) return DPS_OK; /* logits.float() */
    return be->ops->cast(be, st, (int64_t)samples * (int64_t)mf->ops[a->last].out_elems,
                         a->out16.ptr, a->half, logits, BE_F32);
}

/* A grouped gemm's backward: group j's d W rows and its k/g columns of d x
 * from its n/g columns of g, one GEMM each a group; the bias's column sums
 * over all n. */
static dps_status gemm_groups_bwd(const graph_bwd_ctx *c, const mf_op *o, int rows, const float *in,
                                  const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    int k = (int)o->k, n = (int)o->n, kg = (int)(o->k / o->g), ng = (int)(o->n / o->g);
    const float *w = graph_tensor_at(&c->f, o->weight);
    float *dw = graph_grad_at(c, o->weight);
    for (int j = 0; j < (int)o->g; j++) {
        size_t wj = (size_t)j * ng * kg;
        DPS_TRY(be->ops->gemm(be, st, 1, 0, ng, kg, rows, 1.0f, g + (size_t)j * ng, n,
                              in + (size_t)j * kg, k, 1.0f, dw + wj, kg));
        if (din)
            DPS_TRY(be->ops->gemm(be, st, 0, 0, rows, kg, ng, 1.0f, g + (size_t)j * ng, n, w + wj, kg,
                                  0.0f, din + (size_t)j * kg, k));
    }
    return o->bias < 0 ? DPS_OK : graph_add_col_sums(c, o->bias, rows, n, g);
}

static dps_status gemm_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    int m = (int)o->m, k = (int)o->k, n = (int)o->n, rows = 0;
    DPS_TRY(gemm_math(be, st, c->f.mf, c->f.a, o));
    if (o->weight >= 0 && o->g > 1) {
        DPS_TRY(graph_rows_of(o, c->f.samples, (size_t)o->m, &rows));
        return gemm_groups_bwd(c, o, rows, in, g, din);
    }
    if (o->weight >= 0) {
        DPS_TRY(graph_rows_of(o, c->f.samples, (size_t)o->m, &rows));
        DPS_TRY(be->ops->gemm(be, st, 1, 0, n, k, rows, 1.0f, g, n, in, k, 1.0f, graph_grad_at(c, o->weight), k));
        if (o->bias >= 0) DPS_TRY(graph_add_col_sums(c, o->bias, rows, n, g));
        if (!din) return DPS_OK;
        return be->ops->gemm(be, st, 0, 0, rows, k, n, 1.0f, g, n, graph_tensor_at(&c->f, o->weight), k, 0.0f,
                             din, k);
    }
    if (!din) return DPS_OK;
    size_t a_elems = (size_t)(m * (int64_t)k), b_elems = (size_t)(k * (int64_t)n);
    for (int s = 0; s < c->f.samples; s++)
        for (int j = 0; j < (int)o->b; j++) {
            size_t at_a = (size_t)s * o->in_elems + (size_t)j * a_elems;
            size_t at_b = (size_t)s * o->in_elems + (size_t)o->b * a_elems + (size_t)j * b_elems;
            const float *G = g + (size_t)s * o->out_elems + (size_t)j * m * (size_t)n;
            DPS_TRY(be->ops->gemm(be, st, 0, 1, m, k, n, 1.0f, G, n, in + at_b, n, 0.0f, din + at_a, k));
            DPS_TRY(be->ops->gemm(be, st, 1, 0, k, n, m, 1.0f, in + at_a, k, G, n, 0.0f, din + at_b, n));
        }
    return DPS_OK;
}

/* A mul's backward: d s[j] += the sum of g·x over its run (into s's op's
 * gradient, as an add's other operand), d x = g scaled as forward scaled x */
static dps_status mul_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g, float *din)
{
    backend *be = c->f.be;
    size_t ns = o->from == MF_INPUT ? c->f.mf->input : c->f.mf->ops[o->from].out_elems;
    int64_t rows = (int64_t)((size_t)c->f.samples * ns), cols = (int64_t)(o->out_elems / ns);
    const float *s = graph_input_of(c->f.a, o->from, c->f.x);
    if (o->pixels > 1) { /* over pixels: d s[c] the sum of g·x over the pixels */
        if (o->from != MF_INPUT)
            DPS_TRY(be->ops->pixel_dot_add_ex(be, c->f.st, c->f.samples, o->pixels, (int64_t)ns, g, in,
                                              BE_F32, BE_F32, BE_F32, graph_grad_of(c->f.a, o->from)));
        return din ? be->ops->pixel_scale_ex(be, c->f.st, c->f.samples, o->pixels, (int64_t)ns, g, BE_F32,
                                             s, BE_F32, din, BE_F32) : DPS_OK;
    }
    if (o->from != MF_INPUT)
        DPS_TRY(be->ops->row_dot_add(be, c->f.st, rows, cols, g, in, graph_grad_of(c->f.a, o->from)));
    return din ? be->ops->row_scale(be, c->f.st, rows, cols, g, graph_input_of(c->f.a, o->from, c->f.x), din)
               : DPS_OK;
}

/* A cat's backward: each sample's head of g added to its input's gradient,
 * its tail to the other operand's (the tensor's: summed over the samples) */
static dps_status cat_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *g)
{
    backend *be = c->f.be;
    size_t tail = o->out_elems - o->in_elems;
    float *din = graph_din_grad(c, o);
    if (o->pixels > 1) /* over pixels: each pixel's head and tail */
        return be->ops->cat_cols_bwd(be, c->f.st, (int64_t)c->f.samples * o->pixels,
                                     (int64_t)o->in_elems / o->pixels, (int64_t)tail / o->pixels, g, din, BE_F32,
                                     o->from == MF_INPUT ? NULL : graph_grad_of(c->f.a, o->from), BE_F32);
    for (int s = 0; s < c->f.samples; s++) {
        const float *gs = g + (size_t)s * o->out_elems;
        if (din) DPS_TRY(be->ops->add(be, c->f.st, (int64_t)o->in_elems, din + (size_t)s * o->in_elems, gs));
        float *dother = o->weight >= 0 ? graph_grad_at(c, o->weight)
                      : o->from == MF_INPUT ? NULL : graph_grad_of(c->f.a, o->from) + (size_t)s * tail;
        if (dother) DPS_TRY(be->ops->add(be, c->f.st, (int64_t)tail, dother, gs + o->in_elems));
    }
    return DPS_OK;
}

/* Op i's backward from its output's gradient; din (NULL: the input's is not
 * needed, or the op adds it itself: graph_writes_din) receives its input's. */
static dps_status op_bwd(const graph_bwd_ctx *c, int i, float *din)
{
    const mf_op *o = &c->f.mf->ops[i];
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    const float *in = graph_input_of(c->f.a, o->in, c->f.x), *g = graph_grad_of(c->f.a, i);
    size_t n = (size_t)c->f.samples * o->out_elems;
    switch (o->kind) {
    case MF_GEMM:
        if (c->f.a->plan.recompute[i]) DPS_TRY(graph_again(c, o, &in));
        return gemm_bwd(c, o, in, g, din);
    case MF_RESAMPLE: return graph_resample_bwd(c, i, g, din);
    case MF_NORM: return graph_norm_bwd(c, o, in, g);
    case MF_ACT: {
        const float *v;
        if (!din) return DPS_OK;
        DPS_TRY(graph_act_saved(c, i, in, din, &v));
        return be->ops->act_bwd(be, st, (int)o->fn, (int64_t)n, g, v, din);
    }
    case MF_ADD:
        if (o->from != MF_INPUT) DPS_TRY(be->ops->add(be, st, (int64_t)n, graph_grad_of(c->f.a, o->from), g));
        return o->in != MF_INPUT ? be->ops->add(be, st, (int64_t)n, graph_grad_of(c->f.a, o->in), g) : DPS_OK;
    case MF_EMBEDDING: return graph_embedding_bwd(c, o, g);
    case MF_MUL: return mul_bwd(c, o, in, g, din);
    case MF_CAT: return cat_bwd(c, o, g);
    case MF_ATTN: return graph_attn_bwd(c, i, in, BE_F32, g, din);
    case MF_KIND_COUNT: break;
    }
    return dps_fail(DPS_ERR_RUNTIME, "op %s: kind %d has no backward", o->name, (int)o->kind);
}

/* din made op i's input's gradient (a direct convolution's: its
 * resample's input's), rounded first to that input's type (a gradient has
 * its tensor's type) unless it has it already: in place where it is that
 * gradient (op i's backward began it), else added to it. */
static dps_status add_input_grad(const graph_bwd_ctx *c, int i, float *din, be_dtype din_t)
{
    backend *be = c->f.be;
    const graph_acts *a = c->f.a;
    const model_file *mf = c->f.mf;
    int in = graph_grad_input_of(mf, &a->plan, i);
    float *g = graph_grad_of(a, in);
    int64_t n = (int64_t)((size_t)c->f.samples * graph_din_elems(mf, &a->plan, i));
    be_dtype in_t = graph_type_of(a, in);
    if (din == g && din_t != BE_F32)
        return dps_fail(DPS_ERR_RUNTIME, "op %s: a half gradient written over the fp32 one of its "
                        "input; its backward must write fp32 there (model/graph*.c)", mf->ops[i].name);
    if (din_t != BE_F32) return be->ops->add_ex(be, c->f.st, n, g, BE_F32, din, din_t, g, BE_F32);
    if (in_t != BE_F32) DPS_TRY(be->ops->round_half(be, c->f.st, in_t, n, din));
    return din == g ? DPS_OK : be->ops->add(be, c->f.st, n, g, din);
}

/* Where op i's backward writes its input's gradient: nowhere where it has
 * none or adds it itself; the gradient itself where op i begins it; else
 * the contributions buffer, from which it is added. */
static float *din_of(const graph_bwd_ctx *c, int i)
{
    const graph_acts *a = c->f.a;
    if (!graph_writes_din(c->f.mf, &a->plan, a->dt, i)) return NULL;
    if (graph_din_in_place(c->f.mf, &a->plan, a->dt, i))
        return graph_grad_of(a, graph_grad_input_of(c->f.mf, &a->plan, i));
    return F(a->contrib);
}

/* Op i's backward: the gradients it begins zeroed first, then its own, its
 * input's added, and a hook for each tensor it completed, in ready order. */
static dps_status backward_op(const graph_bwd_ctx *c, int i, graph_grad_hook hook, void *ctx)
{
    const mf_op *o = &c->f.mf->ops[i];
    backend *be = c->f.be;
    graph_acts *a = c->f.a;
    const graph_plan *p = &a->plan;
    if (p->skip[i]) return DPS_OK; /* a direct convolution's im2col: nothing to do */
    float *din = din_of(c, i);
    DPS_TRY(trace_begin(&c->f, o, OP_BACKWARD));
    for (int b = p->begins_at[i]; b < p->begins_at[i + 1]; b++) {
        float *begun = graph_grad_of(a, p->begins[b]);
        if (begun == din) continue; /* written whole by this backward */
        DPS_TRY(be->ops->memset0(be, c->f.st, begun,
                                 (size_t)c->f.samples * c->f.mf->ops[p->begins[b]].out_elems * sizeof(float)));
    }
    be_dtype din_t = BE_F32;
    if (p->direct[i]) DPS_TRY(graph_conv_bwd(c, i, din));
    else if (a->dt) DPS_TRY(graph_bwd_half(c, i, din, &din_t));
    else DPS_TRY(op_bwd(c, i, din));
    if (din) DPS_TRY(add_input_grad(c, i, din, din_t));
    DPS_TRY(op_trace_end(a->trace));
    for (int t = p->completes_at[i]; hook && t < p->completes_at[i + 1]; t++)
        DPS_TRY(hook(ctx, p->completes[t]));
    return DPS_OK;
}

dps_status graph_backward(backend *be, be_stream *st, const model_file *mf, const graph_layout *l,
                          const float *params, graph_acts *a, int samples, const float *x,
                          const float *dlogits, float *grads, graph_grad_hook hook, void *hook_ctx)
{
    graph_bwd_ctx c = {{be, st, mf, l, params, a, samples, x}, grads};
    a->dlogits = dlogits;
    if (!a->window) DPS_TRY(be->ops->memset0(be, st, grads, l->total * sizeof(float)));
    for (int i = mf->nops - 1; i >= 0; i--) {
        DPS_TRY(enter(a, i, 1, &c.f.params, &c.grads));
        DPS_TRY(backward_op(&c, i, hook, hook_ctx));
    }
    return DPS_OK;
}
