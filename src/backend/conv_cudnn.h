/* Convolutions through cuDNN's C API as PyTorch runs a Conv2d on GPUs
 * (aten/src/ATen/native/cudnn/Conv_v7.cpp): NHWC tensors, a KRSC filter,
 * fp32 accumulation, each direction's algorithm chosen as
 * torch.backends.cudnn.benchmark = True chooses it (backend/conv_algo.h),
 * the workspace from the accounted allocator as "cudnn workspace". One
 * per stream of the CUDA backend, made on its first convolution. */
#ifndef DPS_CONV_CUDNN_H
#define DPS_CONV_CUDNN_H

#include <stddef.h>

#include "backend/backend.h"

typedef struct conv_cudnn conv_cudnn;

/* A cuDNN handle on device dev (current) issuing on cuda_stream (a cudaStream_t). */
dps_status conv_cudnn_make(int dev, void *cuda_stream, conv_cudnn **out) DPS_MUST_USE;
/* Gives back the handle, its descriptors and its workspace; NULL allowed. */
void conv_cudnn_free(backend *be, conv_cudnn *d);

/* be_ops.conv_fwd, conv_bwd_data and conv_bwd_filter (backend.h) */
dps_status conv_cudnn_fwd(backend *be, conv_cudnn *d, const be_conv *cv, const void *x,
                          const void *w, const void *bias, void *y) DPS_MUST_USE;
dps_status conv_cudnn_bwd_data(backend *be, conv_cudnn *d, const be_conv *cv, const void *dy,
                               const void *w, void *dx) DPS_MUST_USE;
dps_status conv_cudnn_bwd_filter(backend *be, conv_cudnn *d, const be_conv *cv, const void *x,
                                 const void *dy, int accumulate, void *dw) DPS_MUST_USE;

/* "cudnn 9.x.y ..." of the library loaded (cudnnGetVersion) and the headers built with. */
void conv_cudnn_version(char *out, size_t len);

#endif
