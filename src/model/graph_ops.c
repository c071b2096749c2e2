/* The parts of a model file's passes that model/graph.c and
 * model/graph_autocast.c share (graph_ops.h): where each op's output and
 * gradient lie, and the fp32 ops that the autocast ones reuse. */
#include <limits.h>

#include "elementwise.h"
#include "model/graph_ops.h"

_Static_assert(MF_RELU == DPS_ACT_RELU && MF_GELU == DPS_ACT_GELU && MF_SOFTMAX == DPS_ACT_SOFTMAX &&
               MF_TANH == DPS_ACT_TANH && MF_SIGMOID == DPS_ACT_SIGMOID &&
               MF_RELU6 == DPS_ACT_RELU6 && MF_SILU == DPS_ACT_SILU &&
               MF_HARDSWISH == DPS_ACT_HARDSWISH && MF_HARDSIGMOID == DPS_ACT_HARDSIGMOID &&
               MF_MISH == DPS_ACT_MISH && MF_FN_COUNT == DPS_ACT_COUNT,
               "model_file.h's mf_fn and elementwise.h's DPS_ACT_* number the functions alike");

#define F(b) ((float *)(b).ptr)

dps_status graph_rows_of(const mf_op *o, int samples, size_t per_sample, int *rows)
{
    size_t r = (size_t)samples * per_sample;
    if (r > INT_MAX)
        return dps_fail(DPS_ERR_USAGE, "op %s: %zu rows at %d samples, more than one pass takes; "
                        "use fewer samples a device", o->name, r, samples);
    *rows = (int)r;
    return DPS_OK;
}

float *graph_out_of(const graph_acts *a, int i)
{
    if (i == a->last) return a->dt && a->dt[i] != BE_F32 ? F(a->out16) : a->logits;
    return F(a->outs) + a->plan.out_at[i] * (size_t)a->max_samples;
}

float *graph_grad_of(const graph_acts *a, int i)
{
    if (i == a->last) return (float *)a->dlogits;
    return F(a->grads) + a->plan.grad_at[i] * (size_t)a->max_samples;
}

const float *graph_input_of(const graph_acts *a, int op_in, const float *x)
{
    return op_in == MF_INPUT ? x : graph_out_of(a, op_in);
}

dps_status graph_act_saved(const graph_bwd_ctx *c, int i, const float *in, float *din,
                           const float **v)
{
    const mf_op *o = &c->f.mf->ops[i];
    const graph_acts *a = c->f.a;
    backend *be = c->f.be;
    int64_t n = (int64_t)c->f.samples * (int64_t)o->out_elems;
    be_dtype t = graph_type_of(a, i);
    *v = in;
    if (!dps_act_keeps_output((int)o->fn)) return DPS_OK;
    *v = i == a->last ? din : graph_out_of(a, i);
    if (i != a->last) return DPS_OK;
    if (t == BE_F32) return be->ops->act(be, c->f.st, (int)o->fn, n, in, din);
    return be->ops->act_half(be, c->f.st, (int)o->fn, t, n, (const uint16_t *)in, (uint16_t *)din);
}

be_dtype graph_type_of(const graph_acts *a, int op_in)
{
    return op_in == MF_INPUT || !a->dt ? BE_F32 : a->dt[op_in];
}

dps_status graph_copy(backend *be, be_stream *st, int dev, float *dst, const float *src, size_t n)
{
    if (dst == src) return DPS_OK;
    return be->ops->copy(be, st, dst, dev, src, dev, n * sizeof(float));
}

const float *graph_tensor_at(const graph_fwd_ctx *c, int t)
{
    return t < 0 ? NULL : c->params + c->l->offset[t];
}

dps_status graph_norm_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y, int dev)
{
    backend *be = c->be;
    int cols = (int)o->c, rows = 0;
    DPS_TRY(graph_rows_of(o, c->samples, o->in_elems / (size_t)o->c, &rows));
    if (o->weight >= 0) DPS_TRY(be->ops->col_scale(be, c->st, rows, cols, in, graph_tensor_at(c, o->weight), y));
    else DPS_TRY(graph_copy(be, c->st, dev, y, in, (size_t)rows * (size_t)cols));
    return o->bias < 0 ? DPS_OK : be->ops->bias_act(be, c->st, rows, cols, y, graph_tensor_at(c, o->bias), NULL);
}

