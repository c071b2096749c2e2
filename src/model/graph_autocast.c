/* A model file's ops as under torch.autocast in bf16 or fp16 (graph.h says
 * the rules; docs/model-file.md, "Half precision", has them as a table):
 * each op's output type, the buffers autocast adds, and each op's forward
 * and backward, reusing graph.c's fp32 ops where an op runs in fp32. */
#include <stdlib.h>

#include "elementwise.h"
#include "model/graph_ops.h"

#define U16(p) ((uint16_t *)(p))
#define CU16(p) ((const uint16_t *)(p))

void graph_autocast_types(const model_file *mf, be_dtype half, be_dtype *dt)
{
    for (int i = 0; i < mf->nops; i++) {
        const mf_op *o = &mf->ops[i];
        be_dtype in = o->in == MF_INPUT ? BE_F32 : dt[o->in];
        int two = o->kind == MF_ADD || o->kind == MF_MUL || (o->kind == MF_CAT && o->weight < 0);
        be_dtype from = !two || o->from == MF_INPUT ? BE_F32 : dt[o->from]; /* cat weight=T: fp32 */
        switch (o->kind) {
        case MF_GEMM: case MF_ATTN: dt[i] = half; break;    /* autocast's lower-precision list */
        case MF_RESAMPLE: case MF_ACT: dt[i] = in; break;   /* in the input's type */
        case MF_ADD: case MF_MUL: case MF_CAT:              /* promotion (cat: the promote list) */
            dt[i] = in == half && from == half ? half : BE_F32;
            break;
        default: dt[i] = BE_F32;                            /* norm, embedding: fp32 */
        }
    }
}

/* The largest gemm weight and bias (halves); whether a batched or grouped
 * gemm or an attn reads fp32 (cast into x16 first). */
static size_t largest_weight(const model_file *mf, const be_dtype *dt, int *fp32_batched)
{
    size_t most = 0;
    *fp32_batched = 0;
    for (int i = 0; i < mf->nops; i++) {
        const mf_op *o = &mf->ops[i];
        if (o->kind == MF_ATTN) *fp32_batched |= o->in == MF_INPUT || dt[o->in] == BE_F32;
        if (o->kind != MF_GEMM) continue;
        if (o->weight < 0 || o->g > 1)
            *fp32_batched |= o->in == MF_INPUT || dt[o->in] == BE_F32;
        if (o->weight < 0) continue;
        size_t n = mf->tensors[o->weight].numel + (size_t)o->n;
        if (n > most) most = n;
    }
    return most;
}

/* The largest per-sample input or output of any op (but the im2col of a
 * direct convolution of plan p's, neither made nor read). */
static size_t widest_elems(const model_file *mf, const graph_plan *p)
{
    size_t most = mf->input;
    for (int i = 0; i < mf->nops; i++) {
        if (mf->ops[i].in_elems > most && !p->direct[i]) most = mf->ops[i].in_elems;
        if (mf->ops[i].out_elems > most && !p->skip[i]) most = mf->ops[i].out_elems;
    }
    return most;
}

/* Whether plan p runs any convolution directly (graph_conv.c: its input
 * cast and its input's gradient in the half type in x16). */
static int any_direct(const model_file *mf, const graph_plan *p)
{
    for (int i = 0; i < mf->nops; i++)
        if (p->direct[i]) return 1;
    return 0;
}

/* Whether op o's backward reads its output gradient rounded in fp32 (a
 * gemm and an act cast it to the half type themselves). */
static int reads_rounded(const mf_op *o)
{
    return o->kind == MF_RESAMPLE || o->kind == MF_ADD || o->kind == MF_MUL || o->kind == MF_CAT;
}

/* w16, g16, x16 (when a batched or grouped gemm reads fp32, or a
 * convolution runs directly), out16 (when the last op is half) and dlast
 * (when its backward reads its gradient rounded), under plan p. */
