/* Unit tests of model/: the presets, the batch thread, the gradients against
 * finite differences, the model under autocast, DDP's buckets, model files
 * and their ops run on the host backend against finite differences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "elementwise.h"
#include "model/batches.h"
#include "model/bucket.h"
#include "model/model.h"
#include "model/graph.h"
#include "model/model_file.h"
#include "model/net.h"
#include "strategies/ddp.h"

#include "expect.h"

static void test_presets(void)
{
    /* hand-computed: tiny = 2 * (64*64 + 64) + 64*16 + 16 */
    const model_preset *t = model_find_preset("tiny");
    EXPECT(t && model_param_count(t->shape) == 9360);
    EXPECT(model_matmul_params(t->shape) == 2 * 64 * 64 + 64 * 16);
    struct { const char *name; double params, fwd_gflop; } want[] = {
        {"resnet50-mlp", 25.6e6, 8.2}, {"bert-large-mlp", 335e6, 343.0}, {"gpt2-mlp", 124e6, 254.0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const model_preset *p = model_find_preset(want[i].name);
        EXPECT(p != NULL);
        if (!p) continue;
        double params = (double)model_param_count(p->shape);
        double gflop = model_fwd_flops_per_sample(p->shape) / 1e9;
        EXPECT(fabs(params / want[i].params - 1.0) < 0.02);
        EXPECT(fabs(gflop / want[i].fwd_gflop - 1.0) < 0.03);
    }
    EXPECT(model_find_preset("nope") == NULL);
    /* the real models: bench/models/' files, with their exact tensor lists */
    struct { const char *name; size_t params; int tensors; } files[] = {
        {"resnet50", 25557032, 161}, {"gpt2", 124439808, 148}, {"bert-large", 335174458, 298},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const model_preset *p = model_find_preset(files[i].name);
        char path[1024];
        net n;
        EXPECT(p && p->file && net_read(model_preset_path(p, path, sizeof path), &n) == DPS_OK);
        if (!p || !n.params) continue;
        EXPECT(n.params == files[i].params && n.ntensors == files[i].tensors);
        net_free(&n);
    }
    /* the layout tiles the flat buffer exactly */
    model_shape s = {3, 5, 2, 7};
    EXPECT(model_weight_offset(s, 1) == 30 && model_bias_offset(s, 0) == 25);
    EXPECT(model_bias_offset(s, 3) + 7 == model_param_count(s));
}

/* The batches made on the helper thread, ahead of each step or when asked:
 * model_make_batch's own, bit for bit, step after step. */
static void test_batches(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    model_shape s = {2, 64, 4, 16};
    net n;
    EXPECT(net_mlp(s, &n) == DPS_OK);
    enum { SAMPLES = 3, ROWS = SAMPLES * 4, STEPS = 5 };
    float want_x[ROWS * 64];
    int32_t want_y[ROWS];
    for (int ahead = 0; ahead < 2; ahead++) {
        batches b;
        EXPECT(batches_start(&b, be, &n, 1234, 2, SAMPLES, 1, 0, STEPS, ahead) == DPS_OK);
        for (int k = 0; k < STEPS; k++) {
            const float *x = NULL;
            const int32_t *y = NULL;
            batches_get(&b, k, &x, &y);
            model_make_batch(s, 1234, k, 2 * 4, ROWS, want_x, want_y);
            EXPECT(memcmp(x, want_x, sizeof want_x) == 0 && memcmp(y, want_y, sizeof want_y) == 0);
        }
        batches_stop(&b);
        batches_stop(&b); /* twice: nothing left to end or free */
    }
    batches zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    batches_stop(&zeroed);
    net_free(&n);
    be_close(be);
}

/* Loss of the model on the host backend, in double for finite differences. */
static double host_loss(backend *be, model_shape s, float *params, model_acts *a, int rows,
                        const float *x, const int32_t *labels, float *logits, float *dl, float *rl)
{
    be_stream *st = expect_stream(be);
    EXPECT(model_forward(be, st, s, params, a, rows, x, logits) == DPS_OK);
    EXPECT(be->ops->xent(be, st, rows, s.classes, logits, labels, 1.0f / rows, dl, rl) == DPS_OK);
    double sum = 0;
    for (int r = 0; r < rows; r++) sum += rl[r];
    expect_stream_free(be, st);
    return sum / rows;
}

