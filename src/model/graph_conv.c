/* A convolution through the backend's conv ops, reading its im2col's input (see graph_conv.h). */
#include <limits.h>

#include "model/graph_conv.h"

int graph_conv_direct(const model_file *mf, int j)
{
    if (!model_file_is_conv(mf, j)) return 0;
    const mf_op *o = &mf->ops[j], *r = &mf->ops[o->in];
    const mf_window *w = &r->win;
    if (w->c <= 0 || w->pool != MF_POOL_NONE || w->sh < 1 || w->sw < 1 || w->dh < 1 || w->dw < 1)
        return 0;
    int64_t oh = (w->h + 2 * w->ph - w->dh * (w->kh - 1) - 1) / w->sh + 1;
    int64_t ow = (w->w + 2 * w->pw - w->dw * (w->kw - 1) - 1) / w->sw + 1;
    int64_t g = o->g > 0 ? o->g : 1;
    if (o->k != w->kh * w->kw * w->c || o->m != oh * ow || w->c % g || o->n % g ||
        r->in_elems != (size_t)(w->h * w->w * w->c) || o->b > 1)
        return 0;
    int64_t dims[] = {w->c, w->h, w->w, w->kh, w->kw, o->n, oh, ow};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        if (dims[d] < 1 || dims[d] > INT_MAX) return 0;
    for (int i = 0; i < mf->nops; i++) /* its im2col is read by it alone */
        if (i != j && (mf->ops[i].in == o->in || mf->ops[i].from == o->in)) return 0;
    return 1;
}

/* Op o's convolution over samples in type t (TF32 as --tf32 sets a convolution's). */
static be_conv conv_of(const model_file *mf, const graph_acts *a, const mf_op *o, int samples,
                       be_dtype t)
{
    const mf_window *w = &mf->ops[o->in].win;
    be_conv cv = {
        .n = samples, .c = (int)w->c, .h = (int)w->h, .w = (int)w->w,
        .k = (int)o->n, .r = (int)w->kh, .s = (int)w->kw,
        .pad_h = (int)w->ph, .pad_w = (int)w->pw, .str_h = (int)w->sh, .str_w = (int)w->sw,
        .dil_h = (int)w->dh, .dil_w = (int)w->dw, .groups = o->g > 0 ? (int)o->g : 1,
        .t = t, .tf32 = t == BE_F32 && dps_tf32_for(a->tf32, 1),
    };
    return cv;
}

/* The resample's input (the convolution's) and its type. */
static const float *conv_input(const graph_acts *a, const model_file *mf, const mf_op *o,
                               const float *x, be_dtype *t)
{
    int src = mf->ops[o->in].in;
    *t = graph_type_of(a, src);
    return graph_input_of(a, src, x);
}

/* Under autocast: the input in the half type, itself or cast into buf
 * (room for it in the half type); the weight and bias cast into w16 (the
 * bias after the weight), as the gemm's forward casts them. */
static dps_status half_operands(const graph_fwd_ctx *c, const mf_op *o, void *buf,
                                const void **x16, int cast_params)
{
    backend *be = c->be;
    graph_acts *a = c->a;
    be_dtype xt;
    const float *x = conv_input(a, c->mf, o, c->x, &xt);
    *x16 = x;
    size_t xn = (size_t)c->samples * c->mf->ops[o->in].in_elems;
    if (xt != a->half) {
        DPS_TRY(be->ops->cast(be, c->st, (int64_t)xn, x, xt, buf, a->half));
        *x16 = buf;
    }
    if (!cast_params) return DPS_OK;
    int64_t nw = (int64_t)c->mf->tensors[o->weight].numel;
    DPS_TRY(be->ops->cast(be, c->st, nw, graph_tensor_at(c, o->weight), BE_F32, a->w16.ptr, a->half));
    if (o->bias < 0) return DPS_OK;
    return be->ops->cast(be, c->st, o->n, graph_tensor_at(c, o->bias), BE_F32,
                         (uint16_t *)a->w16.ptr + nw, a->half);
}