static void autocast_sizes(const model_file *mf, const graph_plan *p, const be_dtype *dt,
                           uint64_t max_samples, uint64_t bytes[5])
{
    int fp32_batched, half_last = dt[mf->nops - 1] != BE_F32;
    const mf_op *last = &mf->ops[mf->nops - 1];
    uint64_t wide = max_samples * (uint64_t)widest_elems(mf, p) * 2;
    bytes[0] = (uint64_t)largest_weight(mf, dt, &fp32_batched) * 2;
    bytes[1] = wide;
    bytes[2] = fp32_batched || any_direct(mf, p) ? wide : 0;
    bytes[3] = half_last ? max_samples * last->out_elems * 2 : 0;
    bytes[4] = half_last && reads_rounded(last) ? max_samples * last->out_elems * sizeof(float) : 0;
}

uint64_t graph_autocast_bytes(const model_file *mf, const graph_plan *p, const be_dtype *dt,
                              uint64_t max_samples)
{
    uint64_t b[5];
    autocast_sizes(mf, p, dt, max_samples, b);
    return b[0] + b[1] + b[2] + b[3] + b[4];
}

dps_status graph_autocast_alloc(backend *be, int dev, const model_file *mf, graph_acts *a)
{
    uint64_t b[5];
    autocast_sizes(mf, &a->plan, a->dt, (uint64_t)a->max_samples, b);
    dps_buf *bufs[5] = {&a->w16, &a->g16, &a->x16, &a->out16, &a->dlast};
    const char *what[5] = {"autocast parameters", "autocast activation gradients",
                           "autocast inputs", "autocast logits", "autocast logits' gradient"};
    for (int i = 0; i < 5; i++)
        if (b[i]) DPS_TRY(be_buf_alloc(be, dev, (size_t)b[i], what[i], bufs[i]));
    return DPS_OK;
}

/* A gemm's weight and bias cast to the half type into w16 (bias after the weight). */
static dps_status cast_params(const graph_fwd_ctx *c, const mf_op *o)
{
    backend *be = c->be;
    graph_acts *a = c->a;
    int64_t nw = (int64_t)c->mf->tensors[o->weight].numel;
    DPS_TRY(be->ops->cast(be, c->st, nw, graph_tensor_at(c, o->weight), BE_F32, a->w16.ptr, a->half));
    if (o->bias < 0) return DPS_OK;
    return be->ops->cast(be, c->st, o->n, graph_tensor_at(c, o->bias), BE_F32, U16(a->w16.ptr) + nw,
                         a->half);
}

/* A batched or grouped gemm's or an attn's input in the half type: itself,
 * or cast into x16. */
static dps_status half_input(const graph_fwd_ctx *c, const mf_op *o, const float *in,
                                const uint16_t **in16)
{
    graph_acts *a = c->a;
    if (graph_type_of(a, o->in) != BE_F32) {
        *in16 = CU16(in);
        return DPS_OK;
    }
    *in16 = a->x16.ptr;
    return c->be->ops->cast(c->be, c->st, (int64_t)c->samples * (int64_t)o->in_elems, in, BE_F32,
                            a->x16.ptr, a->half);
}

/* A grouped gemm under autocast: group j's n/g columns of y are half(its
 * k/g columns of x_h times its n/g rows of W_h, + its n/g of b_h), one
 * GEMM a group (offsets in the half type's elements). */