static void test_gradients(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    be_stream *st = expect_stream(be);
    model_shape s = {2, 6, 3, 5};
    int rows = 4 * s.tokens;
    size_t n = model_param_count(s);
    float *p = malloc(n * 4), *g = malloc(n * 4), *x = malloc((size_t)rows * s.width * 4);
    float *logits = malloc((size_t)rows * s.classes * 4), *dl = malloc((size_t)rows * s.classes * 4);
    float *rl = malloc((size_t)rows * 4);
    int32_t *labels = malloc((size_t)rows * 4);
    model_init_params(s, 3, p);
    for (size_t i = 0; i < n; i++) p[i] *= 3.0f; /* larger weights: visible GELU curvature */
    model_make_batch(s, 3, 0, 0, rows, x, labels);
    model_acts a;
    EXPECT(model_acts_alloc(be, 0, s, rows, PREC_FP32, &a) == DPS_OK);
    host_loss(be, s, p, &a, rows, x, labels, logits, dl, rl);
    EXPECT(model_backward(be, st, s, p, &a, rows, x, dl, g, NULL, NULL) == DPS_OK);
    double worst = 0;
    for (size_t i = 0; i < n; i += 3) {
        float keep = p[i];
        double h = 1e-2;
        p[i] = keep + (float)h;
        double up = host_loss(be, s, p, &a, rows, x, labels, logits, dl, rl);
        p[i] = keep - (float)h;
        double down = host_loss(be, s, p, &a, rows, x, labels, logits, dl, rl);
        p[i] = keep;
        double num = (up - down) / (2 * h);
        double err = fabs(num - g[i]) / (fabs(num) + fabs(g[i]) + 1e-3);
        if (err > worst) worst = err;
    }
    EXPECT(worst < 2e-2);
    if (worst >= 2e-2) fprintf(stderr, "worst relative gradient error %.3g\n", worst);
    model_acts_free(be, &a);
    EXPECT(be->mem[0].in_use == 0);
    expect_stream_free(be, st);
    be_close(be);
    free(p); free(g); free(x); free(logits); free(dl); free(rl); free(labels);
}

/* The model as under autocast (acts made for PREC_BF16), on the host
 * backend's exact emulation of the bf16 ops: logits are bf16 values and
 * near the fp32 model's; the gradients near the fp32 ones; the layers'
 * hooks come in the same order; every buffer is freed. */
static int bf16_hooks[8], bf16_nhooks;
static dps_status bf16_hook(void *ctx, int layer)
{
    (void)ctx;
    if (bf16_nhooks < 8) bf16_hooks[bf16_nhooks++] = layer;
    return DPS_OK;
}

