/* The token MLP: shapes, parameter layout in one flat buffer, initialisation,
 * synthetic data, and forward/backward expressed as calls on a backend.
 * Input [rows = batch * tokens, width]; `layers` hidden layers
 * h = gelu(h W + b) of width `width`; a classifier width x classes; mean
 * softmax cross-entropy over all rows of the global batch. */
#ifndef DPS_MODEL_H
#define DPS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/names.h"
#include "model/op_trace.h"
#include "model/window.h"

typedef struct model_shape {
    int layers;   /* hidden layers, width x width each */
    int width;
    int tokens;   /* rows per sample */
    int classes;
} model_shape;

typedef struct model_preset {
    const char *name;
    model_shape shape;    /* the MLP's; unused with a file */
    int batch_per_gpu;    /* default samples per device */
    const char *like;     /* the workload it is, or is shaped after */
    const char *file;     /* a model file of the models folder; NULL: the MLP of shape */
} model_preset;

extern const model_preset model_presets[];
extern const int model_npresets;
const model_preset *model_find_preset(const char *name);
/* A file preset's path: in $DPSCALE_MODELS when set, else in the source
 * tree's bench/models/. Returns buf; "" when it does not fit. */
const char *model_preset_path(const model_preset *p, char *buf, size_t len);

size_t model_param_count(model_shape s);
size_t model_matmul_params(model_shape s);  /* weights that take part in GEMMs */
double model_fwd_flops_per_sample(model_shape s);
/* Offsets (in floats) of layer l's weight and bias; l == layers is the classifier. */
size_t model_weight_offset(model_shape s, int l);
size_t model_bias_offset(model_shape s, int l);

/* Deterministic initialisation as torch.nn.Linear: U(-1/sqrt(fan_in), +1/sqrt(fan_in)). */
void model_init_params(model_shape s, uint64_t seed, float *params);
/* Synthetic batch for `step`: rows [row0, row0 + rows) of the global batch.
 * Labels are the arg-max of the first min(width, classes) features, so the
 * task is learnable and the loss falls. */
void model_make_batch(model_shape s, uint64_t seed, int step, int64_t row0, int rows,
                      float *x, int32_t *labels);

/* Activations of one replica for up to max_rows rows on one device. Made
 * for PREC_BF16 or PREC_FP16 (the run's precision, model_acts_alloc's), the
 * model runs as under autocast in that half type: parameters and inputs
 * cast to it once a forward, activations and their gradients kept in it
 * (every GEMM writes the half type where autocast's Linear would, the
 * parameters' gradients too, rounded once and widened into fp32 as the
 * backward of the parameters' cast does), logits rounded to it and their
 * gradient cast to it once a backward. The buffers named bf16 below hold the half type. */
typedef struct model_acts {
    int max_rows;
    be_dtype half;          /* autocast's type, BE_BF16 or BE_F16: the buffers below, not the
                               fp32 ones; BE_F32 without autocast */
    dps_buf pre, post;      /* [layers][max_rows][width]: pre-activation, gelu output */
    dps_buf dh[2];          /* [max_rows][width] gradient ping-pong */
    dps_buf params16, x16;  /* bf16: the parameters and the input, cast by model_forward */
    dps_buf dlogits16;      /* bf16: [max_rows][classes], the logits in forward, their gradient in backward */
    dps_buf dparam16;       /* bf16: one layer's weight and bias gradients in the half type, as
                               autocast's backward makes them before they become fp32 */
    int logits16_out;       /* bf16: model_forward leaves the logits in dlogits16 only */
    void *logits16_at;      /* bf16: where the logits, then their gradient, are: dlogits16's
                               buffer, or the caller's (model_acts_logits16_in) */
    const net_window *window; /* a sharded strategy's (fp32 only): layer l's parameters and
                                 gradients are unit l's; NULL: the flat buffers */
    op_trace *trace;        /* when set and started: each Linear ("linear"), GELU ("gelu")
                               and autocast cast ("cast") timed (op_trace.h); NULL: none */
} model_acts;

/* Elements of model_acts.dparam16: the largest layer's weight and bias. */
size_t model_half_grad_elems(model_shape s);
dps_status model_acts_alloc(backend *be, int dev, model_shape s, int max_rows, dps_precision prec,
                            model_acts *a) DPS_MUST_USE;
void model_acts_free(backend *be, model_acts *a);
/* Under autocast: the half logits, then their gradient, in the caller's
 * rows (max_rows x classes, dp's gathered logits on device 0) instead of
 * a buffer of a's own, which is freed. */
void model_acts_logits16_in(backend *be, model_acts *a, void *rows);

/* logits[rows, classes] = model(x), each Linear an addmm (gemm_bias) and
 * GELU on its output; in bf16 with a->logits16_out set, the logits are
 * a->dlogits16's bf16 values only (what DataParallel gathers under
 * autocast) and logits is not written. */
dps_status model_forward(backend *be, be_stream *st, model_shape s, const float *params,
                         model_acts *a, int rows, const float *x, float *logits) DPS_MUST_USE;
/* Called when layer l's gradients (weight and bias) are complete, from the
 * classifier (l == layers) down to layer 0: where DDP's buckets start. */
typedef dps_status (*model_grad_hook)(void *ctx, int layer);

/* grads = d loss / d params given dlogits (overwrites grads); hook may be NULL.
 * Under autocast (a->half) it uses the parameters and input that model_forward
 * cast into a: call it after the forward of the same step; dlogits NULL
 * takes the gradient already in bf16 from a->dlogits16. */
dps_status model_backward(backend *be, be_stream *st, model_shape s, const float *params,
                          model_acts *a, int rows, const float *x, const float *dlogits,
                          float *grads, model_grad_hook hook, void *hook_ctx) DPS_MUST_USE;

#endif
