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
#include "model/graph_conv.h"
#include "model/model_file.h"
#include "model/net.h"
#include "strategies/ddp.h"

#include "dev_buf.h"
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

/* Loss of the model on the host backend (device operands, on d's stream;
 * rl: host memory for the rows' losses), in double for finite differences. */
static double host_loss(dev_bufs *d, model_shape s, float *params, model_acts *a, int rows,
                        const float *x, const int32_t *labels, float *logits, float *dl,
                        float *rl_dev, float *rl)
{
    backend *be = d->be;
    EXPECT(model_forward(be, d->st, s, params, a, rows, x, logits) == DPS_OK);
    EXPECT(be->ops->xent(be, d->st, rows, s.classes, logits, labels, 1.0f / rows, dl, rl_dev) ==
           DPS_OK);
    dev_get(d, rl, rl_dev, (size_t)rows * 4);
    double sum = 0;
    for (int r = 0; r < rows; r++) sum += rl[r];
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
    size_t nl = (size_t)rows * s.classes * 4;
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *p_ = dev_put(&d, p, n * 4), *g_ = dev_zeros(&d, n * 4);
    float *x_ = dev_put(&d, x, (size_t)rows * s.width * 4), *logits_ = dev_zeros(&d, nl);
    float *dl_ = dev_zeros(&d, nl), *rl_ = dev_zeros(&d, (size_t)rows * 4);
    int32_t *labels_ = dev_put(&d, labels, (size_t)rows * 4);
    host_loss(&d, s, p_, &a, rows, x_, labels_, logits_, dl_, rl_, rl);
    EXPECT(model_backward(be, st, s, p_, &a, rows, x_, dl_, g_, NULL, NULL) == DPS_OK);
    dev_get(&d, g, g_, n * 4);
    double worst = 0;
    for (size_t i = 0; i < n; i += 3) {
        float keep = p[i];
        double h = 1e-2;
        p[i] = keep + (float)h;
        dev_set(&d, p_ + i, &p[i], 4);
        double up = host_loss(&d, s, p_, &a, rows, x_, labels_, logits_, dl_, rl_, rl);
        p[i] = keep - (float)h;
        dev_set(&d, p_ + i, &p[i], 4);
        double down = host_loss(&d, s, p_, &a, rows, x_, labels_, logits_, dl_, rl_, rl);
        p[i] = keep;
        dev_set(&d, p_ + i, &p[i], 4);
        double num = (up - down) / (2 * h);
        double err = fabs(num - g[i]) / (fabs(num) + fabs(g[i]) + 1e-3);
        if (err > worst) worst = err;
    }
    EXPECT(worst < 2e-2);
    if (worst >= 2e-2) fprintf(stderr, "worst relative gradient error %.3g\n", worst);
    dev_bufs_free(&d);
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
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *p_ = dev_put(&d, p, n * 4), *g32_ = dev_zeros(&d, n * 4), *g16_ = dev_zeros(&d, n * 4);
    float *x_ = dev_put(&d, x, (size_t)rows * s.width * 4);
    float *l32_ = dev_zeros(&d, nl * 4), *l16_ = dev_zeros(&d, nl * 4), *dl_ = dev_zeros(&d, nl * 4);
    float *rl_ = dev_zeros(&d, (size_t)rows * 4);
    int32_t *labels_ = dev_put(&d, labels, (size_t)rows * 4);
    EXPECT(model_forward(be, st, s, p_, &a32, rows, x_, l32_) == DPS_OK);
    EXPECT(model_forward(be, st, s, p_, &a16, rows, x_, l16_) == DPS_OK);
    dev_get(&d, l32, l32_, nl * 4);
    dev_get(&d, l16, l16_, nl * 4);
    double worst = 0, top = 0;
    int representable = 1;
    for (size_t i = 0; i < nl; i++) {
        representable &= dps_bf16_to_f32(dps_f32_to_bf16(l16[i])) == l16[i];
        worst = fmax(worst, fabs(l16[i] - l32[i]));
        top = fmax(top, fabs(l32[i]));
    }
    EXPECT(representable && worst <= 0.03 * top + 1e-3);
    EXPECT(be->ops->xent(be, st, rows, s.classes, l32_, labels_, 1.0f / rows, dl_, rl_) == DPS_OK);
    EXPECT(model_backward(be, st, s, p_, &a32, rows, x_, dl_, g32_, NULL, NULL) == DPS_OK);
    EXPECT(model_backward(be, st, s, p_, &a16, rows, x_, dl_, g16_, bf16_hook, NULL) == DPS_OK);
    dev_get(&d, g32, g32_, n * 4);
    dev_get(&d, g16, g16_, n * 4);
    dev_bufs_free(&d);
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
        {MF_HEAD MF_TENSORS "op resample w n=12 kernel=1x1\n", ":9: kernel=, stride=, pad=, dilation= and pool= describe a window"},
        {MF_HEAD MF_TENSORS "op resample w n=12 window=3x2x2\n", ":9: window= needs kernel=KHxKW"},
        {MF_HEAD MF_TENSORS "op resample w n=12 window=3x2\n", ":9: window=3x2: expected CxHxW"},
        {MF_HEAD MF_TENSORS "op resample w n=12 window=3x2x2 kernel=1x1x1\n", ":9: kernel=1x1x1: expected two sizes"},
        {MF_HEAD MF_TENSORS "op resample w n=12 window=3x2x2 window=3x2x2\n", ":9: key window given twice"},
        {MF_HEAD MF_TENSORS "op resample w n=12 window=3x2x2 kernel=1x1 pool=min\n", ":9: pool=min: expected max or avg"},
        {MF_HEAD MF_TENSORS "op resample w n=18 window=3x2x3 kernel=1x1\n", ":9: window=3x2x3 holds 18 elements, but its input gives 12"},
        {MF_HEAD MF_TENSORS "op resample w n=13 window=3x2x2 kernel=1x1\n", ":9: n=13, but the window gives 2x2 output pixels of 3 columns, 12 elements"},
        {MF_HEAD MF_TENSORS "op resample w n=12 window=3x2x2 kernel=2x2 pad=2x2 pool=max\n", ":9: pad=2x2: a pooling's padding is at most half"},
        {MF_HEAD MF_TENSORS "op resample w n=3 window=3x2x2 kernel=2x2 dilation=2x2 pool=avg\n", ":9: pool=avg takes no dilation"},
        {MF_HEAD MF_TENSORS "op resample w n=3 window=3x2x2 kernel=3x3\n", ":9: the kernel 3x3 (dilated) is larger than the padded input 2x2"},
        {MF_HEAD "tensor cw 4x6 ready=0\nop resample c.im2col n=12 window=3x2x2 kernel=1x1\nop gemm c m=2 k=6 n=4 weight=cw\n",
         ":7: gemm c: m=2 k=6, but its im2col gives 4 output pixels (m) of 3 columns"},
        {MF_HEAD "tensor cw 4x3 ready=0\nop resample c.im2col n=12 window=3x2x2 kernel=1x1 pool=avg\nop gemm c m=4 k=3 n=4 weight=cw\n",
         ":7: gemm c reads c.im2col, a pooling"},
        {MF_HEAD "tensor cw 4x6 ready=0\nop resample c.im2col n=12 window=3x2x2 kernel=2x2\nop gemm c m=1 k=12 n=4 g=2 weight=cw\n",
         ":7: gemm c g=2: its im2col c.im2col has c=3 channels, which g groups do not split evenly"},
        {MF_HEAD "tensor cw 3x1 ready=0\nop resample cols n=12 window=3x2x2 kernel=1x1\nop gemm c m=4 k=3 n=3 g=3 weight=cw\n",
         ":7: gemm c g=3 reads the im2col cols: a grouped convolution's im2col is named after its gemm"},
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
    float *x, *r, *y;     /* device memory: the input, dloss/dlogits, the logits */
    float rh[24], yh[24]; /* r and y in host memory */
    dev_bufs d;
    int samples, hooks[8], nhooks;
} graph_case;