static void test_model_bf16(void)
{
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    backend *be = NULL;
    EXPECT(be_open(&o, &be) == DPS_OK);
    if (!be) return;
    be_stream *st = expect_stream(be);
    model_shape s = {3, 32, 4, 24};
    int rows = 5 * s.tokens;
    size_t n = model_param_count(s), nl = (size_t)rows * s.classes;
    float *p = malloc(n * 4), *g32 = malloc(n * 4), *g16 = malloc(n * 4);
    float *x = malloc((size_t)rows * s.width * 4), *l32 = malloc(nl * 4), *l16 = malloc(nl * 4);
    float *dl = malloc(nl * 4), *rl = malloc((size_t)rows * 4);
    int32_t *labels = malloc((size_t)rows * 4);
    model_init_params(s, 5, p);
    model_make_batch(s, 5, 0, 0, rows, x, labels);
    model_acts a32, a16;
    EXPECT(model_acts_alloc(be, 0, s, rows, PREC_FP32, &a32) == DPS_OK && a32.half == BE_F32);
    EXPECT(model_acts_alloc(be, 0, s, rows, PREC_BF16, &a16) == DPS_OK && a16.half == BE_BF16);
    EXPECT(model_forward(be, st, s, p, &a32, rows, x, l32) == DPS_OK);
    EXPECT(model_forward(be, st, s, p, &a16, rows, x, l16) == DPS_OK);
    double worst = 0, top = 0;
    int representable = 1;
    for (size_t i = 0; i < nl; i++) {
        representable &= dps_bf16_to_f32(dps_f32_to_bf16(l16[i])) == l16[i];
        worst = fmax(worst, fabs(l16[i] - l32[i]));
        top = fmax(top, fabs(l32[i]));
    }
    EXPECT(representable && worst <= 0.03 * top + 1e-3);
    EXPECT(be->ops->xent(be, st, rows, s.classes, l32, labels, 1.0f / rows, dl, rl) == DPS_OK);
    EXPECT(model_backward(be, st, s, p, &a32, rows, x, dl, g32, NULL, NULL) == DPS_OK);
    EXPECT(model_backward(be, st, s, p, &a16, rows, x, dl, g16, bf16_hook, NULL) == DPS_OK);
    worst = top = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(g16[i] - g32[i]));
        top = fmax(top, fabs(g32[i]));
    }
    EXPECT(top > 0 && worst <= 0.03 * top);
    if (worst > 0.03 * top) fprintf(stderr, "bf16 gradients off by %.3g of %.3g\n", worst, top);
    EXPECT(bf16_nhooks == 4 && bf16_hooks[0] == 3 && bf16_hooks[3] == 0);
    model_acts_free(be, &a16);
    model_acts_free(be, &a32);
    EXPECT(be->mem[0].in_use == 0);
    expect_stream_free(be, st);
    be_close(be);
    free(p); free(g32); free(g16); free(x); free(l32); free(l16); free(dl); free(rl); free(labels);
}

static void test_buckets(void)
{
    /* model order; reverse order is 5, 50, 10, 100, 10, 100 elements (4 bytes) */
    size_t counts[] = {100, 10, 100, 10, 50, 5};
    bucket b[16];
    int n = bucket_assign(counts, 6, 4, 200, 400, b, 16);
    EXPECT(n == 3);
    /* first bucket closes at >= 200 bytes: params 5 and 4 */
    EXPECT(b[0].first_param == 4 && b[0].nparams == 2 && b[0].lo == 220 && b[0].hi == 275);
    EXPECT(b[1].first_param == 2 && b[1].nparams == 2 && b[1].lo == 110 && b[1].hi == 220);
    EXPECT(b[2].first_param == 0 && b[2].nparams == 2 && b[2].lo == 0 && b[2].hi == 110);
    /* a cap above the total: one bucket for all */
    n = bucket_assign(counts, 6, 4, 1 << 20, 1 << 20, b, 16);
    EXPECT(n == 1 && b[0].lo == 0 && b[0].hi == 275 && b[0].nparams == 6);
    /* a cap below every parameter: one bucket per parameter, last parameter first */
    n = bucket_assign(counts, 6, 4, 1, 1, b, 16);
    EXPECT(n == 6);
    for (int i = 0; i < n && n == 6; i++) EXPECT(b[i].first_param == 5 - i && b[i].nparams == 1);
    /* the first bucket's cap differs from the others' */
    n = bucket_assign(counts, 6, 4, 1, 100000, b, 16);
    EXPECT(n == 2 && b[0].nparams == 1 && b[1].nparams == 5);
    EXPECT(bucket_assign(counts, 6, 4, 1, 1, b, 3) == -1);
    /* buckets tile the parameters in reverse order for the model too */
    model_shape s = {3, 300, 4, 1000};
    size_t mc[16];
    int np = bucket_model_params(s, mc, 16);
    EXPECT(np == 8);
    n = bucket_assign(mc, np, 4, 1 << 20, 1 << 20, b, 16);
    size_t hi = model_param_count(s);
    for (int i = 0; i < n; i++) {
        EXPECT(b[i].hi == hi);
        hi = b[i].lo;
    }
    EXPECT(hi == 0);
    int sizes[4];
    ddp_shard_sizes(10, 4, sizes);
    EXPECT(sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 2 && sizes[3] == 2);
}

#define MF_HEAD "dpscale-model 1\nname tiny\ninput 12\nclasses 3\n"
#define MF_TENSORS "tensor fc1.weight 4x6 ready=2\ntensor fc1.bias 4 ready=3\n" \
                   "tensor ln.weight 4 ready=1\ntensor fc2.weight 3x4 ready=0\n"
