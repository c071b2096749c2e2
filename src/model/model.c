/* The token MLP (see model.h): presets, layout, initialisation, synthetic
 * data, and forward/backward as a sequence of backend calls, in fp32 or as
 * under autocast (bf16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "elementwise.h"
#include "model/model.h"

/* The real models as model files (bench/models/, docs/model-file.md), and
 * MLPs whose parameter count and FLOPs per sample match a named model
 * (docs/method.md, "The model and its presets"): small ones for speed, and
 * the real models' stand-ins, which also run under autocast (bf16). */
const model_preset model_presets[] = {
    {"tiny",           {2, 64, 4, 16},           8, "unit tests", NULL},
    {"small",          {4, 256, 16, 128},        16, "host-backend smoke runs", NULL},
    {"medium",         {8, 1024, 64, 1000},      8, "a compute-bound host-backend run", NULL},
    {"resnet50",       {0, 0, 0, 0},             32, "torchvision's ResNet-50", "resnet50.model"},
    {"gpt2",           {0, 0, 0, 0},             8, "GPT-2 small, 1024 tokens", "gpt2.model"},
    {"bert-large",     {0, 0, 0, 0},             8, "BERT-large, 512 tokens", "bert-large.model"},
    {"resnet50-mlp",   {7, 1840, 160, 1000},     32, "ResNet-50 (25.6 M params, 8.2 GFLOP/sample)", NULL},
    {"gpt2-mlp",       {20, 1536, 1024, 50257},  8, "GPT-2 small (124 M params, 1024 tokens)", NULL},
    {"bert-large-mlp", {13, 4096, 512, 28672},   8, "BERT-large (335 M params, 512 tokens)", NULL},
};
const int model_npresets = (int)(sizeof model_presets / sizeof model_presets[0]);

const model_preset *model_find_preset(const char *name)
{
    for (int i = 0; i < model_npresets; i++)
        if (strcmp(model_presets[i].name, name) == 0) return &model_presets[i];
    return NULL;
}

const char *model_preset_path(const model_preset *p, char *buf, size_t len)
{
    const char *dir = getenv("DPSCALE_MODELS");
    int n = snprintf(buf, len, "%s/%s", dir && *dir ? dir : DPS_MODELS_DIR, p->file ? p->file : "");
    if (n < 0 || (size_t)n >= len) buf[0] = '\0';
    return buf;
}

size_t model_param_count(model_shape s)
{
    size_t d = (size_t)s.width;
    return (size_t)s.layers * (d * d + d) + d * (size_t)s.classes + (size_t)s.classes;
}

size_t model_matmul_params(model_shape s)
{
    size_t d = (size_t)s.width;
    return (size_t)s.layers * d * d + d * (size_t)s.classes;
}

double model_fwd_flops_per_sample(model_shape s)
{
    return 2.0 * (double)s.tokens * (double)model_matmul_params(s);
}

size_t model_weight_offset(model_shape s, int l)
{
    size_t d = (size_t)s.width;
    return (size_t)l * (d * d + d);
}

size_t model_bias_offset(model_shape s, int l)
{
    size_t d = (size_t)s.width;
    size_t out = l < s.layers ? d : (size_t)s.classes;
    return model_weight_offset(s, l) + d * out;
}

/* Stream ids of the generator, so weights, inputs and labels never share numbers. */
enum { RNG_PARAMS = 1, RNG_INPUT = 2 };

void model_init_params(model_shape s, uint64_t seed, float *params)
{
    size_t n = model_param_count(s);
    float bound = 1.0f / sqrtf((float)s.width); /* fan_in is width for every layer */
    for (size_t i = 0; i < n; i++) params[i] = bound * dps_uniform(seed, RNG_PARAMS, i);
}

void model_make_batch(model_shape s, uint64_t seed, int step, int64_t row0, int rows,
                      float *x, int32_t *labels)
{
    int d = s.width, k = s.width < s.classes ? s.width : s.classes;
    uint64_t stream = RNG_INPUT + ((uint64_t)step << 8);
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * d;
        uint64_t base = (uint64_t)(row0 + r) * (uint64_t)d;
        int best = 0;
        for (int j = 0; j < d; j++) {
            xr[j] = dps_uniform(seed, stream, base + (uint64_t)j);
            if (j < k && xr[j] > xr[best]) best = j;
        }
        labels[r] = best;
    }
}

