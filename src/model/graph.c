/* A model file's forward and backward on a backend (see graph.h). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elementwise.h"
#include "model/graph.h"

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

/* The largest per-sample input or output of any op; the most columns any
 * op sums in backward into the columns buffer (a GEMM's bias: its n; a
 * norm's c; an embedding's output); the largest embedding table. */
static void widest(const model_file *mf, size_t *elems, size_t *cols, size_t *table)
{
    *elems = mf->input;
    *cols = 1;
    *table = 0;
    for (int i = 0; i < mf->nops; i++) {
        const mf_op *o = &mf->ops[i];
        if (o->out_elems > *elems) *elems = o->out_elems;
        if (o->in_elems > *elems) *elems = o->in_elems;
        if (o->kind == MF_NORM && (size_t)o->c > *cols) *cols = (size_t)o->c;
        if (o->kind == MF_GEMM && o->bias >= 0 && (size_t)o->n > *cols) *cols = (size_t)o->n;
        if (o->kind != MF_EMBEDDING) continue;
        if (o->out_elems > *cols) *cols = o->out_elems;
        if (mf->tensors[o->weight].numel > *table) *table = mf->tensors[o->weight].numel;
    }
}

/* The workspace's bytes for max_samples samples (graph_acts_alloc's). */
static size_t work_bytes(const model_file *mf, size_t max_samples, size_t *cols)
{
    size_t s = max_samples * sizeof(float), elems, table;
    widest(mf, &elems, cols, &table);
    return s * elems > table * sizeof(float) ? s * elems : table * sizeof(float);
}

uint64_t graph_acts_bytes(const model_file *mf, uint64_t max_samples)
{
    size_t cols, total = work_bytes(mf, (size_t)max_samples, &cols) + cols * sizeof(float);
    graph_plan p;
    if (graph_plan_make(mf, &p) != DPS_OK) return UINT64_MAX;
    total += (p.out_elems + p.grad_elems) * (size_t)max_samples * sizeof(float);
    graph_plan_free(&p);
    return total;
}

dps_status graph_acts_alloc(backend *be, int dev, const model_file *mf, int max_samples, graph_acts *a)
{
    memset(a, 0, sizeof *a);
    a->max_samples = max_samples;
    a->last = mf->nops - 1;
    DPS_TRY(graph_plan_make(mf, &a->plan));
    size_t s = (size_t)max_samples * sizeof(float), cols, work = work_bytes(mf, (size_t)max_samples, &cols);
    dps_status rc = DPS_OK;
    if (a->plan.out_elems) rc = be_buf_alloc(be, dev, s * a->plan.out_elems, "activations", &a->outs);
    if (!rc && a->plan.grad_elems)
        rc = be_buf_alloc(be, dev, s * a->plan.grad_elems, "activation gradients", &a->grads);
    if (!rc) rc = be_buf_alloc(be, dev, work, "graph workspace", &a->work);
    if (!rc) rc = be_buf_alloc(be, dev, cols * sizeof(float), "graph workspace columns", &a->cols);
    if (rc) graph_acts_free(be, a);
    return rc;
}

void graph_acts_free(backend *be, graph_acts *a)
{
    be_buf_free(be, &a->outs);
    be_buf_free(be, &a->grads);
    graph_plan_free(&a->plan);
    be_buf_free(be, &a->work);
    be_buf_free(be, &a->cols);
    memset(a, 0, sizeof *a);
}

/* The rows a pass over n elements a sample takes, as the int the backend's ops take. */
static dps_status rows_of(const mf_op *o, int samples, size_t per_sample, int *rows)
{
    size_t r = (size_t)samples * per_sample;
    if (r > INT_MAX)
        return dps_fail(DPS_ERR_USAGE, "op %s: %zu rows at %d samples, more than one pass takes; "
                        "use fewer samples a device", o->name, r, samples);
    *rows = (int)r;
    return DPS_OK;
}