#define MF_OPS "op gemm fc1 m=2 k=6 n=4 weight=fc1.weight bias=fc1.bias saved=48\n" \
               "op act relu fn=gelu saved=32\nop norm ln c=4 weight=ln.weight\n" \
               "op add res from=fc1\nop gemm fc2 m=2 k=4 n=3 weight=fc2.weight\n"

static dps_status load_model_file(const char *path)
{
    model_file mf;
    dps_status rc = model_file_read(path, &mf);
    if (!rc) model_file_free(&mf);
    return rc;
}

static void test_model_file(void)
{
    const char *path = write_tmp("tiny.model", MF_HEAD MF_TENSORS MF_OPS, strlen(MF_HEAD MF_TENSORS MF_OPS));
    model_file mf;
    EXPECT(model_file_read(path, &mf) == DPS_OK);
    EXPECT(mf.ntensors == 4 && mf.nops == 5 && mf.classes == 3 && mf.input == 12);
    EXPECT(model_file_params(&mf) == 24 + 4 + 4 + 12);
    EXPECT_NEAR(model_file_fwd_flops(&mf), 2.0 * 2 * 6 * 4 + 2.0 * 2 * 4 * 3, 0);
    EXPECT(model_file_rows(&mf) == 2);
    EXPECT(mf.ops[3].from == 0 && mf.ops[3].in == 2 && mf.ops[0].in == MF_INPUT);
    EXPECT(mf.tensors[2].first_op == 2 && mf.ops[1].fn == MF_GELU && mf.ops[0].saved == 48);
    int order[4];
    model_file_ready_order(&mf, order);
    EXPECT(order[0] == 3 && order[1] == 2 && order[2] == 0 && order[3] == 1);
    model_file_bucket_order(&mf, order);
    EXPECT(order[0] == 1 && order[1] == 0 && order[2] == 2 && order[3] == 3);
    unlink(path);
    model_file_free(&mf);
    const struct { const char *text, *needle; } bad[] = {
        {"name x\n", ":1: expected 'dpscale-model 1'"},
        {"dpscale-model 2\n", ":1: model file format 2"},
        {MF_HEAD "layer x\n", ":5: unknown record 'layer'"},
        {MF_HEAD MF_TENSORS "op conv fc1 m=2\n", ":9: op kind conv: expected one of"},
        {MF_HEAD MF_TENSORS "op gemm fc1 m=2 k=6 n=4 weight=fc1.weight bias=fc1.bias c=3\n",
         ":9: a gemm op takes no key 'c'"},
        {MF_HEAD MF_TENSORS "op gemm fc1 m=two k=6 n=4 weight=fc1.weight\n", ":9: m=two: expected a whole number"},
        {MF_HEAD "tensor a 4 ready=0\ntensor a 4 ready=1\n", ":6: tensor a given twice"},
        {MF_HEAD "tensor a 4x0 ready=0\n", ":5: shape=0: expected a whole number"},
        {MF_HEAD MF_TENSORS "op gemm fc1 m=2 k=6 n=4 weight=fc9.weight\n", ":9: tensor fc9.weight is not given above"},
        {MF_HEAD MF_TENSORS "op gemm fc1 m=2 k=6 n=4 weight=fc2.weight\n", ":9: weight fc2.weight has 12 elements"},
        {MF_HEAD MF_TENSORS "op gemm fc1 m=3 k=6 n=4 weight=fc1.weight\n", ":9: op fc1 takes 18 elements per sample, but its input (the input) gives 12: put a resample op"},
        {MF_HEAD MF_TENSORS MF_OPS "op add r2 from=nowhere\n", ":14: nowhere: no op of that name"},
        {MF_HEAD MF_TENSORS MF_OPS "op act relu fn=relu\n", ":14: op relu given twice"},
        {MF_HEAD MF_TENSORS "op gemm fc1 m=2 k=6 n=4 weight=fc1.weight bias=fc1.bias\n", ":7: tensor ln.weight: no op names it"},
        {MF_HEAD "tensor a 6x6 ready=1\nop gemm g m=2 k=6 n=6 weight=a\n", ":5: tensor a: ready=1, but the ready values must be 0 to 0"},
        {MF_HEAD "tensor a 4x6 ready=0\nop gemm g m=2 k=6 n=4 weight=a\nop resample r n=7\n", ":7: the last op's output (7 elements per sample) is not rows of classes 3"},
        {MF_HEAD MF_TENSORS "op act a\n", ":9: an act op needs fn="},
        {"dpscale-model 1\nname x\nop act a fn=relu\n", ":3: an op before the 'input N' record"},
        {MF_HEAD "op act a fn=relu\n", ":5: a model file needs name, input, classes, tensors and ops"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_file_refused(load_model_file, bad[i].text, bad[i].needle);
}

/* Every kind of op, a tied weight, a residual, growing and shrinking resamples. */
static const char graph_file[] =
    "dpscale-model 1\nname kinds\ninput 24\nclasses 3\n"
    "tensor emb.weight 5x6 ready=5\ntensor fc1.weight 8x6 ready=4\ntensor fc1.bias 8 ready=3\n"
    "tensor ln.weight 8 ready=2\ntensor ln.bias 8 ready=1\ntensor fc2.weight 3x8 ready=0\n"
    "op embedding emb m=4 weight=emb.weight\nop gemm fc1 m=4 k=6 n=8 weight=fc1.weight bias=fc1.bias\n"
    "op norm ln c=8 weight=ln.weight bias=ln.bias\nop act a1 fn=gelu\nop resample r1 n=24\n"
    "op gemm att m=2 k=2 n=4 b=2\nop resample r2 n=32\nop add res from=a1\nop resample r3 n=24\n"
    "op gemm tie m=4 k=6 n=5 weight=emb.weight\nop resample r4 n=32\n"
    "op gemm fc2 m=4 k=8 n=3 weight=fc2.weight\n";

typedef struct graph_case {
    backend *be;
    be_stream *st;
    model_file mf;
    graph_layout l;
    graph_acts a;
    float *x, *r, *y;
    int samples, hooks[8], nhooks;
} graph_case;

/* sum(logits * r), in double */
static double graph_loss(graph_case *g, const float *p)
{
    EXPECT(graph_forward(g->be, g->st, &g->mf, &g->l, p, &g->a, g->samples, g->x, g->y) == DPS_OK);
    double loss = 0;
    for (int i = 0; i < g->samples * 12; i++) loss += (double)g->y[i] * g->r[i];
    return loss;
}

static dps_status graph_hook(void *ctx, int t)
{
    graph_case *g = ctx;
    if (g->nhooks < 8) g->hooks[g->nhooks] = t;
    g->nhooks++;
    return DPS_OK;
}

/* Backward's gradients of text's tensors against central differences, the
 * hooks in ready order; total: the parameters' floats. */
static void check_graph_gradients(const char *name, const char *text, size_t len, size_t total)
{
    graph_case g = {.samples = 2};
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    const char *path = write_tmp(name, text, len);
    EXPECT(model_file_read(path, &g.mf) == DPS_OK && be_open(&o, &g.be) == DPS_OK);
    unlink(path);
    if (!g.be || !g.mf.nops) return;
    g.st = expect_stream(g.be);
    EXPECT(graph_layout_make(&g.mf, &g.l) == DPS_OK && g.l.total == total);
    EXPECT(g.l.offset[0] == 0 || g.mf.tensors[0].ready != g.mf.ntensors - 1); /* the last ready first */
    EXPECT(graph_acts_alloc(g.be, 0, &g.mf, g.samples, PREC_FP32, &g.a) == DPS_OK);
    float *p = malloc(g.l.total * sizeof *p), *grads = malloc(g.l.total * sizeof *grads);
    g.x = malloc(48 * sizeof *g.x);
    g.r = malloc(24 * sizeof *g.r);
    g.y = malloc(24 * sizeof *g.y);
    graph_init_params(&g.mf, &g.l, 7, p);
    for (int i = 0; i < 48; i++) g.x[i] = dps_uniform(8, 1, (uint64_t)i);
    for (int i = 0; i < 24; i++) g.r[i] = dps_uniform(8, 2, (uint64_t)i);
    for (size_t i = 0; i < g.l.total; i++) p[i] *= 3.0f; /* visible GELU curvature */
    graph_loss(&g, p);
    EXPECT(graph_backward(g.be, g.st, &g.mf, &g.l, p, &g.a, g.samples, g.x, g.r, grads, graph_hook,
                          &g) == DPS_OK);
    EXPECT(g.nhooks == g.mf.ntensors);
    for (int i = 0; i < g.mf.ntensors && i < g.nhooks && i < 8; i++)
        EXPECT(g.mf.tensors[g.hooks[i]].ready == i);
    double worst = 0, h = 1e-2;
    for (size_t i = 0; i < g.l.total; i++) {
        float keep = p[i];
        p[i] = keep + (float)h;
        double up = graph_loss(&g, p);
        p[i] = keep - (float)h;
        double down = graph_loss(&g, p);
        p[i] = keep;
        double num = (up - down) / (2 * h), err = fabs(num - grads[i]) / (1.0 + fabs(num));
        if (err > worst) worst = err;
    }
    EXPECT(worst < 1e-2);
    if (worst >= 1e-2) fprintf(stderr, "%s: graph gradients: worst relative error %g\n", name, worst);
    graph_acts_free(g.be, &g.a);
    EXPECT(g.be->mem[0].in_use == 0);
    graph_layout_free(&g.l);
    model_file_free(&g.mf);
    expect_stream_free(g.be, g.st);
    be_close(g.be);
    free(p); free(grads); free(g.x); free(g.r); free(g.y);
}

/* The kinds torchvision's classifiers add: a depthwise gemm (g = 4 groups),
 * squeeze-and-excitation's mul by an op's output, a cat of an op's output
 * and one of a tensor (a class token). */
static const char zoo_file[] =
    "dpscale-model 1\nname zoo\ninput 24\nclasses 3\n"
    "tensor dw.weight 4x3 ready=3\ntensor dw.bias 4 ready=2\ntensor tok 2 ready=1\n"
    "tensor fc.weight 3x5 ready=0\n"
    "op gemm dw m=2 k=12 n=4 g=4 weight=dw.weight bias=dw.bias\nop act s fn=hardsigmoid\n"
    "op resample sq n=4\nop mul se in=dw from=sq\nop cat ct from=sq\nop cat cls weight=tok\n"
    "op resample r n=20\nop gemm fc m=4 k=5 n=3 weight=fc.weight\n";

/* The activation functions but softmax (which runs GELU's pass, as kinds.model's a1),
 * between GEMMs; relu, tanh and sigmoid's backward from their output. */
static const char acts_file[] =
    "dpscale-model 1\nname acts\ninput 24\nclasses 3\n"
    "tensor fc1.weight 6x6 ready=6\ntensor fc1.bias 6 ready=5\ntensor fc2.weight 6x6 ready=4\n"
    "tensor fc2.bias 6 ready=3\ntensor fc3.weight 6x6 ready=2\ntensor fc3.bias 6 ready=1\n"
    "tensor fc4.weight 3x6 ready=0\n"
    "op gemm fc1 m=4 k=6 n=6 weight=fc1.weight bias=fc1.bias\nop act a1 fn=relu\n"
    "op gemm fc2 m=4 k=6 n=6 weight=fc2.weight bias=fc2.bias\nop act a2 fn=tanh\n"
    "op act a3 fn=silu\nop act a4 fn=mish\nop act a5 fn=hardswish\n"
    "op gemm fc3 m=4 k=6 n=6 weight=fc3.weight bias=fc3.bias\nop act a6 fn=sigmoid\n"
    "op act a7 fn=relu6\nop act a8 fn=hardsigmoid\nop act a9 fn=gelu\n"
    "op gemm fc4 m=4 k=6 n=3 weight=fc4.weight\n";

static void test_graph_gradients(void)
{
    check_graph_gradients("kinds.model", graph_file, sizeof graph_file - 1, 126);
    check_graph_gradients("zoo.model", zoo_file, sizeof zoo_file - 1, 33);
    check_graph_gradients("acts.model", acts_file, sizeof acts_file - 1, 144);
}

/* net.c over a model file: a sample's data the same whatever the shard,
 * and backward's ready offsets only falling, each once every tensor before
 * it in ready order is final (fc2's gradient here is final first but is
 * second in ready order: no offset until the norm's makes ready place 0). */
typedef struct ready_log { size_t lo[8]; int n; } ready_log;

static dps_status log_ready(void *ctx, size_t lo)
{
    ready_log *r = ctx;
    if (r->n < 8) r->lo[r->n] = lo;
    r->n++;
    return DPS_OK;
}

static void test_net(void)
{
    char text[sizeof graph_file + 8];
    memcpy(text, graph_file, sizeof graph_file);
    memcpy(strstr(text, "ln.bias 8 ready=1"), "ln.bias 8 ready=0", 17);
    memcpy(strstr(text, "fc2.weight 3x8 ready=0"), "fc2.weight 3x8 ready=1", 22);
    const char *path = write_tmp("ready.model", text, strlen(text));
    net n;
    backend *be = NULL;
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    EXPECT(net_read(path, &n) == DPS_OK && be_open(&o, &be) == DPS_OK);
    unlink(path);
    if (!be || !n.params) return;
    be_stream *st = expect_stream(be);
    float x6[6 * 24], x3[6 * 24], *p = malloc(n.params * sizeof *p), *g = malloc(n.params * sizeof *g);
    int32_t y6[6 * 4], y3[6 * 4];
    net_make_batch(&n, 5, 2, 0, 6, x6, y6);
    net_make_batch(&n, 5, 2, 0, 3, x3, y3);
    net_make_batch(&n, 5, 2, 3, 3, x3 + 3 * 24, y3 + 3 * 4);
    EXPECT(memcmp(x6, x3, sizeof x6) == 0 && memcmp(y6, y3, sizeof y6) == 0);
    for (int i = 0; i < 24; i++) EXPECT(y6[i] >= 0 && y6[i] < 3);
    net_acts a;
    float logits[2 * 12], dl[2 * 12];
    ready_log r = {{0}, 0};
    net_init_params(&n, 7, p);
    for (int i = 0; i < 24; i++) dl[i] = 0.01f * (float)i;
    EXPECT(net_acts_alloc(be, 0, &n, 2, PREC_FP32, TF32_DEFAULT, &a) == DPS_OK);
    EXPECT(net_forward(be, st, &n, p, &a, 2, x6, logits) == DPS_OK);
    EXPECT(net_backward(be, st, &n, p, &a, 2, x6, dl, g, log_ready, &r) == DPS_OK);
    /* ready 0..2: ln.bias, fc2, ln.weight; the norm's backward readies 0, then 2 */
    int ln_weight = 3, fc2 = 5;
    EXPECT(n.ready[1] == fc2 && n.ready[2] == ln_weight && r.n == 5);
    EXPECT(r.lo[0] == n.layout.offset[fc2] && r.lo[1] == n.layout.offset[ln_weight]);
    for (int i = 1; i < r.n && i < 8; i++) EXPECT(r.lo[i] < r.lo[i - 1]);
    EXPECT(r.n == 5 && r.lo[4] == 0);
    net_acts_free(be, &n, &a);
    EXPECT(be->mem[0].in_use == 0);
    /* under autocast: logits within bf16's roundings of fp32's, the same ready order */
    float logits16[24];
    r.n = 0;
    EXPECT(net_acts_alloc(be, 0, &n, 2, PREC_BF16, TF32_DEFAULT, &a) == DPS_OK);
    EXPECT(net_forward(be, st, &n, p, &a, 2, x6, logits16) == DPS_OK);
    EXPECT(net_backward(be, st, &n, p, &a, 2, x6, dl, g, log_ready, &r) == DPS_OK);
    for (int i = 0; i < 24; i++)
        EXPECT(fabsf(logits16[i] - logits[i]) <= 0.02f * (fabsf(logits[i]) + 0.1f));
    EXPECT(r.n == 5 && r.lo[4] == 0);
    net_acts_free(be, &n, &a);
    EXPECT(be->mem[0].in_use == 0);
    expect_stream_free(be, st);
    be_close(be);
    net_free(&n);
    free(p);
    free(g);
}

EXPECT_GROUPS(GROUP(presets), GROUP(batches), GROUP(gradients), GROUP(model_bf16), GROUP(buckets),
              GROUP(model_file), GROUP(graph_gradients), GROUP(net));