size_t model_half_grad_elems(model_shape s)
{
    size_t d = (size_t)s.width, c = (size_t)s.classes, out = d > c ? d : c;
    return d * out + out; /* the largest layer's weight, then its bias */
}

/* The autocast buffers: activations and their gradients in the half type,
 * the cast parameters and input, the half logits, a layer's parameter
 * gradients in the half type. */
static dps_status acts_alloc_bf16(backend *be, int dev, model_shape s, int max_rows, model_acts *a)
{
    size_t layer = (size_t)max_rows * (size_t)s.width * 2;
    dps_status rc = be_buf_alloc(be, dev, layer * (size_t)s.layers, "autocast pre-activations", &a->pre);
    if (!rc) rc = be_buf_alloc(be, dev, layer * (size_t)s.layers, "autocast activations", &a->post);
    if (!rc) rc = be_buf_alloc(be, dev, layer, "autocast activation gradients", &a->dh[0]);
    if (!rc) rc = be_buf_alloc(be, dev, layer, "autocast activation gradients", &a->dh[1]);
    if (!rc) rc = be_buf_alloc(be, dev, model_param_count(s) * 2, "autocast parameters", &a->params16);
    if (!rc) rc = be_buf_alloc(be, dev, layer, "autocast inputs", &a->x16);
    if (!rc) rc = be_buf_alloc(be, dev, (size_t)max_rows * (size_t)s.classes * 2,
                               "autocast logits, then their gradient", &a->dlogits16);
    if (!rc) rc = be_buf_alloc(be, dev, model_half_grad_elems(s) * 2,
                               "autocast parameter gradients", &a->dparam16);
    a->logits16_at = a->dlogits16.ptr;
    return rc;
}

void model_acts_logits16_in(backend *be, model_acts *a, void *rows)
{
    be_buf_free(be, &a->dlogits16);
    a->logits16_at = rows;
}

dps_status model_acts_alloc(backend *be, int dev, model_shape s, int max_rows, dps_precision prec,
                            model_acts *a)
{
    memset(a, 0, sizeof *a);
    a->max_rows = max_rows;
    a->half = prec == PREC_BF16 ? BE_BF16 : prec == PREC_FP16 ? BE_F16 : BE_F32;
    size_t layer = (size_t)max_rows * (size_t)s.width * sizeof(float);
    dps_status rc;
    if (a->half != BE_F32) {
        rc = acts_alloc_bf16(be, dev, s, max_rows, a);
    } else {
        rc = be_buf_alloc(be, dev, layer * (size_t)s.layers, "pre-activations", &a->pre);
        if (!rc) rc = be_buf_alloc(be, dev, layer * (size_t)s.layers, "activations", &a->post);
        if (!rc) rc = be_buf_alloc(be, dev, layer, "activation gradients", &a->dh[0]);
        if (!rc) rc = be_buf_alloc(be, dev, layer, "activation gradients", &a->dh[1]);
    }
    if (rc) model_acts_free(be, a);
    return rc;
}