/* Op i's output and its gradient, in their arenas; the caller's logits and
 * their gradient for the last op. */
static float *out_of(const graph_acts *a, int i)
{
    if (i == a->last) return a->logits;
    return F(a->outs) + a->plan.out_at[i] * (size_t)a->max_samples;
}

static float *grad_of(const graph_acts *a, int i)
{
    if (i == a->last) return (float *)a->dlogits;
    return F(a->grads) + a->plan.grad_at[i] * (size_t)a->max_samples;
}

static const float *input_of(const graph_acts *a, int op_in, const float *x)
{
    return op_in == MF_INPUT ? x : out_of(a, op_in);
}

static dps_status copy(backend *be, be_stream *st, int dev, float *dst, const float *src, size_t n)
{
    return be->ops->copy(be, st, dst, dev, src, dev, n * sizeof(float));
}

/* One op of forward: op i's output from its input (x or an op's output). */
typedef struct fwd_ctx {
    backend *be;
    be_stream *st;
    const model_file *mf;
    const graph_layout *l;
    const float *params;
    graph_acts *a;
    int samples;
    const float *x;
} fwd_ctx;

static const float *tensor_at(const fwd_ctx *c, int t)
{
    return t < 0 ? NULL : c->params + c->l->offset[t];
}

/* A grouped gemm (a grouped or depthwise convolution): group j's columns
 * of y, n/g of them, are its k/g columns of x times its n/g rows of W, one
 * GEMM a group on the rows' strides; then the bias. */
static dps_status gemm_groups_fwd(const fwd_ctx *c, const mf_op *o, int rows, const float *in,
                                  float *y)
{
    backend *be = c->be;
    int k = (int)o->k, n = (int)o->n, kg = (int)(o->k / o->g), ng = (int)(o->n / o->g);
    const float *w = tensor_at(c, o->weight);
    for (int j = 0; j < (int)o->g; j++)
        DPS_TRY(be->ops->gemm(be, c->st, 0, 1, rows, ng, kg, 1.0f, in + (size_t)j * kg, k,
                              w + (size_t)j * ng * kg, kg, 0.0f, y + (size_t)j * ng, n));
    return o->bias < 0 ? DPS_OK : be->ops->bias_act(be, c->st, rows, n, y, tensor_at(c, o->bias), NULL);
}

/* y = x·Wᵀ (+ b: addmm, the bias added before the product is stored), by
 * groups when it has them, or without a weight the batched GEMM of x's two
 * halves. */