static dps_status groups_fwd(const graph_fwd_ctx *c, const mf_op *o, int rows, const float *in,
                             uint16_t *y)
{
    backend *be = c->be;
    be_dtype H = c->a->half;
    int k = (int)o->k, n = (int)o->n, kg = (int)(o->k / o->g), ng = (int)(o->n / o->g);
    const uint16_t *x, *w = c->a->w16.ptr, *b = w + c->mf->tensors[o->weight].numel;
    DPS_TRY(half_input(c, o, in, &x));
    DPS_TRY(cast_params(c, o));
    for (int j = 0; j < (int)o->g; j++) {
        const uint16_t *xj = x + (size_t)j * kg, *wj = w + (size_t)j * ng * kg;
        uint16_t *yj = y + (size_t)j * ng;
        if (o->bias >= 0)
            DPS_TRY(be->ops->gemm_bias(be, c->st, 0, 1, rows, ng, kg, xj, H, k, wj, H, kg,
                                       b + (size_t)j * ng, yj, H, n));
        else
            DPS_TRY(be->ops->gemm_ex(be, c->st, 0, 1, rows, ng, kg, 1.0f, xj, H, k, wj, H, kg, 0.0f,
                                     yj, H, n));
    }
    return DPS_OK;
}

/* y = half(x_h·W_hᵀ + b_h) (addmm under autocast), by groups when it has
 * them, or the batched GEMM of x's two halves in the half type. */
static dps_status gemm_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, uint16_t *y)
{
    backend *be = c->be;
    graph_acts *a = c->a;
    be_dtype H = a->half, in_t = graph_type_of(a, o->in);
    int m = (int)o->m, k = (int)o->k, n = (int)o->n, rows = 0;
    if (o->weight >= 0 && o->g > 1) {
        DPS_TRY(graph_rows_of(o, c->samples, (size_t)o->m, &rows));
        return groups_fwd(c, o, rows, in, y);
    }
    if (o->weight >= 0) {
        DPS_TRY(graph_rows_of(o, c->samples, (size_t)o->m, &rows));
        DPS_TRY(cast_params(c, o));
        const uint16_t *w = a->w16.ptr;
        if (o->bias >= 0)
            return be->ops->gemm_bias(be, c->st, 0, 1, rows, n, k, in, in_t, k, w, H, k,
                                      w + c->mf->tensors[o->weight].numel, y, H, n);
        return be->ops->gemm_ex(be, c->st, 0, 1, rows, n, k, 1.0f, in, in_t, k, w, H, k, 0.0f, y, H, n);
    }
    const uint16_t *x;
    DPS_TRY(half_input(c, o, in, &x));
    size_t a_elems = (size_t)m * (size_t)k, b_elems = (size_t)k * (size_t)n;
    for (int s = 0; s < c->samples; s++)
        for (int j = 0; j < (int)o->b; j++) {
            const uint16_t *A = x + (size_t)s * o->in_elems + (size_t)j * a_elems;
            const uint16_t *B = x + (size_t)s * o->in_elems + (size_t)o->b * a_elems + (size_t)j * b_elems;
            uint16_t *C = y + (size_t)s * o->out_elems + (size_t)j * m * (size_t)n;
            DPS_TRY(be->ops->gemm_ex(be, c->st, 0, 0, m, n, k, 1.0f, A, H, k, B, H, n, 0.0f, C, H, n));
        }
    return DPS_OK;
}

/* An embedding in fp32: a half input widened into y first. */
static dps_status widened_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y)
{
    be_dtype in_t = graph_type_of(c->a, o->in);
    if (in_t != BE_F32) {
        DPS_TRY(c->be->ops->cast(c->be, c->st, (int64_t)c->samples * (int64_t)o->in_elems, in,
                                 in_t, y, BE_F32));
        in = y;
    }
    return graph_embedding_fwd(c, o, in, y, c->a->dev);
}

/* The elements per sample of op o's other operand (its from). */
static size_t from_elems(const model_file *mf, const mf_op *o)
{
    return o->from == MF_INPUT ? mf->input : mf->ops[o->from].out_elems;
}

/* y = x * s under type promotion: each of s's elements scales its run of
 * x, in fp32, one rounding to y's type. */