void model_acts_free(backend *be, model_acts *a)
{
    dps_buf *all[] = {&a->pre, &a->post, &a->dh[0], &a->dh[1], &a->params16, &a->x16,
                      &a->dlogits16, &a->dparam16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be_buf_free(be, all[i]);
}

static float *layer_ptr(const dps_buf *b, model_shape s, int rows_cap, int l)
{
    return (float *)b->ptr + (size_t)l * (size_t)rows_cap * (size_t)s.width;
}

static uint16_t *layer_ptr16(const dps_buf *b, model_shape s, int rows_cap, int l)
{
    return (uint16_t *)b->ptr + (size_t)l * (size_t)rows_cap * (size_t)s.width;
}

/* The trace's begin of one product of a Linear of rows x in -> out
 * (forward's; backward's weight gradient, or its input's), elements of its
 * type's bytes: each operand read and the result written once. */
static dps_status trace_linear(const model_acts *a, op_dir dir, int rows, int in, int out)
{
    double esz = a->half == BE_F32 ? 4.0 : 2.0, mm = 2.0 * rows * (double)in * out;
    double bytes = esz * ((double)rows * (in + out) + (double)in * out + out);
    return op_trace_begin(a->trace, "linear", dir, mm, bytes);
}

/* GELU over n elements: its input read and output written (backward: two read). */
static dps_status trace_gelu(const model_acts *a, op_dir dir, int64_t n)
{
    double esz = a->half == BE_F32 ? 4.0 : 2.0;
    return op_trace_begin(a->trace, "gelu", dir, 0.0, esz * (double)n * (dir == OP_FORWARD ? 2 : 3));
}

/* A cast of n elements between fp32 and the half type. */
static dps_status trace_cast(const model_acts *a, op_dir dir, int64_t n)
{
    return op_trace_begin(a->trace, "cast", dir, 0.0, 6.0 * (double)n);
}

/* Forward as under autocast: Linear's inputs (parameters, x) cast to bf16
 * once; each Linear is addmm, its bf16 output rounded once from its fp32
 * product plus bias (gemm_bias: cuBLASLt's bias epilogue on a GPU), then
 * GELU of that rounded output on bf16; the logits are the classifier's
 * bf16 output, handed on as fp32 (logits.float()) unless the caller takes
 * them in bf16 (logits16_out). */
static dps_status forward_bf16(backend *be, be_stream *st, model_shape s, const float *params,
                               model_acts *a, int rows, const float *x, float *logits)
{
    const be_ops *o = be->ops;
    int d = s.width, c = s.classes;
    be_dtype H = a->half;
    const uint16_t *p16 = a->params16.ptr;
    DPS_TRY(trace_cast(a, OP_FORWARD, (int64_t)model_param_count(s) + (int64_t)rows * d));
    DPS_TRY(o->cast(be, st, (int64_t)model_param_count(s), params, BE_F32, a->params16.ptr, H));
    DPS_TRY(o->cast(be, st, (int64_t)rows * d, x, BE_F32, a->x16.ptr, H));
    DPS_TRY(op_trace_end(a->trace));
    const uint16_t *h = a->x16.ptr;
    for (int l = 0; l < s.layers; l++) {
        uint16_t *pre = layer_ptr16(&a->pre, s, a->max_rows, l);
        uint16_t *post = layer_ptr16(&a->post, s, a->max_rows, l);
        DPS_TRY(trace_linear(a, OP_FORWARD, rows, d, d));
        DPS_TRY(o->gemm_bias(be, st, 0, 0, rows, d, d, h, H, d, p16 + model_weight_offset(s, l), H,
                             d, p16 + model_bias_offset(s, l), pre, H, d));
        DPS_TRY(op_trace_end(a->trace));
        DPS_TRY(trace_gelu(a, OP_FORWARD, (int64_t)rows * d));
        DPS_TRY(o->act_half(be, st, DPS_ACT_GELU, H, (int64_t)rows * d, pre, post));
        DPS_TRY(op_trace_end(a->trace));
        h = post;
    }
    DPS_TRY(trace_linear(a, OP_FORWARD, rows, d, c));
    DPS_TRY(o->gemm_bias(be, st, 0, 0, rows, c, d, h, H, d, p16 + model_weight_offset(s, s.layers),
                         H, c, p16 + model_bias_offset(s, s.layers), a->logits16_at, H, c));
    DPS_TRY(op_trace_end(a->trace));
    if (a->logits16_out) return DPS_OK;
    DPS_TRY(trace_cast(a, OP_FORWARD, (int64_t)rows * c));
    DPS_TRY(o->cast(be, st, (int64_t)rows * c, a->logits16_at, H, logits, BE_F32));
    return op_trace_end(a->trace);
}

/* Layer l's unit entered through the sharded strategy's window, if any. */
static dps_status enter(const model_acts *a, int l, int backward, const float **params,
                        float **grads)
{
    if (!a->window) return DPS_OK;
    return a->window->enter(a->window->ctx, l, backward, params, grads);
}

dps_status model_forward(backend *be, be_stream *st, model_shape s, const float *params,
                         model_acts *a, int rows, const float *x, float *logits)
{
    if (a->half != BE_F32) return forward_bf16(be, st, s, params, a, rows, x, logits);
    const be_ops *o = be->ops;
    int d = s.width;
    const float *h = x;
    for (int l = 0; l < s.layers; l++) {
        float *pre = layer_ptr(&a->pre, s, a->max_rows, l);
        float *post = layer_ptr(&a->post, s, a->max_rows, l);
        DPS_TRY(enter(a, l, 0, &params, NULL));
        const float *w = params + model_weight_offset(s, l), *b = params + model_bias_offset(s, l);
        DPS_TRY(trace_linear(a, OP_FORWARD, rows, d, d));
        DPS_TRY(o->gemm_bias(be, st, 0, 0, rows, d, d, h, BE_F32, d, w, BE_F32, d, b, pre, BE_F32, d));
        DPS_TRY(op_trace_end(a->trace));
        DPS_TRY(trace_gelu(a, OP_FORWARD, (int64_t)rows * d));
        DPS_TRY(o->act(be, st, DPS_ACT_GELU, (int64_t)rows * d, pre, post));
        DPS_TRY(op_trace_end(a->trace));
        h = post;
    }
    DPS_TRY(enter(a, s.layers, 0, &params, NULL));
    DPS_TRY(trace_linear(a, OP_FORWARD, rows, d, s.classes));
    DPS_TRY(o->gemm_bias(be, st, 0, 0, rows, s.classes, d, h, BE_F32, d,
                         params + model_weight_offset(s, s.layers), BE_F32, s.classes,
                         params + model_bias_offset(s, s.layers), logits, BE_F32, s.classes));
    return op_trace_end(a->trace);
}

/* A Linear's parameter gradients under autocast, from its half input h
 * (rows x in) and output gradient dy (rows x out): the weight's GEMM and
 * the bias's column sums accumulate in fp32 (db holds the sums already
 * when summed), are rounded once to the half type (the gradient of the
 * cast half parameter) and widened into dw and db (its cast's backward,
 * into the fp32 parameter's gradient). */
static dps_status param_grads_half(backend *be, be_stream *st, model_acts *a, int rows, int in,
                                   int out, const uint16_t *h, const uint16_t *dy, float *dw,
                                   float *db, int summed)
{
    const be_ops *o = be->ops;
    uint16_t *w16 = a->dparam16.ptr, *b16 = w16 + (size_t)in * (size_t)out;
    int64_t nw = (int64_t)in * out;
    DPS_TRY(o->gemm_ex(be, st, 1, 0, in, out, rows, 1.0f, h, a->half, in, dy, a->half, out, 0.0f,
                       w16, a->half, out));
    DPS_TRY(o->cast(be, st, nw, w16, a->half, dw, BE_F32));
    if (!summed) DPS_TRY(o->col_sum_half(be, st, a->half, rows, out, dy, db));
    DPS_TRY(o->cast(be, st, out, db, BE_F32, b16, a->half));
    return o->cast(be, st, out, b16, a->half, db, BE_F32);
}

/* Hidden layer l's gradients under autocast: dh (bf16) becomes d pre in
 * place, its column sums (the bias's fp32 gradient) taken in the same
 * pass, then the weight's gradient. */
static dps_status layer_grads_bf16(backend *be, be_stream *st, model_shape s, model_acts *a,
                                   int rows, int l, uint16_t *dh, float *grads)
{
    const be_ops *o = be->ops;
    int d = s.width;
    const uint16_t *h_in = l ? layer_ptr16(&a->post, s, a->max_rows, l - 1) : a->x16.ptr;
    float *db = grads + model_bias_offset(s, l);
    DPS_TRY(trace_gelu(a, OP_BACKWARD, (int64_t)rows * d));
    DPS_TRY(o->gelu_bwd_col_sum_half(be, st, a->half, rows, d, dh,
                                     layer_ptr16(&a->pre, s, a->max_rows, l), dh, db));
    DPS_TRY(op_trace_end(a->trace));
    DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, d));
    DPS_TRY(param_grads_half(be, st, a, rows, d, d, h_in, dh, grads + model_weight_offset(s, l), db, 1));
    return op_trace_end(a->trace);
}

