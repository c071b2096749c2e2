/* The model a configuration trains: the MLP or a model file's graph behind
 * one set of calls (see net.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "elementwise.h"
#include "model/net.h"

enum { RNG_INPUT = 2, RNG_LABELS = 3 }; /* model.c's input stream, and a file's labels */

static dps_status no_memory(const char *what)
{
    return dps_fail(DPS_ERR_RUNTIME, "out of host memory for %s", what);
}

/* The MLP's units: each hidden layer's weight and bias, and the classifier's. */
static dps_status mlp_units(net *n)
{
    model_shape s = n->shape;
    n->nunits = s.layers + 1;
    n->units = malloc((size_t)n->nunits * sizeof *n->units);
    if (!n->units) return no_memory("the model's units");
    for (int l = 0; l <= s.layers; l++)
        n->units[l] = (net_unit){model_weight_offset(s, l),
                                 l < s.layers ? model_weight_offset(s, l + 1) : n->params};
    return DPS_OK;
}

static int by_lo(const void *a, const void *b)
{
    const net_unit *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Op i's tensors' run of the flat buffer; 0 when it has none. */
static int op_span(const net *n, int i, net_unit *u)
{
    const mf_op *o = &n->file.ops[i];
    int t[2] = {o->weight, o->bias}, any = 0;
    for (int k = 0; k < 2; k++) {
        if (t[k] < 0) continue;
        size_t lo = n->layout.offset[t[k]], hi = lo + n->file.tensors[t[k]].numel;
        if (!any || lo < u->lo) u->lo = lo;
        if (!any || hi > u->hi) u->hi = hi;
        any = 1;
    }
    return any;
}

/* A file's units: its ops' runs, those that overlap (shared tensors)
 * merged, stretched to cover the buffer; each op's unit. */
static dps_status file_units(net *n)
{
    int nops = n->file.nops, m = 0;
    n->units = malloc(((size_t)nops + 1) * sizeof *n->units);
    n->unit_of = malloc((size_t)nops * sizeof *n->unit_of);
    if (!n->units || !n->unit_of) return no_memory("the model file's units");
    for (int i = 0; i < nops; i++) m += op_span(n, i, &n->units[m]);
    if (!m) n->units[m++] = (net_unit){0, n->params};
    qsort(n->units, (size_t)m, sizeof *n->units, by_lo);
    int k = 0;
    for (int i = 1; i < m; i++) {
        if (n->units[i].lo < n->units[k].hi) {
            if (n->units[i].hi > n->units[k].hi) n->units[k].hi = n->units[i].hi;
        } else n->units[++k] = n->units[i];
    }
    n->nunits = k + 1;
    n->units[0].lo = 0;
    for (int u = 0; u + 1 < n->nunits; u++) n->units[u].hi = n->units[u + 1].lo;
    n->units[n->nunits - 1].hi = n->params;
    for (int i = 0; i < nops; i++) {
        net_unit sp;
        n->unit_of[i] = -1;
        for (int u = 0; op_span(n, i, &sp) && u < n->nunits; u++)
            if (sp.lo >= n->units[u].lo && sp.lo < n->units[u].hi) n->unit_of[i] = u;
    }
    return DPS_OK;
}

size_t net_unit_max(const net *n)
{
    size_t most = 0;
    for (int u = 0; u < n->nunits; u++)
        if (n->units[u].hi - n->units[u].lo > most) most = n->units[u].hi - n->units[u].lo;
    return most;
}

void net_acts_window(const net *n, net_acts *a, net_window *w)
{
    if (w) w->unit_of = n->unit_of;
    a->mlp.window = w;
    a->graph.window = w;
}

dps_status net_mlp(model_shape s, net *n)
{
    memset(n, 0, sizeof *n);
    n->shape = s;
    n->ntensors = 2 * (s.layers + 1);
    n->counts = malloc((size_t)n->ntensors * sizeof *n->counts);
    if (!n->counts) return no_memory("the model's tensor list");
    n->ntensors = bucket_model_params(s, n->counts, n->ntensors);
    n->params = model_param_count(s);
    n->input = (size_t)s.tokens * (size_t)s.width;
    n->rows = s.tokens;
    n->classes = s.classes;
    n->fwd_flops = model_fwd_flops_per_sample(s);
    return mlp_units(n);
}

/* A file's tensor list in the flat buffer's order and its ready order. */
static dps_status file_orders(net *n)
{
    const model_file *mf = &n->file;
    int t = mf->ntensors, *order = malloc((size_t)t * sizeof *order);
    n->ready = malloc((size_t)t * sizeof *n->ready);
    n->counts = malloc((size_t)t * sizeof *n->counts);
    if (!order || !n->ready || !n->counts) {
        free(order);
        return no_memory("the model file's tensor list");
    }
    model_file_bucket_order(mf, order);
    for (int i = 0; i < t; i++) n->counts[i] = mf->tensors[order[i]].numel;
    model_file_ready_order(mf, n->ready);
    free(order);
    n->ntensors = t;
    return DPS_OK;
}

dps_status net_read(const char *path, net *n)
{
    memset(n, 0, sizeof *n);
    if (strlen(path) >= sizeof n->path)
        return dps_fail(DPS_ERR_USAGE, "model file path '%.64s...' is longer than %d characters; "
                        "move the file nearer", path, NET_PATH_MAX - 1);
    DPS_TRY(model_file_read(path, &n->file));
    dps_strlcpy(n->path, path, sizeof n->path);
    dps_status rc = graph_layout_make(&n->file, &n->layout);
    if (!rc) rc = file_orders(n);
    if (!rc) {
        n->params = n->layout.total;
        rc = file_units(n);
    }
    if (rc) {
        net_free(n);
        return rc;
    }
    const model_file *mf = &n->file;
    n->params = n->layout.total;
    n->input = mf->input;
    n->rows = (int)model_file_rows(mf);
    n->classes = mf->classes;
    n->fwd_flops = model_file_fwd_flops(mf);
    size_t per_row = mf->input / (size_t)n->rows;
    n->shape = (model_shape){mf->nops, per_row ? (int)per_row : 1, n->rows, mf->classes};
    return DPS_OK;
}

void net_free(net *n)
{
    if (net_is_file(n)) {
        model_file_free(&n->file);
        graph_layout_free(&n->layout);
    }
    free(n->ready);
    free(n->counts);
    free(n->units);
    free(n->unit_of);
    memset(n, 0, sizeof *n);
}

/* The files this process read (net_load), kept until net_unload_all. */
#define NET_LOADED_MAX 64
static net *loaded[NET_LOADED_MAX];
static int nloaded;

dps_status net_load(const char *path, const net **out)
{
    for (int i = 0; i < nloaded; i++)
        if (strcmp(loaded[i]->path, path) == 0) {
            *out = loaded[i];
            return DPS_OK;
        }
    if (nloaded == NET_LOADED_MAX)
        return dps_fail(DPS_ERR_USAGE, "%s: more than %d model files in one command; sweep fewer "
                        "at a time", path, NET_LOADED_MAX);
    net *n = malloc(sizeof *n);
    if (!n) return no_memory("a model file");
    dps_status rc = net_read(path, n);
    if (rc) {
        free(n);
        return rc;
    }
    *out = loaded[nloaded++] = n;
    return DPS_OK;
}

void net_unload_all(void)
{
    for (int i = 0; i < nloaded; i++) {
        net_free(loaded[i]);
        free(loaded[i]);
    }
    nloaded = 0;
}

int net_buckets(const net *n, double first_mb, double mb, bucket *out, int max)
{
    return bucket_assign(n->counts, n->ntensors, sizeof(float), (size_t)(first_mb * 1048576.0),
                         (size_t)(mb * 1048576.0), out, max);
}

void net_init_params(const net *n, uint64_t seed, float *params)
{
    if (net_is_file(n)) graph_init_params(&n->file, &n->layout, seed, params);
    else model_init_params(n->shape, seed, params);
}

/* A file's samples: inputs U[-1, 1), each row's label uniform over the classes. */
static void file_batch(const net *n, uint64_t seed, int step, int64_t sample0, int samples,
                       float *x, int32_t *labels)
{
    uint64_t in = RNG_INPUT + ((uint64_t)step << 8), lab = RNG_LABELS + ((uint64_t)step << 8);
    size_t nx = (size_t)samples * n->input, nl = (size_t)samples * (size_t)n->rows;
    uint64_t x0 = (uint64_t)sample0 * n->input, l0 = (uint64_t)sample0 * (uint64_t)n->rows;
    for (size_t i = 0; i < nx; i++) x[i] = dps_uniform(seed, in, x0 + i);
    for (size_t r = 0; r < nl; r++) {
        double u = (double)dps_uniform(seed, lab, l0 + r);
        int c = (int)floor((u + 1.0) * 0.5 * (double)n->classes);
        labels[r] = c < n->classes ? c : n->classes - 1;
    }
}

void net_make_batch(const net *n, uint64_t seed, int step, int64_t sample0, int samples,
                    float *x, int32_t *labels)
{
    if (net_is_file(n)) {
        file_batch(n, seed, step, sample0, samples, x, labels);
        return;
    }
    model_make_batch(n->shape, seed, step, sample0 * n->rows, samples * n->rows, x, labels);
}

dps_status net_acts_alloc(backend *be, int dev, const net *n, int max_samples, dps_precision prec,
                          dps_tf32 tf32, net_acts *a)
{
    memset(a, 0, sizeof *a);
    a->tf32 = tf32;
    if (!net_is_file(n)) return model_acts_alloc(be, dev, n->shape, max_samples * n->rows, prec, &a->mlp);
    a->done = calloc((size_t)n->ntensors, 1);
    if (!a->done) return no_memory("the gradients' ready flags");
    dps_status rc = graph_acts_alloc(be, dev, &n->file, max_samples, prec, &a->graph);
    a->graph.tf32 = tf32;
    if (rc) net_acts_free(be, n, a);
    return rc;
}

void net_acts_free(backend *be, const net *n, net_acts *a)
{
    if (net_is_file(n)) graph_acts_free(be, &a->graph);
    else model_acts_free(be, &a->mlp);
    free(a->done);
    memset(a, 0, sizeof *a);
}

void net_acts_trace(const net *n, net_acts *a, op_trace *t)
{
    if (net_is_file(n)) a->graph.trace = t;
    else a->mlp.trace = t;
}

dps_status net_forward(backend *be, be_stream *st, const net *n, const float *params, net_acts *a,
                       int samples, const float *x, float *logits)
{
    if (net_is_file(n))
        return graph_forward(be, st, &n->file, &n->layout, params, &a->graph, samples, x, logits);
    DPS_TRY(be->ops->gemm_tf32(be, st, dps_tf32_for(a->tf32, 0))); /* the MLP's Linears */
    return model_forward(be, st, n->shape, params, &a->mlp, samples * n->rows, x, logits);
}

/* The caller's hook and what it needs to turn a layer or a tensor into an offset. */
typedef struct ready_ctx {
    const net *n;
    net_acts *a;
    net_ready_hook hook;
    void *ctx;
} ready_ctx;

static dps_status mlp_ready(void *ctx, int layer)
{
    ready_ctx *r = ctx;
    return r->hook(r->ctx, model_weight_offset(r->n->shape, layer));
}

/* A tensor's gradient is final: the offset falls to the lowest tensor of
 * the run of final ones in ready order from the first (a tensor final out
 * of ready order waits for those before it). */
static dps_status file_ready(void *ctx, int tensor)
{
    ready_ctx *r = ctx;
    const net *n = r->n;
    net_acts *a = r->a;
    a->done[n->file.tensors[tensor].ready] = 1;
    int was = a->done_upto;
    while (a->done_upto < n->ntensors && a->done[a->done_upto]) a->done_upto++;
    if (a->done_upto == was) return DPS_OK;
    return r->hook(r->ctx, n->layout.offset[n->ready[a->done_upto - 1]]);
}

dps_status net_backward(backend *be, be_stream *st, const net *n, const float *params,
                        net_acts *a, int samples, const float *x, const float *dlogits,
                        float *grads, net_ready_hook hook, void *hook_ctx)
{
    ready_ctx r = {n, a, hook, hook_ctx};
    if (!net_is_file(n)) {
        DPS_TRY(be->ops->gemm_tf32(be, st, dps_tf32_for(a->tf32, 0)));
        return model_backward(be, st, n->shape, params, &a->mlp, samples * n->rows, x, dlogits,
                              grads, hook ? mlp_ready : NULL, &r);
    }
    memset(a->done, 0, (size_t)n->ntensors);
    a->done_upto = 0;
    return graph_backward(be, st, &n->file, &n->layout, params, &a->graph, samples, x, dlogits,
                          grads, hook ? file_ready : NULL, &r);
}