static dps_status mul_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y)
{
    const graph_acts *a = c->a;
    size_t ns = from_elems(c->mf, o);
    if (o->pixels > 1) /* over pixels: s[c] scales channel c of each pixel */
        return c->be->ops->pixel_scale_ex(c->be, c->st, c->samples, o->pixels, (int64_t)ns, in,
                                          graph_type_of(a, o->in), graph_input_of(a, o->from, c->x),
                                          graph_type_of(a, o->from), y, a->dt[o - c->mf->ops]);
    return c->be->ops->row_scale_ex(c->be, c->st, (int64_t)((size_t)c->samples * ns),
                                    (int64_t)(o->out_elems / ns), in, graph_type_of(a, o->in),
                                    graph_input_of(a, o->from, c->x), graph_type_of(a, o->from),
                                    y, a->dt[o - c->mf->ops]);
}

/* torch.cat on autocast's promote list: each sample's x, then its other
 * operand's elements (an op's, or a tensor's, fp32), each cast to y's type
 * (offsets in elements of each buffer's type). */
static dps_status cat_fwd(const graph_fwd_ctx *c, const mf_op *o, const float *in, float *y)
{
    backend *be = c->be;
    const graph_acts *a = c->a;
    be_dtype t = a->dt[o - c->mf->ops], in_t = graph_type_of(a, o->in);
    be_dtype other_t = o->weight >= 0 ? BE_F32 : graph_type_of(a, o->from);
    const char *other = o->weight >= 0 ? (const char *)graph_tensor_at(c, o->weight)
                                       : (const char *)graph_input_of(a, o->from, c->x);
    size_t tail = o->out_elems - o->in_elems, yb = be_dtype_bytes(t);
    if (o->pixels > 1) /* over pixels: each pixel's channels of x, then of the other */
        return be->ops->cat_cols(be, c->st, (int64_t)c->samples * o->pixels,
                                 (int64_t)o->in_elems / o->pixels, in, in_t, (int64_t)tail / o->pixels,
                                 other, other_t, y, t);
    for (int s = 0; s < c->samples; s++) {
        char *ys = (char *)y + (size_t)s * o->out_elems * yb;
        const char *xs = (const char *)in + (size_t)s * o->in_elems * be_dtype_bytes(in_t);
        DPS_TRY(be->ops->cast(be, c->st, (int64_t)o->in_elems, xs, in_t, ys, t));
        size_t at = o->weight >= 0 ? 0 : (size_t)s * tail * be_dtype_bytes(other_t);
        DPS_TRY(be->ops->cast(be, c->st, (int64_t)tail, other + at, other_t, ys + o->in_elems * yb, t));
    }
    return DPS_OK;
}

dps_status graph_fwd_half(const graph_fwd_ctx *c, int i)
{
    const mf_op *o = &c->mf->ops[i];
    backend *be = c->be;
    const graph_acts *a = c->a;
    const float *in = graph_input_of(a, o->in, c->x);
    float *y = graph_out_of(a, i);
    be_dtype in_t = graph_type_of(a, o->in), t = a->dt[i];
    int64_t n = (int64_t)c->samples * (int64_t)o->out_elems;
    switch (o->kind) {
    case MF_GEMM: return gemm_fwd(c, o, in, U16(y));
    case MF_RESAMPLE: return graph_resample_fwd(c, i, in, y, t);
    case MF_ACT:
        if (t == BE_F32) return be->ops->act(be, c->st, (int)o->fn, n, in, y);
        return be->ops->act_half(be, c->st, (int)o->fn, t, n, CU16(in), U16(y));
    case MF_ADD:
        return be->ops->add_ex(be, c->st, n, in, in_t, graph_input_of(a, o->from, c->x),
                               graph_type_of(a, o->from), y, t);
    case MF_NORM: return graph_norm_fwd(c, o, in, y); /* x widened in the pass */
    case MF_EMBEDDING: return widened_fwd(c, o, in, y);
    case MF_MUL: return mul_fwd(c, o, in, y);
    case MF_CAT: return cat_fwd(c, o, in, y);
    case MF_ATTN: { /* scaled_dot_product_attention: autocast's lower-precision list */
        const uint16_t *x;
        DPS_TRY(half_input(c, o, in, &x));
        return graph_attn_fwd(c, i, x, t, y);
    }
    case MF_KIND_COUNT: break;
    }
    return dps_fail(DPS_ERR_RUNTIME, "op %s: kind %d has no forward under autocast", o->name,
                    (int)o->kind);
}

