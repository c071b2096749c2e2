/* The parts of a model file's passes that model/graph.c and
 * model/graph_autocast.c share (graph_ops.h): where each op's output and
 * gradient lie, and the fp32 ops that the autocast ones reuse. */
#include <limits.h>

#include "elementwise.h"
#include "model/graph_ops.h"
#include "model/window_geom.h"

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

/* y = x·γ + β in one pass: x read in its type, y written in the norm's
 * (fp32 under autocast too, as layer_norm's output) */
dps_status graph_norm_fwd(const graph_fwd_ctx *c, const mf_op *o, const void *in, void *y)
{
    backend *be = c->be;
    int cols = (int)o->c, rows = 0;
    DPS_TRY(graph_rows_of(o, c->samples, o->in_elems / (size_t)o->c, &rows));
    return be->ops->norm_fwd(be, c->st, graph_type_of(c->a, o->in),
                             graph_type_of(c->a, (int)(o - c->mf->ops)), rows, cols, in,
                             graph_tensor_at(c, o->weight), graph_tensor_at(c, o->bias), y);
}

/* y = x + W's elements tiled along the sample (W read at fixed positions):
 * W added to each sample's first numel(W) elements, then to the next. */
dps_status graph_embedding_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y, int dev)
{
    backend *be = c->be;
    size_t numel = c->mf->tensors[o->weight].numel, out = o->out_elems;
    const float *w = graph_tensor_at(c, o->weight);
    int cols = 0;
    DPS_TRY(graph_rows_of(o, 1, out, &cols));
    DPS_TRY(graph_copy(be, c->st, dev, y, in, (size_t)c->samples * out));
    if (out <= numel) return be->ops->bias_act(be, c->st, c->samples, cols, y, w, NULL);
    for (int s = 0; s < c->samples; s++)
        for (size_t at = 0; at < out; at += numel)
            DPS_TRY(be->ops->add(be, c->st, (int64_t)(out - at < numel ? out - at : numel),
                                 y + (size_t)s * out + at, w));
    return DPS_OK;
}

float *graph_grad_at(const graph_bwd_ctx *c, int t)
{
    return c->grads + c->f.l->offset[t];
}

dps_status graph_add_col_sums(const graph_bwd_ctx *c, int t, int rows, int cols, const float *g)
{
    return c->f.be->ops->col_sum_add(c->f.be, c->f.st, BE_F32, BE_F32, rows, cols, cols, g,
                                     graph_grad_at(c, t));
}

float *graph_din_grad(const graph_bwd_ctx *c, const mf_op *o)
{
    return o->in == MF_INPUT ? NULL : graph_grad_of(c->f.a, o->in);
}

dps_status graph_norm_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g)
{
    int cols = (int)o->c, rows = 0;
    be_dtype in_t = graph_type_of(c->f.a, o->in);
    DPS_TRY(graph_rows_of(o, c->f.samples, o->in_elems / (size_t)o->c, &rows));
    return c->f.be->ops->norm_bwd(c->f.be, c->f.st, in_t, in_t, rows, cols, g, in,
                                  graph_tensor_at(&c->f, o->weight), graph_din_grad(c, o),
                                  o->weight < 0 ? NULL : graph_grad_at(c, o->weight),
                                  o->bias < 0 ? NULL : graph_grad_at(c, o->bias));
}

/* d W: the samples' column sums added onto the elements each position
 * read, numel(W) positions at a time; d x += g (rounded to x's type) */
dps_status graph_embedding_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *g)
{
    backend *be = c->f.be;
    size_t numel = c->f.mf->tensors[o->weight].numel, out = o->out_elems;
    float *din = graph_din_grad(c, o), *dw = graph_grad_at(c, o->weight);
    int cols = 0;
    DPS_TRY(graph_rows_of(o, 1, out, &cols));
    for (size_t at = 0; at < out; at += numel)
        DPS_TRY(be->ops->col_sum_add(be, c->f.st, BE_F32, BE_F32, c->f.samples,
                                     (int)(out - at < numel ? out - at : numel), cols, g + at, dw));
    if (!din) return DPS_OK;
    return be->ops->add_round(be, c->f.st, graph_type_of(c->f.a, o->in),
                              (int64_t)((size_t)c->f.samples * out), din, g);
}

int graph_grad_input_of(const model_file *mf, const graph_plan *p, int i)
{
    const mf_op *o = &mf->ops[i];
    return p->direct[i] ? mf->ops[o->in].in : o->in;
}

size_t graph_din_elems(const model_file *mf, const graph_plan *p, int i)
{
    const mf_op *o = &mf->ops[i];
    return p->direct[i] ? mf->ops[o->in].in_elems : o->in_elems;
}

