/* The model a configuration trains, as the strategies run it: the token MLP
 * of a preset's shape (model.h) or a model file's graph (graph.h), behind
 * one set of calls: its tensors in the flat buffer's order, its synthetic
 * batches by sample, its activations, forward, and backward with a hook
 * each time the gradients above an offset of the flat buffer are final. */
#ifndef DPS_NET_H
#define DPS_NET_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/bucket.h"
#include "model/graph.h"
#include "model/model.h"
#include "model/model_file.h"

#define NET_PATH_MAX 1024

/* A unit of a sharded strategy: a run of the flat buffer [lo, hi) holding
 * whole layers (the MLP: one layer or the classifier; a file: the tensors
 * of the ops that share them), sharded, gathered and reduce-scattered
 * whole. The units cover the flat buffer in order. */
typedef struct net_unit { size_t lo, hi; } net_unit;

typedef struct net {
    char path[NET_PATH_MAX];  /* the model file; "": the MLP of shape */
    model_shape shape;        /* the MLP's; a file's as runs.csv reports it: layers = its
                                 ops, width = input elements a loss row, tokens = loss rows
                                 a sample, classes */
    model_file file;          /* a file's ops and tensors (nops 0: the MLP) */
    graph_layout layout;      /* a file's tensors in the flat buffer */
    int *ready;               /* a file's tensors in ready order */
    size_t *counts;           /* every tensor's elements, in the flat buffer's order */
    int ntensors;
    size_t params;            /* the flat buffer's floats */
    size_t input;             /* input floats of one sample */
    int rows, classes;        /* loss rows of one sample, and their classes */
    double fwd_flops;         /* forward GEMM FLOPs of one sample */
    net_unit *units;          /* in flat order, covering it */
    int nunits;
    int *unit_of;             /* a file's: each op's unit, -1 without parameters (the MLP's
                                 layer l is unit l) */
} net;

/* The MLP of shape s. */
dps_status net_mlp(model_shape s, net *n) DPS_MUST_USE;
/* The model file at path, read and checked (model_file_read's refusals). */
dps_status net_read(const char *path, net *n) DPS_MUST_USE;
void net_free(net *n);
static inline int net_is_file(const net *n) { return n->path[0] != '\0'; }

/* The model file at path, read once per process and kept until
 * net_unload_all: what a configuration's `net` points to. */
dps_status net_load(const char *path, const net **out) DPS_MUST_USE;
void net_unload_all(void);

/* DDP's buckets of the fp32 gradients (bucket_assign over the flat order):
 * their count, -1 over max; out NULL counts them. */
int net_buckets(const net *n, double first_mb, double mb, bucket *out, int max);

/* Deterministic parameters: model_init_params, or graph_init_params. */
void net_init_params(const net *n, uint64_t seed, float *params);
/* Samples [sample0, sample0 + samples) of step `step`'s global batch: each
 * sample's n->input floats and its n->rows labels. The MLP's are
 * model_make_batch's; a file's inputs are U[-1, 1) and each row's label
 * uniform over the classes, both from dpscale's generator. */
void net_make_batch(const net *n, uint64_t seed, int step, int64_t sample0, int samples,
                    float *x, int32_t *labels);

/* The largest unit's floats. */
size_t net_unit_max(const net *n);

/* One replica's activations for up to max_samples samples. */
typedef struct net_acts {
    model_acts mlp;
    graph_acts graph;
    unsigned char *done;  /* a file's: per ready place, its tensor's gradient is final */
    int done_upto;        /* every ready place below this is done */
    dps_tf32 tf32;        /* which fp32 GEMMs multiply in TF32: the MLP's are Linears */
} net_acts;

/* prec PREC_BF16 or PREC_FP16 runs the model as under autocast in that type
 * (the MLP: model_acts_alloc; a file: graph_acts_alloc); in fp32, tf32
 * chooses which GEMMs multiply in TF32 (--tf32: a file's convolutions,
 * model_file_is_conv, by PyTorch's cuDNN flag, the rest by its matmul one). */
dps_status net_acts_alloc(backend *be, int dev, const net *n, int max_samples, dps_precision prec,
                          dps_tf32 tf32, net_acts *a) DPS_MUST_USE;
void net_acts_free(backend *be, const net *n, net_acts *a);
/* From now on forward and backward reach parameters and gradients through
 * w (window.h; its unit_of is set here); the MLP in fp32 only, a file in
 * any precision (its ops cast what the window gives). NULL: the flat buffers. */
void net_acts_window(const net *n, net_acts *a, net_window *w);

/* From now on, while t is started (op_trace_start), forward and backward
 * time each op's kernels into t; NULL: none. */
void net_acts_trace(const net *n, net_acts *a, op_trace *t);

/* logits[samples * rows, classes] = model(x) (model_forward's autocast rules
 * for the MLP, graph.h's for a file: its logits are fp32 either way). */
dps_status net_forward(backend *be, be_stream *st, const net *n, const float *params, net_acts *a,
                       int samples, const float *x, float *logits) DPS_MUST_USE;

/* Called as backward goes: every gradient at a flat offset >= ready_lo is
 * final (ready_lo only falls). */
typedef dps_status (*net_ready_hook)(void *ctx, size_t ready_lo);

/* grads = d loss / d params from dlogits (model_backward's bf16 rules for
 * the MLP: dlogits NULL takes a->mlp.dlogits16); hook may be NULL. */
dps_status net_backward(backend *be, be_stream *st, const net *n, const float *params,
                        net_acts *a, int samples, const float *x, const float *dlogits,
                        float *grads, net_ready_hook hook, void *hook_ctx) DPS_MUST_USE;

#endif