/* sum(logits * r), in double (p: the parameters in device memory) */
static double graph_loss(graph_case *g, const float *p)
{
    EXPECT(graph_forward(g->be, g->st, &g->mf, &g->l, p, &g->a, g->samples, g->x, g->y) == DPS_OK);
    dev_get(&g->d, g->yh, g->y, sizeof g->yh);
    double loss = 0;
    for (int i = 0; i < g->samples * 12; i++) loss += (double)g->yh[i] * g->rh[i];
    return loss;
}

/* g's input (xn floats), r and y in device memory, from seed's values; p
 * (host) copied there too: the device copy returned. */
static float *graph_case_operands(graph_case *g, int xn, uint64_t seed, const float *p)
{
    float x[64];
    g->d = dev_bufs_on(g->be, g->st, 0);
    for (int i = 0; i < xn; i++) x[i] = dps_uniform(seed, 1, (uint64_t)i);
    for (int i = 0; i < 24; i++) g->rh[i] = dps_uniform(seed, 2, (uint64_t)i);
    g->x = dev_put(&g->d, x, (size_t)xn * sizeof *x);
    g->r = dev_put(&g->d, g->rh, sizeof g->rh);
    g->y = dev_zeros(&g->d, sizeof g->yh);
    return dev_put(&g->d, p, g->l.total * sizeof *p);
}