/* Backward as under autocast, from forward_bf16's casts: dlogits cast to
 * bf16 once (the backward of logits.float()), activation gradients in
 * bf16, the parameters' gradients in fp32. */
static dps_status backward_bf16(backend *be, be_stream *st, model_shape s, model_acts *a, int rows,
                                const float *dlogits, float *grads, model_grad_hook hook, void *hook_ctx)
{
    const be_ops *o = be->ops;
    int d = s.width, c = s.classes, L = s.layers;
    const uint16_t *p16 = a->params16.ptr, *dl16 = a->logits16_at;
    const uint16_t *h_last = L ? layer_ptr16(&a->post, s, a->max_rows, L - 1) : a->x16.ptr;
    uint16_t *dh = a->dh[0].ptr, *dh_next = a->dh[1].ptr;
    if (dlogits) {
        DPS_TRY(trace_cast(a, OP_BACKWARD, (int64_t)rows * c));
        DPS_TRY(o->cast(be, st, (int64_t)rows * c, dlogits, BE_F32, a->logits16_at, a->half));
        DPS_TRY(op_trace_end(a->trace));
    }
    DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, c));
    DPS_TRY(param_grads_half(be, st, a, rows, d, c, h_last, dl16, grads + model_weight_offset(s, L),
                             grads + model_bias_offset(s, L), 0));
    DPS_TRY(op_trace_end(a->trace));
    if (hook) DPS_TRY(hook(hook_ctx, L));
    if (L == 0) return DPS_OK;
    DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, c));
    DPS_TRY(o->gemm_ex(be, st, 0, 1, rows, d, c, 1.0f, dl16, a->half, c, p16 + model_weight_offset(s, L),
                       a->half, c, 0.0f, dh, a->half, d));
    DPS_TRY(op_trace_end(a->trace));
    for (int l = L - 1; l >= 0; l--) {
        DPS_TRY(layer_grads_bf16(be, st, s, a, rows, l, dh, grads));
        if (hook) DPS_TRY(hook(hook_ctx, l));
        if (l == 0) break;
        DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, d));
        DPS_TRY(o->gemm_ex(be, st, 0, 1, rows, d, d, 1.0f, dh, a->half, d,
                           p16 + model_weight_offset(s, l), a->half, d, 0.0f, dh_next, a->half, d));
        DPS_TRY(op_trace_end(a->trace));
        uint16_t *t = dh;
        dh = dh_next;
        dh_next = t;
    }
    return DPS_OK;
}