/* grads of tensor t += the nt half values at h, widened (a cast's backward). */
static dps_status widen_into(const graph_bwd_ctx *c, int t, int64_t nt, const uint16_t *h)
{
    float *g = graph_grad_at(c, t);
    return c->f.be->ops->add_ex(c->f.be, c->f.st, nt, g, BE_F32, h, c->f.a->half, g, BE_F32);
}

/* A weighted gemm's backward from g16 (its output gradient in the half
 * type): din = g·W_h rounded to the half type (written in fp32:
 * graph.c's din may be the input's fp32 gradient), then W's and b's
 * gradients rounded to it once (w16 reused: the cast weight is read
 * first) and widened. */
static dps_status linear_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in,
                             const uint16_t *g16, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    graph_acts *a = c->f.a;
    be_dtype H = a->half, in_t = graph_type_of(a, o->in);
    int k = (int)o->k, n = (int)o->n, rows = 0;
    int64_t nw = (int64_t)c->f.mf->tensors[o->weight].numel;
    uint16_t *w16 = a->w16.ptr;
    DPS_TRY(graph_rows_of(o, c->f.samples, (size_t)o->m, &rows));
    if (din) {
        DPS_TRY(cast_params(&c->f, o));
        DPS_TRY(be->ops->gemm_ex(be, st, 0, 0, rows, k, n, 1.0f, g16, H, n, w16, H, k, 0.0f, din,
                                 BE_F32, k));
        DPS_TRY(be->ops->round_half(be, st, H, (int64_t)rows * k, din));
    }
    DPS_TRY(be->ops->gemm_ex(be, st, 1, 0, n, k, rows, 1.0f, g16, H, n, in, in_t, k, 0.0f, w16, H, k));
    DPS_TRY(widen_into(c, o->weight, nw, w16));
    if (o->bias < 0) return DPS_OK;
    return be->ops->col_sum_add(be, st, H, H, rows, n, n, g16, graph_grad_at(c, o->bias));
}

/* The batched gemm's backward: dA = G·Bᵀ and dB = Aᵀ·G, rounded to the
 * half type (in fp32, as linear_bwd's din). */
static dps_status batched_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in,
                              const uint16_t *g16, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    be_dtype H = c->f.a->half;
    int m = (int)o->m, k = (int)o->k, n = (int)o->n;
    const uint16_t *x;
    DPS_TRY(half_input(&c->f, o, in, &x));
    size_t a_elems = (size_t)m * (size_t)k, b_elems = (size_t)k * (size_t)n;
    for (int s = 0; s < c->f.samples; s++)
        for (int j = 0; j < (int)o->b; j++) {
            size_t at_a = (size_t)s * o->in_elems + (size_t)j * a_elems;
            size_t at_b = (size_t)s * o->in_elems + (size_t)o->b * a_elems + (size_t)j * b_elems;
            const uint16_t *G = g16 + (size_t)s * o->out_elems + (size_t)j * m * (size_t)n;
            DPS_TRY(be->ops->gemm_ex(be, st, 0, 1, m, k, n, 1.0f, G, H, n, x + at_b, H, n, 0.0f,
                                     din + at_a, BE_F32, k));
            DPS_TRY(be->ops->gemm_ex(be, st, 1, 0, k, n, m, 1.0f, x + at_a, H, k, G, H, n, 0.0f,
                                     din + at_b, BE_F32, n));
        }
    return be->ops->round_half(be, st, H, (int64_t)c->f.samples * (int64_t)o->in_elems, din);
}