/* Central differences of the loss against grads (device memory), p_ the
 * device copy of host p: the worst relative error. */
static double graph_worst_error(graph_case *g, float *p, float *p_, const float *grads_)
{
    size_t n = g->l.total;
    const float *grads = dev_read(&g->d, grads_, n * sizeof *grads);
    double worst = 0, h = 1e-2;
    for (size_t i = 0; i < n; i++) {
        float keep = p[i];
        p[i] = keep + (float)h;
        dev_set(&g->d, p_ + i, &p[i], sizeof *p);
        double up = graph_loss(g, p_);
        p[i] = keep - (float)h;
        dev_set(&g->d, p_ + i, &p[i], sizeof *p);
        double down = graph_loss(g, p_);
        p[i] = keep;
        dev_set(&g->d, p_ + i, &p[i], sizeof *p);
        double num = (up - down) / (2 * h), err = fabs(num - grads[i]) / (1.0 + fabs(num));
        if (err > worst) worst = err;
    }
    return worst;
}

static dps_status graph_hook(void *ctx, int t)
{
    graph_case *g = ctx;
    if (g->nhooks < 8) g->hooks[g->nhooks] = t;
    g->nhooks++;
    return DPS_OK;
}

/* graph_acts_alloc takes graph_acts_bytes exactly (its convolutions direct
 * where be has conv ops), in fp32 and bf16, and no buffer of it is a
 * workspace. */