static dps_status gemm_fwd(const fwd_ctx *c, const mf_op *o, const float *in, float *y)
{
    backend *be = c->be;
    int m = (int)o->m, k = (int)o->k, n = (int)o->n, rows = 0;
    if (o->weight >= 0 && o->g > 1) {
        DPS_TRY(rows_of(o, c->samples, (size_t)o->m, &rows));
        return gemm_groups_fwd(c, o, rows, in, y);
    }
    if (o->weight >= 0) {
        DPS_TRY(rows_of(o, c->samples, (size_t)o->m, &rows));
        const float *w = tensor_at(c, o->weight);
        if (o->bias >= 0)
            return be->ops->gemm_bias(be, c->st, 0, 1, rows, n, k, in, BE_F32, k, w, BE_F32, k,
                                      tensor_at(c, o->bias), y, BE_F32, n);
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

static dps_status norm_fwd(const fwd_ctx *c, const mf_op *o, const float *in, float *y, int dev)
{
    backend *be = c->be;
    int cols = (int)o->c, rows = 0;
    DPS_TRY(rows_of(o, c->samples, o->in_elems / (size_t)o->c, &rows));
    if (o->weight >= 0) DPS_TRY(be->ops->col_scale(be, c->st, rows, cols, in, tensor_at(c, o->weight), y));
    else DPS_TRY(copy(be, c->st, dev, y, in, (size_t)rows * (size_t)cols));
    return o->bias < 0 ? DPS_OK : be->ops->bias_act(be, c->st, rows, cols, y, tensor_at(c, o->bias), NULL);
}

/* y = x + W's elements tiled along the sample (W read at fixed positions) */
static dps_status embedding_fwd(const fwd_ctx *c, const mf_op *o, const float *in, float *y, int dev)
{
    backend *be = c->be;
    const mf_tensor *w = &c->mf->tensors[o->weight];
    float *tiled = F(c->a->cols);
    int cols = 0;
    DPS_TRY(rows_of(o, 1, o->out_elems, &cols));
    DPS_TRY(be->ops->resample(be, c->st, 1, (int64_t)w->numel, (int64_t)o->out_elems,
                              tensor_at(c, o->weight), tiled));
    DPS_TRY(copy(be, c->st, dev, y, in, (size_t)c->samples * o->out_elems));
    return be->ops->bias_act(be, c->st, c->samples, cols, y, tiled, NULL);
}

/* Op i's unit entered through the sharded strategy's window, if it has one. */
static dps_status enter(const graph_acts *a, int i, int backward, const float **params,
                        float **grads)
{
    const net_window *w = a->window;
    if (!w || w->unit_of[i] < 0) return DPS_OK;
    return w->enter(w->ctx, w->unit_of[i], backward, params, grads);
}

/* y[i] = x[i] * s[i / (n / n_s)]: each of s's elements scales its run of x */
static dps_status mul_fwd(const fwd_ctx *c, const mf_op *o, const float *in, float *y)
{
    size_t ns = o->from == MF_INPUT ? c->mf->input : c->mf->ops[o->from].out_elems;
    return c->be->ops->row_scale(c->be, c->st, (int64_t)((size_t)c->samples * ns),
                                 (int64_t)(o->out_elems / ns), in, input_of(c->a, o->from, c->x), y);
}

/* Each sample's y = its x, then its other operand's (an op's output, or a
 * tensor's elements, the same for every sample) */
static dps_status cat_fwd(const fwd_ctx *c, const mf_op *o, const float *in, float *y, int dev)
{
    size_t tail = o->out_elems - o->in_elems;
    const float *other = o->weight >= 0 ? tensor_at(c, o->weight) : input_of(c->a, o->from, c->x);
    for (int s = 0; s < c->samples; s++) {
        float *ys = y + (size_t)s * o->out_elems;
        DPS_TRY(copy(c->be, c->st, dev, ys, in + (size_t)s * o->in_elems, o->in_elems));
        size_t at = o->weight >= 0 ? 0 : (size_t)s * tail;
        DPS_TRY(copy(c->be, c->st, dev, ys + o->in_elems, other + at, tail));
    }
    return DPS_OK;
}

static dps_status op_fwd(const fwd_ctx *c, int i)
{
    const mf_op *o = &c->mf->ops[i];
    backend *be = c->be;
    const float *in = input_of(c->a, o->in, c->x);
    float *y = out_of(c->a, i);
    int dev = c->a->work.dev;
    size_t n = (size_t)c->samples * o->out_elems;
    switch (o->kind) {
    case MF_GEMM: return gemm_fwd(c, o, in, y);
    case MF_RESAMPLE:
        return be->ops->resample(be, c->st, c->samples, (int64_t)o->in_elems, (int64_t)o->out_elems, in, y);
    case MF_NORM: return norm_fwd(c, o, in, y, dev);
    case MF_ACT: return be->ops->gelu(be, c->st, (int64_t)n, in, y);
    case MF_ADD:
        DPS_TRY(copy(be, c->st, dev, y, in, n));
        return be->ops->add(be, c->st, (int64_t)n, y, input_of(c->a, o->from, c->x));
    case MF_EMBEDDING: return embedding_fwd(c, o, in, y, dev);
    case MF_MUL: return mul_fwd(c, o, in, y);
    case MF_CAT: return cat_fwd(c, o, in, y, dev);
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
    fwd_ctx c = {be, st, mf, l, params, a, samples, x};
    for (int i = 0; i < mf->nops; i++) {
        DPS_TRY(enter(a, i, 0, &c.params, NULL));
        DPS_TRY(op_fwd(&c, i));
    }
    return DPS_OK;
}

/* One op of backward: its parameters' gradients added into grads, its
 * input's gradient into work (then added to the input op's gradient). */
typedef struct bwd_ctx {
    fwd_ctx f;
    float *grads;
} bwd_ctx;

static float *grad_at(const bwd_ctx *c, int t)
{
    return c->grads + c->f.l->offset[t];
}

/* grads of tensor t += the column sums of a rows x cols matrix */
static dps_status add_col_sums(const bwd_ctx *c, int t, int rows, int cols, const float *g)
{
    backend *be = c->f.be;
    float *sums = F(c->f.a->cols);
    DPS_TRY(be->ops->col_sum(be, c->f.st, rows, cols, g, sums));
    return be->ops->add(be, c->f.st, cols, grad_at(c, t), sums);
}

/* A grouped gemm's backward: group j's d W rows and its k/g columns of d x
 * from its n/g columns of g, one GEMM each a group; the bias's column sums
 * over all n. */
static dps_status gemm_groups_bwd(const bwd_ctx *c, const mf_op *o, int rows, const float *in,
                                  const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    int k = (int)o->k, n = (int)o->n, kg = (int)(o->k / o->g), ng = (int)(o->n / o->g);
    const float *w = tensor_at(&c->f, o->weight);
    float *dw = grad_at(c, o->weight);
    for (int j = 0; j < (int)o->g; j++) {
        size_t wj = (size_t)j * ng * kg;
        DPS_TRY(be->ops->gemm(be, st, 1, 0, ng, kg, rows, 1.0f, g + (size_t)j * ng, n,
                              in + (size_t)j * kg, k, 1.0f, dw + wj, kg));
        if (din)
            DPS_TRY(be->ops->gemm(be, st, 0, 0, rows, kg, ng, 1.0f, g + (size_t)j * ng, n, w + wj, kg,
                                  0.0f, din + (size_t)j * kg, k));
    }
    return o->bias < 0 ? DPS_OK : add_col_sums(c, o->bias, rows, n, g);
}

static dps_status gemm_bwd(const bwd_ctx *c, const mf_op *o, const float *in, const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    int m = (int)o->m, k = (int)o->k, n = (int)o->n, rows = 0;
    if (o->weight >= 0 && o->g > 1) {
        DPS_TRY(rows_of(o, c->f.samples, (size_t)o->m, &rows));
        return gemm_groups_bwd(c, o, rows, in, g, din);
    }
    if (o->weight >= 0) {
        DPS_TRY(rows_of(o, c->f.samples, (size_t)o->m, &rows));
        DPS_TRY(be->ops->gemm(be, st, 1, 0, n, k, rows, 1.0f, g, n, in, k, 1.0f, grad_at(c, o->weight), k));
        if (o->bias >= 0) DPS_TRY(add_col_sums(c, o->bias, rows, n, g));
        if (!din) return DPS_OK;
        return be->ops->gemm(be, st, 0, 0, rows, k, n, 1.0f, g, n, tensor_at(&c->f, o->weight), k, 0.0f,
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

static dps_status norm_bwd(const bwd_ctx *c, const mf_op *o, const float *in, const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    int cols = (int)o->c, rows = 0, dev = c->f.a->work.dev;
    DPS_TRY(rows_of(o, c->f.samples, o->in_elems / (size_t)o->c, &rows));
    size_t n = (size_t)rows * (size_t)cols;
    if (o->bias >= 0) DPS_TRY(add_col_sums(c, o->bias, rows, cols, g));
    if (o->weight >= 0) { /* d gamma = column sums of g * x, through the workspace */
        float *gx = F(c->f.a->work);
        DPS_TRY(be->ops->mul(be, st, (int64_t)n, g, in, gx));
        DPS_TRY(add_col_sums(c, o->weight, rows, cols, gx));
    }
    if (!din) return DPS_OK;
    if (o->weight < 0) return copy(be, st, dev, din, g, n);
    return be->ops->col_scale(be, st, rows, cols, g, tensor_at(&c->f, o->weight), din);
}

/* d W: the samples' column sums, each position summed back onto the element
 * it read (the workspace holds them before they are added); d x = g */
static dps_status embedding_bwd(const bwd_ctx *c, const mf_op *o, const float *g, float *din)
{
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    const mf_tensor *w = &c->f.mf->tensors[o->weight];
    float *sums = F(c->f.a->cols), *back = F(c->f.a->work);
    int cols = 0, dev = c->f.a->work.dev;
    DPS_TRY(rows_of(o, 1, o->out_elems, &cols));
    DPS_TRY(be->ops->col_sum(be, st, c->f.samples, cols, g, sums));
    DPS_TRY(be->ops->resample_bwd(be, st, 1, (int64_t)w->numel, (int64_t)o->out_elems, sums, back));
    DPS_TRY(be->ops->add(be, st, (int64_t)w->numel, grad_at(c, o->weight), back));
    return din ? copy(be, st, dev, din, g, (size_t)c->f.samples * o->out_elems) : DPS_OK;
}

/* A mul's backward: d s[j] += the sum of g·x over its run (into s's op's
 * gradient, as an add's other operand), d x = g scaled as forward scaled x */
static dps_status mul_bwd(const bwd_ctx *c, const mf_op *o, const float *in, const float *g, float *din)
{
    backend *be = c->f.be;
    size_t ns = o->from == MF_INPUT ? c->f.mf->input : c->f.mf->ops[o->from].out_elems;
    int64_t rows = (int64_t)((size_t)c->f.samples * ns), cols = (int64_t)(o->out_elems / ns);
    if (o->from != MF_INPUT)
        DPS_TRY(be->ops->row_dot_add(be, c->f.st, rows, cols, g, in, grad_of(c->f.a, o->from)));
    return din ? be->ops->row_scale(be, c->f.st, rows, cols, g, input_of(c->f.a, o->from, c->f.x), din)
               : DPS_OK;
}

/* A cat's backward: each sample's head of g is its input's gradient, its
 * tail added to the other operand's (the tensor's: summed over the samples) */
static dps_status cat_bwd(const bwd_ctx *c, const mf_op *o, const float *g, float *din)
{
    backend *be = c->f.be;
    size_t tail = o->out_elems - o->in_elems;
    for (int s = 0; s < c->f.samples; s++) {
        const float *gs = g + (size_t)s * o->out_elems;
        if (din)
            DPS_TRY(copy(be, c->f.st, c->f.a->work.dev, din + (size_t)s * o->in_elems, gs, o->in_elems));
        float *dother = o->weight >= 0 ? grad_at(c, o->weight)
                      : o->from == MF_INPUT ? NULL : grad_of(c->f.a, o->from) + (size_t)s * tail;
        if (dother) DPS_TRY(be->ops->add(be, c->f.st, (int64_t)tail, dother, gs + o->in_elems));
    }
    return DPS_OK;
}

/* Op i's backward from its output's gradient; din (NULL: the input's is not
 * needed) receives its input's. */
/* A recomputing gemm's input made again from its resample's input into
 * *in, as a convolution's backward makes its im2col: at its place in the
 * outputs' arena, alive for this backward alone. */
static dps_status again(const bwd_ctx *c, const mf_op *o, const float **in)
{
    const graph_acts *a = c->f.a;
    const mf_op *r = &c->f.mf->ops[o->in];
    float *y = F(a->outs) + a->plan.again_at[o - c->f.mf->ops] * (size_t)a->max_samples;
    *in = y;
    return c->f.be->ops->resample(c->f.be, c->f.st, c->f.samples, (int64_t)r->in_elems,
                                  (int64_t)r->out_elems, input_of(a, r->in, c->f.x), y);
}

static dps_status op_bwd(const bwd_ctx *c, int i, float *din)
{
    const mf_op *o = &c->f.mf->ops[i];
    backend *be = c->f.be;
    be_stream *st = c->f.st;
    const float *in = input_of(c->f.a, o->in, c->f.x), *g = grad_of(c->f.a, i);
    size_t n = (size_t)c->f.samples * o->out_elems;
    switch (o->kind) {
    case MF_GEMM:
        if (c->f.a->plan.recompute[i]) DPS_TRY(again(c, o, &in));
        return gemm_bwd(c, o, in, g, din);
    case MF_RESAMPLE:
        return din ? be->ops->resample_bwd(be, st, c->f.samples, (int64_t)o->in_elems,
                                           (int64_t)o->out_elems, g, din) : DPS_OK;
    case MF_NORM: return norm_bwd(c, o, in, g, din);
    case MF_ACT: return din ? be->ops->gelu_bwd(be, st, (int64_t)n, g, in, din) : DPS_OK;
    case MF_ADD:
        if (o->from != MF_INPUT) DPS_TRY(be->ops->add(be, st, (int64_t)n, grad_of(c->f.a, o->from), g));
        return din ? copy(be, st, c->f.a->work.dev, din, g, n) : DPS_OK;
    case MF_EMBEDDING: return embedding_bwd(c, o, g, din);
    case MF_MUL: return mul_bwd(c, o, in, g, din);
    case MF_CAT: return cat_bwd(c, o, g, din);
    case MF_KIND_COUNT: break;
    }
    return dps_fail(DPS_ERR_RUNTIME, "op %s: kind %d has no backward", o->name, (int)o->kind);
}

/* Op i's backward: the gradients it begins zeroed first, then its own, its
 * input's added, and a hook for each tensor it completed, in ready order. */
static dps_status backward_op(const bwd_ctx *c, int i, graph_grad_hook hook, void *ctx)
{
    const mf_op *o = &c->f.mf->ops[i];
    backend *be = c->f.be;
    graph_acts *a = c->f.a;
    const graph_plan *p = &a->plan;
    float *din = o->in == MF_INPUT ? NULL : F(a->work);
    for (int b = p->begins_at[i]; b < p->begins_at[i + 1]; b++)
        DPS_TRY(be->ops->memset0(be, c->f.st, grad_of(a, p->begins[b]),
                                 (size_t)c->f.samples * c->f.mf->ops[p->begins[b]].out_elems * sizeof(float)));
    /* a norm's and an embedding's backward use the workspace first */
    DPS_TRY(op_bwd(c, i, din));
    if (din)
        DPS_TRY(be->ops->add(be, c->f.st, (int64_t)((size_t)c->f.samples * o->in_elems),
                             grad_of(a, o->in), din));
    for (int t = p->completes_at[i]; hook && t < p->completes_at[i + 1]; t++)
        DPS_TRY(hook(ctx, p->completes[t]));
    return DPS_OK;
}

dps_status graph_backward(backend *be, be_stream *st, const model_file *mf, const graph_layout *l,
                          const float *params, graph_acts *a, int samples, const float *x,
                          const float *dlogits, float *grads, graph_grad_hook hook, void *hook_ctx)
{
    bwd_ctx c = {{be, st, mf, l, params, a, samples, x}, grads};
    a->dlogits = dlogits;
    if (!a->window) DPS_TRY(be->ops->memset0(be, st, grads, l->total * sizeof(float)));
    for (int i = mf->nops - 1; i >= 0; i--) {
        DPS_TRY(enter(a, i, 1, &c.f.params, &c.grads));
        DPS_TRY(backward_op(&c, i, hook, hook_ctx));
    }
    return DPS_OK;
}