/* A grouped gemm's backward from g16, as linear_bwd's a group at a time:
 * every group's din from the cast weight first, then the weight's
 * gradient in its place in w16, rounded once and widened; the bias's. */
static dps_status groups_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in,
                             const uint16_t *g16, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    graph_acts *a = c->f.a;
    be_dtype H = a->half;
    int k = (int)o->k, n = (int)o->n, kg = (int)(o->k / o->g), ng = (int)(o->n / o->g), rows = 0;
    int64_t nw = (int64_t)c->f.mf->tensors[o->weight].numel;
    uint16_t *w16 = a->w16.ptr;
    const uint16_t *x;
    DPS_TRY(graph_rows_of(o, c->f.samples, (size_t)o->m, &rows));
    if (din) DPS_TRY(cast_params(&c->f, o));
    for (int j = 0; din && j < (int)o->g; j++)
        DPS_TRY(be->ops->gemm_ex(be, st, 0, 0, rows, kg, ng, 1.0f, g16 + (size_t)j * ng, H, n,
                                 w16 + (size_t)j * ng * kg, H, kg, 0.0f, din + (size_t)j * kg, BE_F32, k));
    if (din) DPS_TRY(be->ops->round_half(be, st, H, (int64_t)rows * k, din));
    DPS_TRY(half_input(&c->f, o, in, &x));
    for (int j = 0; j < (int)o->g; j++)
        DPS_TRY(be->ops->gemm_ex(be, st, 1, 0, ng, kg, rows, 1.0f, g16 + (size_t)j * ng, H, n,
                                 x + (size_t)j * kg, H, k, 0.0f, w16 + (size_t)j * ng * kg, H, kg));
    DPS_TRY(widen_into(c, o->weight, nw, w16));
    if (o->bias < 0) return DPS_OK;
    return be->ops->col_sum_add(be, st, H, H, rows, n, n, g16, graph_grad_at(c, o->bias));
}

static dps_status gemm_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g,
                           float *din)
{
    graph_acts *a = c->f.a;
    int64_t n = (int64_t)c->f.samples * (int64_t)o->out_elems;
    uint16_t *g16 = a->g16.ptr;
    if (a->plan.recompute[o - c->f.mf->ops]) DPS_TRY(graph_again(c, o, &in));
    DPS_TRY(c->f.be->ops->cast(c->f.be, c->f.st, n, g, BE_F32, g16, a->half));
    if (o->weight >= 0 && o->g > 1) return groups_bwd(c, o, in, g16, din);
    if (o->weight >= 0) return linear_bwd(c, o, in, g16, din);
    return din ? batched_bwd(c, o, in, g16, din) : DPS_OK;
}

/* An add's backward: g to its `from` op and to its input, each rounded to
 * that op's type as it is added. */
static dps_status add_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *g)
{
    backend *be = c->f.be;
    graph_acts *a = c->f.a;
    int64_t n = (int64_t)c->f.samples * (int64_t)o->out_elems;
    if (o->from != MF_INPUT)
        DPS_TRY(be->ops->add_round(be, c->f.st, graph_type_of(a, o->from), n, graph_grad_of(a, o->from), g));
    if (o->in == MF_INPUT) return DPS_OK;
    return be->ops->add_round(be, c->f.st, graph_type_of(a, o->in), n, graph_grad_of(a, o->in), g);
}

/* A mul's backward from g (rounded to its type): s's gradient the sums of
 * g·x, each product in the mul's type (autocast's grad * self) and the sum
 * rounded to s's type, added to s's op's; din = g·s in fp32 (rounded to
 * the input's type as it is handed back). */