static void check_acts_bytes(backend *be, const model_file *mf, int samples)
{
    static const dps_precision precs[] = {PREC_FP32, PREC_BF16};
    for (size_t k = 0; k < 2; k++) {
        graph_acts a;
        EXPECT(graph_acts_alloc(be, 0, mf, samples, precs[k], &a) == DPS_OK);
        EXPECT(be->mem[0].in_use ==
               graph_acts_bytes(mf, (uint64_t)samples, precs[k], graph_direct_convs(be)));
        for (int c = 0; c < be->mem[0].ncat; c++)
            if (be->mem[0].cat[c].in_use) EXPECT(!strstr(be->mem[0].cat[c].what, "workspace"));
        graph_acts_free(be, &a);
    }
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
    check_acts_bytes(g.be, &g.mf, g.samples);
    EXPECT(graph_acts_alloc(g.be, 0, &g.mf, g.samples, PREC_FP32, &g.a) == DPS_OK);
    float *p = malloc(g.l.total * sizeof *p);
    graph_init_params(&g.mf, &g.l, 7, p);
    for (size_t i = 0; i < g.l.total; i++) p[i] *= 3.0f; /* visible GELU curvature */
    float *p_ = graph_case_operands(&g, 48, 8, p);
    float *grads_ = dev_zeros(&g.d, g.l.total * sizeof *grads_);
    graph_loss(&g, p_);
    EXPECT(graph_backward(g.be, g.st, &g.mf, &g.l, p_, &g.a, g.samples, g.x, g.r, grads_, graph_hook,
                          &g) == DPS_OK);
    EXPECT(g.nhooks == g.mf.ntensors);
    for (int i = 0; i < g.mf.ntensors && i < g.nhooks && i < 8; i++)
        EXPECT(g.mf.tensors[g.hooks[i]].ready == i);
    double worst = graph_worst_error(&g, p, p_, grads_);
    EXPECT(worst < 1e-2);
    if (worst >= 1e-2) fprintf(stderr, "%s: graph gradients: worst relative error %g\n", name, worst);
    dev_bufs_free(&g.d);
    graph_acts_free(g.be, &g.a);
    EXPECT(g.be->mem[0].in_use == 0);
    graph_layout_free(&g.l);
    model_file_free(&g.mf);
    expect_stream_free(g.be, g.st);
    be_close(g.be);
    free(p);
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
    dev_bufs d = dev_bufs_on(be, st, 0);
    float *p_ = dev_put(&d, p, n.params * sizeof *p), *g_ = dev_zeros(&d, n.params * sizeof *g);
    float *x6_ = dev_put(&d, x6, sizeof x6), *dl_ = dev_put(&d, dl, sizeof dl);
    float *logits_ = dev_zeros(&d, sizeof logits);
    EXPECT(net_acts_alloc(be, 0, &n, 2, PREC_FP32, TF32_DEFAULT, &a) == DPS_OK);
    EXPECT(net_forward(be, st, &n, p_, &a, 2, x6_, logits_) == DPS_OK);
    EXPECT(net_backward(be, st, &n, p_, &a, 2, x6_, dl_, g_, log_ready, &r) == DPS_OK);
    dev_get(&d, logits, logits_, sizeof logits);
    /* ready 0..2: ln.bias, fc2, ln.weight; the norm's backward readies 0, then 2 */
    int ln_weight = 3, fc2 = 5;
    EXPECT(n.ready[1] == fc2 && n.ready[2] == ln_weight && r.n == 5);
    EXPECT(r.lo[0] == n.layout.offset[fc2] && r.lo[1] == n.layout.offset[ln_weight]);
    for (int i = 1; i < r.n && i < 8; i++) EXPECT(r.lo[i] < r.lo[i - 1]);
    EXPECT(r.n == 5 && r.lo[4] == 0);
    dev_bufs_free(&d);
    net_acts_free(be, &n, &a);
    EXPECT(be->mem[0].in_use == 0);
    /* under autocast: logits within bf16's roundings of fp32's, the same ready order */
    float logits16[24];
    r.n = 0;
    EXPECT(net_acts_alloc(be, 0, &n, 2, PREC_BF16, TF32_DEFAULT, &a) == DPS_OK);
    p_ = dev_put(&d, p, n.params * sizeof *p);
    g_ = dev_zeros(&d, n.params * sizeof *g);
    x6_ = dev_put(&d, x6, sizeof x6);
    dl_ = dev_put(&d, dl, sizeof dl);
    logits_ = dev_zeros(&d, sizeof logits16);
    EXPECT(net_forward(be, st, &n, p_, &a, 2, x6_, logits_) == DPS_OK);
    EXPECT(net_backward(be, st, &n, p_, &a, 2, x6_, dl_, g_, log_ready, &r) == DPS_OK);
    dev_get(&d, logits16, logits_, sizeof logits16);
    dev_bufs_free(&d);
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

/* The reference convolution's operands (on device 0, as the tests' are)
 * in host memory: n floats of dev copied to a new host array (NULL when dev
 * is NULL, or zeroed when copy is 0), and back. */
static float *ref_fetch(backend *be, be_stream *st, const void *dev, size_t n, int copy)
{
    float *h = dev ? calloc(n ? n : 1, sizeof *h) : NULL;
    if (h && copy && be->ops->copy(be, st, h, DPS_HOST, dev, 0, n * sizeof *h) != DPS_OK) {
        free(h);
        return NULL;
    }
    return h;
}

static dps_status ref_store(backend *be, be_stream *st, void *dev, float *h, size_t n)
{
    dps_status rc = dev && h ? be->ops->copy(be, st, dev, 0, h, DPS_HOST, n * sizeof *h) : DPS_OK;
    if (rc == DPS_OK && dev) rc = be->ops->stream_sync(be, st);
    free(h);
    return rc;
}

/* A convolution run directly (model/graph_conv.c) on the host backend with
 * a reference convolution in its ops table: NHWC input, KRSC filter,
 * groups, fp32, each output pixel's sum over its window in (r, s, c) order;
 * its operands copied to host memory and the result back, as a program
 * reads a GPU's memory. */
static dps_status ref_conv_fwd(backend *be, be_stream *st, const be_conv *cv, const void *xv,
                               const void *wv, const void *bv, void *yv)
{
    int oh = be_conv_out_h(cv), ow = be_conv_out_w(cv), cg = cv->c / cv->groups;
    int kg = cv->k / cv->groups;
    if (cv->t != BE_F32) return dps_fail(DPS_ERR_RUNTIME, "reference convolution: fp32 only");
    DPS_TRY(be->ops->stream_sync(be, st));
    size_t nx = (size_t)cv->n * cv->h * cv->w * cv->c, nw = (size_t)cv->k * cv->r * cv->s * cg;
    size_t ny = (size_t)cv->n * oh * ow * cv->k;
    float *x = ref_fetch(be, st, xv, nx, 1), *w = ref_fetch(be, st, wv, nw, 1);
    float *b = ref_fetch(be, st, bv, (size_t)cv->k, 1), *y = ref_fetch(be, st, yv, ny, 0);
    if (!x || !w || !y || (bv && !b)) {
        free(x); free(w); free(b); free(y);
        return dps_fail(DPS_ERR_RUNTIME, "reference convolution: its operands not read");
    }
    for (int n = 0; n < cv->n; n++)
        for (int p = 0; p < oh * ow; p++)
            for (int k = 0; k < cv->k; k++) {
                float sum = b ? b[k] : 0.0f;
                for (int r = 0; r < cv->r; r++)
                    for (int s = 0; s < cv->s; s++) {
                        int ih = p / ow * cv->str_h - cv->pad_h + r * cv->dil_h;
                        int iw = p % ow * cv->str_w - cv->pad_w + s * cv->dil_w;
                        if (ih < 0 || ih >= cv->h || iw < 0 || iw >= cv->w) continue;
                        for (int c = 0; c < cg; c++)
                            sum += x[((size_t)(n * cv->h + ih) * cv->w + iw) * cv->c + k / kg * cg + c] *
                                   w[((size_t)(k * cv->r + r) * cv->s + s) * cg + c];
                    }
                y[((size_t)n * oh * ow + p) * cv->k + k] = sum;
            }
    free(x); free(w); free(b);
    return ref_store(be, st, yv, y, ny);
}

/* Its backward: dx (overwritten) or dw (added to when accumulate), each
 * product of the forward's sum sent back where it came from. */
static dps_status ref_conv_bwd(backend *be, be_stream *st, const be_conv *cv, const float *xv,
                               const float *wv, const float *dyv, float *dxv, float *dwv,
                               int accumulate)
{
    int oh = be_conv_out_h(cv), ow = be_conv_out_w(cv), cg = cv->c / cv->groups;
    int kg = cv->k / cv->groups;
    if (cv->t != BE_F32) return dps_fail(DPS_ERR_RUNTIME, "reference convolution: fp32 only");
    DPS_TRY(be->ops->stream_sync(be, st));
    size_t nx = (size_t)cv->n * cv->h * cv->w * cv->c, nw = (size_t)cv->k * cv->r * cv->s * cg;
    float *x = ref_fetch(be, st, xv, nx, 1), *w = ref_fetch(be, st, wv, nw, 1);
    float *dy = ref_fetch(be, st, dyv, (size_t)cv->n * oh * ow * cv->k, 1);
    float *dx = ref_fetch(be, st, dxv, nx, 0), *dw = ref_fetch(be, st, dwv, nw, accumulate);
    if (!dy || (xv && !x) || (wv && !w) || (dxv && !dx) || (dwv && !dw)) {
        free(x); free(w); free(dy); free(dx); free(dw);
        return dps_fail(DPS_ERR_RUNTIME, "reference convolution: its operands not read");
    }
    for (int n = 0; n < cv->n; n++)
        for (int p = 0; p < oh * ow; p++)
            for (int k = 0; k < cv->k; k++) {
                float g = dy[((size_t)n * oh * ow + p) * cv->k + k];
                for (int r = 0; r < cv->r; r++)
                    for (int s = 0; s < cv->s; s++) {
                        int ih = p / ow * cv->str_h - cv->pad_h + r * cv->dil_h;
                        int iw = p % ow * cv->str_w - cv->pad_w + s * cv->dil_w;
                        if (ih < 0 || ih >= cv->h || iw < 0 || iw >= cv->w) continue;
                        for (int c = 0; c < cg; c++) {
                            size_t xi = ((size_t)(n * cv->h + ih) * cv->w + iw) * cv->c + k / kg * cg + c;
                            size_t wi = ((size_t)(k * cv->r + r) * cv->s + s) * cg + c;
                            if (dx) dx[xi] += g * w[wi];
                            if (dw) dw[wi] += g * x[xi];
                        }
                    }
            }
    free(x); free(w); free(dy);
    dps_status rc = ref_store(be, st, dxv, dx, nx);
    dps_status rw = ref_store(be, st, dwv, dw, nw);
    return rc != DPS_OK ? rc : rw;
}

static dps_status ref_conv_bwd_data(backend *be, be_stream *st, const be_conv *cv, const void *dy,
                                    const void *w, void *dx)
{
    return ref_conv_bwd(be, st, cv, NULL, w, dy, dx, NULL, 0);
}

static dps_status ref_conv_bwd_filter(backend *be, be_stream *st, const be_conv *cv, const void *x,
                                      const void *dy, int accumulate, void *dw)
{
    return ref_conv_bwd(be, st, cv, x, NULL, dy, NULL, dw, accumulate);
}

/* A per-pixel Linear, then a 3x3 convolution (padding 1) of its 4x4 pixels
 * of 2 channels into 4, as scripts/model_export.py lowers one (g: groups),
 * then GELU and a classifier over 4 rows of 12. */
#define CONV_FILE(g, wk) \
    "dpscale-model 1\nname conv\ninput 32\nclasses 3\n" \
    "tensor fc0.weight 2x2 ready=3\ntensor c1.weight 4x" wk " ready=2\ntensor c1.bias 4 ready=1\n" \
    "tensor fc.weight 3x16 ready=0\n" \
    "op gemm fc0 m=16 k=2 n=2 weight=fc0.weight\nop resample c1.im2col n=288\n" \
    "op gemm c1 m=16 k=18 n=4 g=" g " weight=c1.weight bias=c1.bias\nop act a fn=gelu\n" \
    "op gemm fc m=4 k=16 n=3 weight=fc.weight\n"
/* The same convolution into 2 channels with the Linear's output added
 * after the GELU (a residual): the add begins the gradient of the
 * convolution's input, which the convolution's backward then adds. */
#define RESIDUAL_CONV_FILE \
    "dpscale-model 1\nname conv\ninput 32\nclasses 3\n" \
    "tensor fc0.weight 2x2 ready=3\ntensor c1.weight 2x18 ready=2\ntensor c1.bias 2 ready=1\n" \
    "tensor fc.weight 3x8 ready=0\n" \
    "op gemm fc0 m=16 k=2 n=2 weight=fc0.weight\nop resample c1.im2col n=288\n" \
    "op gemm c1 m=16 k=18 n=2 weight=c1.weight bias=c1.bias\nop act a fn=gelu\n" \
    "op add r from=fc0\nop gemm fc m=4 k=8 n=3 weight=fc.weight\n"

/* The loss and parameters' gradients through the direct convolution
 * against central differences; the host's plan and memory for the file
 * with its window the same as without (its GEMM lowering kept), the direct
 * plan without any im2col-sized buffer and its memory graph_acts_bytes's;
 * its input's gradient written in place, or into the contributions buffer
 * where a later op (residual) begins it. */
static void check_conv_direct(const char *text, int groups, int residual)
{
    graph_case g = {.samples = 2};
    be_options o = {.kind = BE_HOST, .host_devices = 1, .quiet = 1};
    const char *path = write_tmp("conv.model", text, strlen(text));
    EXPECT(model_file_read(path, &g.mf) == DPS_OK && be_open(&o, &g.be) == DPS_OK);
    unlink(path);
    if (!g.be || !g.mf.nops) return;
    uint64_t host_bytes = graph_acts_bytes(&g.mf, 2, PREC_FP32, 0);
    EXPECT(!graph_conv_direct(&g.mf, 2)); /* no window yet */
    g.mf.ops[1].win = (mf_window){.c = 2, .h = 4, .w = 4, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                                  .ph = 1, .pw = 1, .dh = 1, .dw = 1};
    EXPECT(graph_conv_direct(&g.mf, 2) && !graph_conv_direct(&g.mf, 4));
    EXPECT(graph_acts_bytes(&g.mf, 2, PREC_FP32, 0) == host_bytes);
    EXPECT(graph_acts_bytes(&g.mf, 2, PREC_FP32, 1) < host_bytes);
    EXPECT(graph_acts_bytes(&g.mf, 2, PREC_BF16, 1) < graph_acts_bytes(&g.mf, 2, PREC_BF16, 0));
    g.st = expect_stream(g.be);
    EXPECT(graph_layout_make(&g.mf, &g.l) == DPS_OK);
    /* the host backend has no conv ops: its plan is the GEMM lowering's */
    EXPECT(g.be->ops->conv_fwd == NULL);
    EXPECT(graph_acts_alloc(g.be, 0, &g.mf, 2, PREC_FP32, &g.a) == DPS_OK);
    EXPECT(g.a.plan.recompute[2] && !g.a.plan.direct[2] && !g.a.plan.skip[1]);
    EXPECT(g.be->mem[0].in_use == host_bytes && g.a.plan.out_elems >= 288);
    graph_acts_free(g.be, &g.a);
    be_ops with_conv = *g.be->ops;
    const be_ops *host_ops = g.be->ops;
    with_conv.conv_fwd = ref_conv_fwd;
    with_conv.conv_bwd_data = ref_conv_bwd_data;
    with_conv.conv_bwd_filter = ref_conv_bwd_filter;
    g.be->ops = &with_conv;
    EXPECT(graph_acts_alloc(g.be, 0, &g.mf, 2, PREC_FP32, &g.a) == DPS_OK);
    EXPECT(g.a.plan.direct[2] && g.a.plan.skip[1] && !g.a.plan.recompute[2]);
    EXPECT(g.a.plan.out_elems < 288 && g.a.plan.grad_elems < 288);
    EXPECT(g.be->mem[0].in_use < host_bytes);
    EXPECT(g.be->mem[0].in_use == graph_acts_bytes(&g.mf, 2, PREC_FP32, 1));
    EXPECT(graph_din_in_place(&g.mf, &g.a.plan, NULL, 2) == !residual);
    EXPECT(residual ? g.a.contrib.bytes == 2 * 32 * sizeof(float) : g.a.contrib.ptr == NULL);
    for (int b = 0; b < g.a.plan.begins_at[g.mf.nops]; b++) EXPECT(g.a.plan.begins[b] != 1);
    float *p = malloc(g.l.total * sizeof *p);
    graph_init_params(&g.mf, &g.l, 11, p);
    for (size_t i = 0; i < g.l.total; i++) p[i] *= 3.0f;
    float *p_ = graph_case_operands(&g, 64, 12, p);
    float *grads_ = dev_zeros(&g.d, g.l.total * sizeof *grads_);
    graph_loss(&g, p_);
    EXPECT(graph_backward(g.be, g.st, &g.mf, &g.l, p_, &g.a, g.samples, g.x, g.r, grads_, graph_hook,
                          &g) == DPS_OK);
    EXPECT(g.nhooks == g.mf.ntensors);
    double worst = graph_worst_error(&g, p, p_, grads_);
    dev_bufs_free(&g.d);
    EXPECT(worst < 1e-2);
    if (worst >= 1e-2)
        fprintf(stderr, "conv (%d groups%s): worst relative error %g\n", groups,
                residual ? ", residual" : "", worst);
    graph_acts_free(g.be, &g.a);
    EXPECT(g.be->mem[0].in_use == 0);
    check_acts_bytes(g.be, &g.mf, 2); /* direct: fp32 and bf16 */
    g.be->ops = host_ops;
    graph_layout_free(&g.l);
    model_file_free(&g.mf);
    expect_stream_free(g.be, g.st);
    be_close(g.be);
    free(p);
}

static void test_conv_direct(void)
{
    check_conv_direct(CONV_FILE("1", "18"), 1, 0);
    check_conv_direct(CONV_FILE("2", "9"), 2, 0);
    check_conv_direct(RESIDUAL_CONV_FILE, 1, 1);
}

EXPECT_GROUPS(GROUP(presets), GROUP(batches), GROUP(gradients), GROUP(model_bf16), GROUP(buckets),
              GROUP(model_file), GROUP(graph_gradients), GROUP(net), GROUP(conv_direct));