dps_status graph_conv_fwd(const graph_fwd_ctx *c, int i)
{
    const mf_op *o = &c->mf->ops[i];
    backend *be = c->be;
    graph_acts *a = c->a;
    void *y = graph_out_of(a, i);
    if (!a->dt) {
        be_dtype xt;
        const float *x = conv_input(a, c->mf, o, c->x, &xt);
        be_conv cv = conv_of(c->mf, a, o, c->samples, BE_F32);
        return be->ops->conv_fwd(be, c->st, &cv, x, graph_tensor_at(c, o->weight),
                                 o->bias < 0 ? NULL : graph_tensor_at(c, o->bias), y);
    }
    /* the output gradient's half buffer is free in forward: the input's cast */
    const void *x16;
    DPS_TRY(half_operands(c, o, a->g16.ptr, &x16, 1));
    be_conv cv = conv_of(c->mf, a, o, c->samples, a->half);
    const uint16_t *w16 = a->w16.ptr;
    return be->ops->conv_fwd(be, c->st, &cv, x16, w16,
                             o->bias < 0 ? NULL : w16 + c->mf->tensors[o->weight].numel, y);
}

static dps_status conv_bwd_f32(const graph_bwd_ctx *c, const mf_op *o, const float *g, float *din)
{
    backend *be = c->f.be;
    be_dtype xt;
    const float *x = conv_input(c->f.a, c->f.mf, o, c->f.x, &xt);
    be_conv cv = conv_of(c->f.mf, c->f.a, o, c->f.samples, BE_F32);
    int rows = 0;
    DPS_TRY(be->ops->conv_bwd_filter(be, c->f.st, &cv, x, g, 1, graph_grad_at(c, o->weight)));
    if (o->bias >= 0) {
        DPS_TRY(graph_rows_of(o, c->f.samples, (size_t)o->m, &rows));
        DPS_TRY(graph_add_col_sums(c, o->bias, rows, (int)o->n, g));
    }
    return din ? be->ops->conv_bwd_data(be, c->f.st, &cv, g, graph_tensor_at(&c->f, o->weight), din)
               : DPS_OK;
}

/* grads of tensor t += the nt half values at h, widened (a cast's backward). */
static dps_status widen_into(const graph_bwd_ctx *c, int t, int64_t nt, const uint16_t *h)
{
    float *g = graph_grad_at(c, t);
    return c->f.be->ops->add_ex(c->f.be, c->f.st, nt, g, BE_F32, h, c->f.a->half, g, BE_F32);
}

/* Under autocast, as the gemm's: the output gradient cast into g16; the
 * input, an fp32 one cast into x16; the filter's gradient in the half
 * type into w16, widened; the bias's column sums rounded once and added;
 * then the weight cast again into w16 and the input's gradient in the
 * half type into x16 (its cast input read), widened into din: fp32, as
 * graph.c's din may be the input's fp32 gradient itself. */
static dps_status conv_bwd_half(const graph_bwd_ctx *c, const mf_op *o, const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    graph_acts *a = c->f.a;
    be_dtype H = a->half;
    int64_t nw = (int64_t)c->f.mf->tensors[o->weight].numel, n = (int64_t)o->n;
    int rows = 0;
    uint16_t *g16 = a->g16.ptr, *w16 = a->w16.ptr, *x16 = a->x16.ptr;
    const void *x;
    DPS_TRY(graph_rows_of(o, c->f.samples, (size_t)o->m, &rows));
    DPS_TRY(be->ops->cast(be, st, (int64_t)rows * n, g, BE_F32, g16, H));
    DPS_TRY(half_operands(&c->f, o, x16, &x, 0));
    be_conv cv = conv_of(c->f.mf, a, o, c->f.samples, H);
    DPS_TRY(be->ops->conv_bwd_filter(be, st, &cv, x, g16, 0, w16));
    DPS_TRY(widen_into(c, o->weight, nw, w16));
    if (o->bias >= 0) DPS_TRY(be->ops->col_sum_add(be, st, H, H, rows, (int)n, n, g16, graph_grad_at(c, o->bias)));
    if (!din) return DPS_OK;
    DPS_TRY(be->ops->cast(be, st, nw, graph_tensor_at(&c->f, o->weight), BE_F32, w16, H));
    DPS_TRY(be->ops->conv_bwd_data(be, st, &cv, g16, w16, x16));
    int64_t nx = (int64_t)c->f.samples * (int64_t)c->f.mf->ops[o->in].in_elems;
    return be->ops->cast(be, st, nx, x16, H, din, BE_F32);
}

dps_status graph_conv_bwd(const graph_bwd_ctx *c, int i, float *din)
{
    const mf_op *o = &c->f.mf->ops[i];
    const float *g = graph_grad_of(c->f.a, i);
    return c->f.a->dt ? conv_bwd_half(c, o, g, din) : conv_bwd_f32(c, o, g, din);
}
