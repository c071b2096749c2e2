/* A model file's forward and backward as calls on a backend, in fp32 or as
 * under torch.autocast in bf16 or fp16 (below, graph_acts.half): each
 * op of the file on rows of `samples` samples, its parameters read from one
 * flat buffer in which the tensors lie in the reverse of the order backward
 * readies them (so that DDP's buckets, assigned by model/bucket.c over that
 * order, are contiguous ranges of it), a hook as each tensor's gradient is
 * complete. Every act runs GELU's element-wise pass; the maths is
 * deterministic and differentiable, its shapes and costs the file's. */
#ifndef DPS_GRAPH_H
#define DPS_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/names.h"
#include "model/graph_plan.h"
#include "model/model_file.h"
#include "model/op_trace.h"
#include "model/window.h"

/* Where each tensor lies in the flat buffer. */
typedef struct graph_layout {
    size_t *offset;  /* per tensor of the file, in floats */
    size_t total;    /* the buffer's floats */
} graph_layout;

dps_status graph_layout_make(const model_file *mf, graph_layout *l) DPS_MUST_USE;
void graph_layout_free(graph_layout *l);
/* Deterministic initialisation: each tensor U(-b, b), b = 1/sqrt(its fan-in:
 * its elements over its first dimension), as torch.nn's default for
 * Linear and Conv2d. */
void graph_init_params(const model_file *mf, const graph_layout *l, uint64_t seed, float *params);

/* The buffers of one replica for up to max_samples samples on one device:
 * the ops' outputs and their gradients, each in an arena where it holds its
 * place only while it is alive (graph_plan.h), and the contributions of
 * ops to a gradient a later op began (a tensor read by several ops) before
 * they are added to it. */
typedef struct graph_acts {
    int max_samples;
    int last;             /* the last op: its output and gradient are the caller's */
    graph_plan plan;      /* where each op's output and gradient lie in outs and grads */
    dps_buf outs, grads;  /* the ops' outputs, and their gradients, [samples][...] at
                             plan's offsets times max_samples */
    float *logits;        /* the last op's output: graph_forward's logits */
    const float *dlogits; /* its gradient: graph_backward's dlogits */
    int dev;              /* the device the buffers lie on */
    dps_buf contrib;      /* [max_samples][largest such contribution]: an op's input gradient
                             where a later op began that gradient (as autograd's second
                             gradient of a tensor before it is summed); none when no op needs it */
    const net_window *window; /* a sharded strategy's: each op's parameters and gradients are
                                 its unit's (window->unit_of); NULL: the flat buffers */
    /* Under autocast (half BE_BF16 or BE_F16; BE_F32: none), each op runs as
     * PyTorch's autocast runs it (docs/model-file.md, "Half precision"): a
     * gemm casts its input, weight and bias to the half type and writes its
     * output in it (fp32 accumulation, one rounding); a resample and an act
     * keep their input's type; a norm computes in fp32 from its input
     * widened and writes fp32; an embedding writes fp32; an add, a mul
     * and a cat write the half type when both their operands are of it
     * (a cat's tensor is fp32), else fp32 (type promotion); the last op's
     * half output is widened into the logits.
     * Gradients are fp32 sums of contributions, each rounded to the type of
     * the tensor it is the gradient of, and an op's output gradient is
     * rounded to its type once before its backward reads it (dlogits is
     * left as it is: a copy is rounded); the
     * parameters' gradients of a gemm are rounded to the half type once and
     * added in fp32 (the backward of the parameters' casts). */
    be_dtype half;
    be_dtype *dt;         /* under autocast: each op's output type */
    dps_buf w16;          /* a gemm's weight and bias cast, or its weight's and bias's
                             gradients before they are widened */
    dps_buf g16;          /* [max_samples][widest]: an op's output gradient in the half type,
                             or a cat's slice of it rounded to its other operand's */
    dps_buf x16;          /* [max_samples][widest]: a batched or grouped gemm's fp32 input cast;
                             a direct convolution's, then its input's half gradient */
    dps_buf out16;        /* the last op's half output, before it is widened into the logits */
    dps_buf dlast;        /* the last op's gradient rounded, where its backward reads it so */
    dps_tf32 tf32;        /* in fp32: which gemms multiply in TF32, a convolution's
                             (model_file_is_conv) or a Linear's and matmul's; set by the
                             caller after graph_acts_alloc (TF32_DEFAULT until then) */
    op_trace *trace;      /* when set and started: each op's kernels timed, by kind and
                             direction (op_trace.h); NULL: none */
} graph_acts;

/* prec PREC_BF16 or PREC_FP16 runs the file under autocast. */
dps_status graph_acts_alloc(backend *be, int dev, const model_file *mf, int max_samples,
                            dps_precision prec, graph_acts *a) DPS_MUST_USE;
void graph_acts_free(backend *be, graph_acts *a);
/* Whether graph_acts_alloc on be runs a model file's windowed convolutions
 * as they are (be has conv ops: cuDNN's), without im2col, else as their
 * im2col GEMMs (the host's); be NULL: not. */
int graph_direct_convs(const backend *be);
/* The device bytes graph_acts_alloc takes for max_samples samples on a
 * backend with convolutions (direct_convs: graph_direct_convs) or without. */
uint64_t graph_acts_bytes(const model_file *mf, uint64_t max_samples, dps_precision prec,
                          int direct_convs);

/* logits = the last op's output, [samples][out_elems], as rows x classes
 * logits; the caller's buffer, read again by graph_backward. */
dps_status graph_forward(backend *be, be_stream *st, const model_file *mf, const graph_layout *l,
                         const float *params, graph_acts *a, int samples, const float *x,
                         float *logits) DPS_MUST_USE;

/* Called once a tensor's gradient is complete, in the order backward completes them. */
typedef dps_status (*graph_grad_hook)(void *ctx, int tensor);

/* grads = d loss / d params given dlogits (the last op's output gradient,
 * [samples][out_elems]), after graph_forward of the same samples; no op's
 * backward reads the logits, so dlogits may be their buffer (dp's is);
 * grads is overwritten (through a window: the strategy zeroes each unit's
 * gradients as it enters them first); hook may be NULL. */
dps_status graph_backward(backend *be, be_stream *st, const model_file *mf, const graph_layout *l,
                          const float *params, graph_acts *a, int samples, const float *x,
                          const float *dlogits, float *grads, graph_grad_hook hook,
                          void *hook_ctx) DPS_MUST_USE;

#endif