static dps_status mul_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *in, const float *g,
                          float *din)
{
    backend *be = c->f.be;
    const graph_acts *a = c->f.a;
    size_t ns = from_elems(c->f.mf, o);
    int64_t rows = (int64_t)((size_t)c->f.samples * ns), cols = (int64_t)(o->out_elems / ns);
    be_dtype t = a->dt[o - c->f.mf->ops], from_t = graph_type_of(a, o->from);
    const void *s = graph_input_of(a, o->from, c->f.x);
    if (o->pixels > 1) { /* over pixels: d s[c] the sum of g·x over the pixels */
        if (o->from != MF_INPUT)
            DPS_TRY(be->ops->pixel_dot_add_ex(be, c->f.st, c->f.samples, o->pixels, (int64_t)ns, g, in,
                                              graph_type_of(a, o->in), t, from_t,
                                              graph_grad_of(a, o->from)));
        return din ? be->ops->pixel_scale_ex(be, c->f.st, c->f.samples, o->pixels, (int64_t)ns, g,
                                             BE_F32, s, from_t, din, BE_F32) : DPS_OK;
    }
    if (o->from != MF_INPUT)
        DPS_TRY(be->ops->row_dot_add_ex(be, c->f.st, rows, cols, g, in, graph_type_of(a, o->in), t,
                                        from_t, graph_grad_of(a, o->from)));
    if (!din) return DPS_OK;
    return be->ops->row_scale_ex(be, c->f.st, rows, cols, g, BE_F32,
                                 graph_input_of(a, o->from, c->f.x), from_t, din, BE_F32);
}

/* A cat's backward from g (rounded to its type): each sample's head added
 * to its input's gradient, its tail to the other operand's (a tensor's:
 * summed over the samples, fp32), each rounded to that operand's type. */
static dps_status cat_bwd(const graph_bwd_ctx *c, const mf_op *o, const float *g)
{
    backend *be = c->f.be;
    const graph_acts *a = c->f.a;
    size_t tail = o->out_elems - o->in_elems;
    be_dtype other_t = o->weight >= 0 ? BE_F32 : graph_type_of(a, o->from), in_t = graph_type_of(a, o->in);
    float *din = graph_din_grad(c, o);
    if (o->pixels > 1) /* over pixels: each pixel's head and tail */
        return be->ops->cat_cols_bwd(be, c->f.st, (int64_t)c->f.samples * o->pixels,
                                     (int64_t)o->in_elems / o->pixels, (int64_t)tail / o->pixels, g, din, in_t,
                                     o->from == MF_INPUT ? NULL : graph_grad_of(a, o->from), other_t);
    for (int s = 0; s < c->f.samples; s++) {
        const float *gs = g + (size_t)s * o->out_elems;
        if (din)
            DPS_TRY(be->ops->add_round(be, c->f.st, in_t, (int64_t)o->in_elems,
                                       din + (size_t)s * o->in_elems, gs));
        float *dother = o->weight >= 0 ? graph_grad_at(c, o->weight)
                      : o->from == MF_INPUT ? NULL : graph_grad_of(a, o->from) + (size_t)s * tail;
        if (dother)
            DPS_TRY(be->ops->add_round(be, c->f.st, other_t, (int64_t)tail, dother, gs + o->in_elems));
    }
    return DPS_OK;
}

/* Act op i's backward in its type: in fp32 from what it keeps
 * (graph_act_saved, in din: read and written element by element); on half
 * tensors from g16, in place, added to its input's gradient (widened: act
 * keeps its input's type), v its kept half output (the last op's: out16)
 * or input. */