dps_status model_backward(backend *be, be_stream *st, model_shape s, const float *params,
                          model_acts *a, int rows, const float *x, const float *dlogits,
                          float *grads, model_grad_hook hook, void *hook_ctx)
{
    if (a->half != BE_F32) return backward_bf16(be, st, s, a, rows, dlogits, grads, hook, hook_ctx);
    const be_ops *o = be->ops;
    int d = s.width, c = s.classes, L = s.layers;
    const float *h_last = L ? layer_ptr(&a->post, s, a->max_rows, L - 1) : x;
    float *dh = a->dh[0].ptr, *dh_next = a->dh[1].ptr;
    /* classifier */
    DPS_TRY(enter(a, L, 1, &params, &grads));
    DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, c));
    DPS_TRY(o->gemm(be, st, 1, 0, d, c, rows, 1.0f, h_last, d, dlogits, c, 0.0f,
                    grads + model_weight_offset(s, L), c));
    DPS_TRY(o->col_sum(be, st, rows, c, dlogits, grads + model_bias_offset(s, L)));
    DPS_TRY(op_trace_end(a->trace));
    if (hook) DPS_TRY(hook(hook_ctx, L));
    if (L == 0) return DPS_OK;
    DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, c));
    DPS_TRY(o->gemm(be, st, 0, 1, rows, d, c, 1.0f, dlogits, c,
                    params + model_weight_offset(s, L), c, 0.0f, dh, d));
    DPS_TRY(op_trace_end(a->trace));
    /* hidden layers, last to first; dh becomes d pre in place, the bias's
     * gradient (its column sums) taken in the same pass */
    for (int l = L - 1; l >= 0; l--) {
        const float *h_in = l ? layer_ptr(&a->post, s, a->max_rows, l - 1) : x;
        DPS_TRY(enter(a, l, 1, &params, &grads));
        DPS_TRY(trace_gelu(a, OP_BACKWARD, (int64_t)rows * d));
        DPS_TRY(o->gelu_bwd_col_sum(be, st, rows, d, dh, layer_ptr(&a->pre, s, a->max_rows, l), dh,
                                    grads + model_bias_offset(s, l)));
        DPS_TRY(op_trace_end(a->trace));
        DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, d));
        DPS_TRY(o->gemm(be, st, 1, 0, d, d, rows, 1.0f, h_in, d, dh, d, 0.0f,
                        grads + model_weight_offset(s, l), d));
        DPS_TRY(op_trace_end(a->trace));
        if (hook) DPS_TRY(hook(hook_ctx, l));
        if (l > 0) {
            DPS_TRY(trace_linear(a, OP_BACKWARD, rows, d, d));
            DPS_TRY(o->gemm(be, st, 0, 1, rows, d, d, 1.0f, dh, d,
                            params + model_weight_offset(s, l), d, 0.0f, dh_next, d));
            DPS_TRY(op_trace_end(a->trace));
            float *t = dh;
            dh = dh_next;
            dh_next = t;
        }
    }
    return DPS_OK;
}