int graph_writes_din(const model_file *mf, const graph_plan *p, const be_dtype *dt, int i)
{
    const mf_op *o = &mf->ops[i];
    if (p->skip[i] || graph_grad_input_of(mf, p, i) == MF_INPUT) return 0;
    switch (o->kind) {
    case MF_GEMM: case MF_RESAMPLE: case MF_MUL: case MF_ATTN: return 1;
    case MF_ACT: return !dt || dt[i] == BE_F32; /* a half act adds its own */
    default: return 0;                          /* norm, add, embedding, cat: add their own */
    }
}

int graph_din_in_place(const model_file *mf, const graph_plan *p, const be_dtype *dt, int i)
{
    int half_attn = mf->ops[i].kind == MF_ATTN && dt && dt[i] != BE_F32;
    return graph_writes_din(mf, p, dt, i) && !half_attn && graph_begins_input(mf, p, i);
}

int graph_begins_input(const model_file *mf, const graph_plan *p, int i)
{
    const mf_op *o = &mf->ops[i];
    int two = o->kind == MF_ADD || o->kind == MF_MUL || o->kind == MF_CAT;
    int in = graph_grad_input_of(mf, p, i);
    if (in == MF_INPUT || (two && o->from == o->in)) return 0;
    for (int b = p->begins_at[i]; b < p->begins_at[i + 1]; b++)
        if (p->begins[b] == in) return 1;
    return 0;
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
    return graph_resample_fwd(&c->f, o->in, graph_input_of(a, r->in, c->f.x), y,
                              graph_type_of(a, o->in));
}

static int64_t *indices_of(const graph_acts *a, const mf_op *r, int i)
{
    if (r->win.pool != MF_POOL_MAX) return NULL;
    return (int64_t *)(F(a->outs) + a->plan.idx_at[i] * (size_t)a->max_samples);
}

dps_status graph_resample_fwd(const graph_fwd_ctx *c, int r, const void *x, void *y, be_dtype t)
{
    const mf_op *o = &c->mf->ops[r];
    backend *be = c->be;
    if (o->win.c) {
        dps_window w = mf_window_geom(&o->win);
        return be->ops->window(be, c->st, &w, c->samples, t, x, y, indices_of(c->a, o, r));
    }
    if (t != BE_F32)
        return be->ops->resample_half(be, c->st, c->samples, (int64_t)o->in_elems,
                                      (int64_t)o->out_elems, x, y);
    return be->ops->resample(be, c->st, c->samples, (int64_t)o->in_elems, (int64_t)o->out_elems,
                             x, y);
}

dps_status graph_resample_bwd(const graph_bwd_ctx *c, int r, const float *g, float *din)
{
    const mf_op *o = &c->f.mf->ops[r];
    backend *be = c->f.be;
    if (!din) return DPS_OK;
    if (o->win.c) {
        dps_window w = mf_window_geom(&o->win);
        return be->ops->window_bwd(be, c->f.st, &w, c->f.samples, g, indices_of(c->f.a, o, r), din);
    }
    return be->ops->resample_bwd(be, c->f.st, c->f.samples, (int64_t)o->in_elems,
                                 (int64_t)o->out_elems, g, din);
}

static be_attn attn_of(const mf_op *o, int samples, be_dtype t)
{
    return (be_attn){.samples = samples, .heads = (int)o->heads, .t = (int)o->t, .d = (int)o->d,
                     .causal = o->causal, .dt = t};
}

/* Op i's log-sum-exp in the outputs' arena. */
static float *lse_of(const graph_acts *a, int i)
{
    return F(a->outs) + a->plan.lse_at[i] * (size_t)a->max_samples;
}

dps_status graph_attn_fwd(const graph_fwd_ctx *c, int i, const void *qkv, be_dtype t, void *y)
{
    be_attn at = attn_of(&c->mf->ops[i], c->samples, t);
    return c->be->ops->attn(c->be, c->st, &at, qkv, y, lse_of(c->a, i));
}

dps_status graph_attn_bwd(const graph_bwd_ctx *c, int i, const void *qkv, be_dtype t,
                          const void *g, void *din)
{
    const graph_acts *a = c->f.a;
    backend *be = c->f.be;
    be_attn at = attn_of(&c->f.mf->ops[i], c->f.samples, t);
    const void *out = graph_out_of(a, i);
    if (!din) return DPS_OK;
    if (i == a->last) { /* the caller's logits are not kept: the output made again */
        float *y = F(a->outs) + a->plan.again_at[i] * (size_t)a->max_samples;
        DPS_TRY(be->ops->attn(be, c->f.st, &at, qkv, y, lse_of(a, i)));
        out = y;
    }
    return be->ops->attn_bwd(be, c->f.st, &at, qkv, out, lse_of(a, i), g, din);
}