static dps_status act_bwd(const graph_bwd_ctx *c, int i, const float *in, const float *g,
                          float *din, be_dtype t)
{
    backend *be = c->f.be;
    const mf_op *o = &c->f.mf->ops[i];
    int64_t n = (int64_t)c->f.samples * (int64_t)o->out_elems;
    const float *v;
    if (t == BE_F32) {
        if (!din) return DPS_OK;
        DPS_TRY(graph_act_saved(c, i, in, din, &v));
        return be->ops->act_bwd(be, c->f.st, (int)o->fn, n, g, v, din);
    }
    float *dx = graph_din_grad(c, o);
    if (!dx) return DPS_OK;
    uint16_t *g16 = c->f.a->g16.ptr;
    v = dps_act_keeps_output((int)o->fn) ? graph_out_of(c->f.a, i) : in;
    DPS_TRY(be->ops->cast(be, c->f.st, n, g, BE_F32, g16, t));
    DPS_TRY(be->ops->act_bwd_half(be, c->f.st, (int)o->fn, t, n, g16, CU16(v), g16));
    return be->ops->add_ex(be, c->f.st, n, dx, BE_F32, g16, t, dx, BE_F32);
}

/* An attn's backward in the half type: its output gradient cast into g16,
 * its input's (half, widened by graph.c when the input was fp32) from
 * q, k, v cast as forward cast them. */
static dps_status attn_bwd(const graph_bwd_ctx *c, int i, const float *in, const float *g,
                           float *din, be_dtype *din_t)
{
    graph_acts *a = c->f.a;
    const mf_op *o = &c->f.mf->ops[i];
    const uint16_t *x;
    *din_t = a->half;
    if (!din) return DPS_OK;
    DPS_TRY(c->f.be->ops->cast(c->f.be, c->f.st, (int64_t)c->f.samples * (int64_t)o->out_elems, g,
                               BE_F32, a->g16.ptr, a->half));
    DPS_TRY(half_input(&c->f, o, in, &x));
    return graph_attn_bwd(c, i, x, a->half, a->g16.ptr, din);
}

/* Op i's output gradient rounded to its half type (the gradient of a half
 * tensor) where its backward reads it in fp32: in place, or the last op's
 * (the caller's dlogits) in a copy, dlast. */
static dps_status rounded_grad(const graph_bwd_ctx *c, int i, const float **g)
{
    backend *be = c->f.be;
    graph_acts *a = c->f.a;
    const mf_op *o = &c->f.mf->ops[i];
    int64_t n = (int64_t)c->f.samples * (int64_t)o->out_elems;
    float *r = graph_grad_of(a, i);
    *g = r;
    if (a->dt[i] == BE_F32 || !reads_rounded(o)) return DPS_OK;
    if (i == a->last) {
        r = a->dlast.ptr;
        DPS_TRY(graph_copy(be, c->f.st, a->dev, r, *g, (size_t)n));
        *g = r;
    }
    return be->ops->round_half(be, c->f.st, a->dt[i], n, r);
}

dps_status graph_bwd_half(const graph_bwd_ctx *c, int i, float *din, be_dtype *din_t)
{
    const mf_op *o = &c->f.mf->ops[i];
    graph_acts *a = c->f.a;
    const float *in = graph_input_of(a, o->in, c->f.x), *g;
    be_dtype t = a->dt[i];
    *din_t = BE_F32;
    DPS_TRY(rounded_grad(c, i, &g));
    switch (o->kind) {
    case MF_GEMM: return gemm_bwd(c, o, in, g, din);
    case MF_RESAMPLE: /* summed in fp32; graph.c rounds din to the input's type */
        return graph_resample_bwd(c, i, g, din);
    case MF_NORM: return graph_norm_bwd(c, o, in, g);
    case MF_ACT: return act_bwd(c, i, in, g, din, t);
    case MF_ADD: return add_bwd(c, o, g);
    case MF_EMBEDDING: return graph_embedding_bwd(c, o, g);
    case MF_MUL: return mul_bwd(c, o, in, g, din);
    case MF_CAT: return cat_bwd(c, o, g);
    case MF_ATTN: return attn_bwd(c, i, in, g, din, din_t);
    case MF_KIND_COUNT: break;
    }
    return dps_fail(DPS_ERR_RUNTIME, "op %s: kind %d has no backward under autocast", o->name,
                    (int)o->kind);
}