/* y = x + W's elements tiled along the sample (W read at fixed positions) */
dps_status graph_embedding_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y, int dev)
{
    backend *be = c->be;
    const mf_tensor *w = &c->mf->tensors[o->weight];
    float *tiled = F(c->a->cols);
    int cols = 0;
    DPS_TRY(graph_rows_of(o, 1, o->out_elems, &cols));
    DPS_TRY(be->ops->resample(be, c->st, 1, (int64_t)w->numel, (int64_t)o->out_elems,
                              graph_tensor_at(c, o->weight), tiled));
    DPS_TRY(graph_copy(be, c->st, dev, y, in, (size_t)c->samples * o->out_elems));
    return be->ops->bias_act(be, c->st, c->samples, cols, y, tiled, NULL);
}

float *graph_grad_at(const graph_bwd_ctx *c, int t)
{
    return c->grads + c->f.l->offset[t];
}

/* grads of tensor t += the column sums of a rows x cols matrix */
dps_status graph_add_col_sums(const graph_bwd_ctx *c, int t, int rows, int cols, const float *g)
{
    backend *be = c->f.be;
    float *sums = F(c->f.a->cols);
    DPS_TRY(be->ops->col_sum(be, c->f.st, rows, cols, g, sums));
    return be->ops->add(be, c->f.st, cols, graph_grad_at(c, t), sums);
}

dps_status graph_norm_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    int cols = (int)o->c, rows = 0, dev = c->f.a->work.dev;
    DPS_TRY(graph_rows_of(o, c->f.samples, o->in_elems / (size_t)o->c, &rows));
    size_t n = (size_t)rows * (size_t)cols;
    if (o->bias >= 0) DPS_TRY(graph_add_col_sums(c, o->bias, rows, cols, g));
    if (o->weight >= 0) { /* d gamma = column sums of g * x, through the workspace */
        float *gx = F(c->f.a->work);
        DPS_TRY(be->ops->mul(be, st, (int64_t)n, g, in, gx));
        DPS_TRY(graph_add_col_sums(c, o->weight, rows, cols, gx));
    }
    if (!din) return DPS_OK;
    if (o->weight < 0) return graph_copy(be, st, dev, din, g, n);
    return be->ops->col_scale(be, st, rows, cols, g, graph_tensor_at(&c->f, o->weight), din);
}

/* d W: the samples' column sums, each position summed back onto the element
 * it read (the workspace holds them before they are added); d x = g */
dps_status graph_embedding_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    const mf_tensor *w = &c->f.mf->tensors[o->weight];
    float *sums = F(c->f.a->cols), *back = F(c->f.a->work);
    int cols = 0, dev = c->f.a->work.dev;
    DPS_TRY(graph_rows_of(o, 1, o->out_elems, &cols));
    DPS_TRY(be->ops->col_sum(be, st, c->f.samples, cols, g, sums));
    DPS_TRY(be->ops->resample_bwd(be, st, 1, (int64_t)w->numel, (int64_t)o->out_elems, sums, back));
    DPS_TRY(be->ops->add(be, st, (int64_t)w->numel, graph_grad_at(c, o->weight), back));
    return din ? graph_copy(be, st, dev, din, g, (size_t)c->f.samples * o->out_elems) : DPS_OK;
}

/* A recomputing gemm's input made again from its resample's input into
 * *in, as a convolution's backward makes its im2col: at its place in the
 * outputs' arena, alive for this backward alone. */
dps_status graph_again(const graph_bwd_ctx *c, const mf_op *o, const float **in)
{
    const graph_acts *a = c->f.a;
    const mf_op *r = &c->f.mf->ops[o->in];
    float *y = F(a->outs) + a->plan.again_at[o - c->f.mf->ops] * (size_t)a->max_samples;
    *in = y;
    if (graph_type_of(a, o->in) != BE_F32)
        return c->f.be->ops->resample_half(c->f.be, c->f.st, c->f.samples, (int64_t)r->in_elems,
                                           (int64_t)r->out_elems,
                                           (const uint16_t *)graph_input_of(a, r->in, c->f.x),
                                           (uint16_t *)y);
    return c->f.be->ops->resample(c->f.be, c->f.st, c->f.samples, (int64_t)r->in_elems,
                                  (int64_t)r->out_elems, graph_input_of(a, r->in, c->f.x), y);
}
