/* A model file's convolution run as the backend's convolution (cuDNN's on
 * GPUs) instead of its im2col GEMM, as PyTorch runs a Conv2d: the gemm
 * reads its im2col resample's input directly, which no op then makes.
 * Private to model/graph*.c and their unit tests. */
#ifndef DPS_GRAPH_CONV_H
#define DPS_GRAPH_CONV_H

#include "model/graph_ops.h"

/* Whether op j is a convolution that can run directly: a conv gemm
 * (model_file_is_conv) whose im2col has a window (win.c > 0, no pooling)
 * that agrees with the gemm's shape (k = kh kw c, m = oh ow, channels in
 * groups), its resample read by no other op. On the backend, the plan's
 * `direct` says whether it does (graph_plan_make's direct_convs). */
int graph_conv_direct(const model_file *mf, int j);
/* Op i's forward, and its backward from its output's gradient (din,
 * NULL when not needed, receives the gradient of the resample's input in
 * fp32, under autocast its half values widened: graph.c's din may be that
 * gradient itself), in fp32 or under autocast, through be_ops.conv_*. */
dps_status graph_conv_fwd(const graph_fwd_ctx *c, int i) DPS_MUST_USE;
dps_status graph_conv_bwd(const graph_bwd_ctx *c, int i, float *din) DPS_MUST_USE;

#endif
