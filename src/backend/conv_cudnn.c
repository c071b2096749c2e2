/* Convolutions through cuDNN's legacy C API, algorithms chosen as
 * cudnn.benchmark chooses them (see conv_cudnn.h). Every call is checked;
 * a failure names file:line, the call and cuDNN's message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "build_config.h"
#include "backend/conv_algo.h"
#include "backend/conv_cudnn.h"
#include "backend/cuda_check.h"

#define DNN_TRY(call)                                                       \
    do {                                                                    \
        cudnnStatus_t dnn_rc_ = (call);                                     \
        if (dnn_rc_ != CUDNN_STATUS_SUCCESS)                                \
            return dnn_fail(dnn_rc_, __FILE__, __LINE__, #call);            \
    } while (0)

/* Find's results per direction: cuDNN 9 has at most 8 algorithms of each. */
#define DNN_MAX_ALGOS 16

struct conv_cudnn {
    int dev;
    cudaStream_t s;
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd, bd;   /* input, output, bias (1 x k x 1 x 1) */
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    conv_cache cache;                     /* the stream's choices, for the run */
    dps_buf ws;                           /* grown to the largest chosen algorithm's need */
};

static dps_status dnn_fail(cudnnStatus_t rc, const char *file, int line, const char *call)
{
    return dps_fail(rc == CUDNN_STATUS_ALLOC_FAILED ? DPS_ERR_OOM : DPS_ERR_RUNTIME,
                    "%s:%d: %s failed: %s (cuDNN status %d); check the device and cuDNN %s "
                    "against the CUDA runtime", file, line, call, cudnnGetErrorString(rc), (int)rc,
                    DPS_CUDNN_BUILD_VERSION);
}

dps_status conv_cudnn_make(int dev, void *cuda_stream, conv_cudnn **out)
{
    conv_cudnn *d = calloc(1, sizeof *d);
    if (!d) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for device %d's cuDNN handle", dev);
    d->dev = dev;
    d->s = (cudaStream_t)cuda_stream;
    *out = d;
    DNN_TRY(cudnnCreate(&d->h));
    DNN_TRY(cudnnSetStream(d->h, d->s));
    DNN_TRY(cudnnCreateTensorDescriptor(&d->xd));
    DNN_TRY(cudnnCreateTensorDescriptor(&d->yd));
    DNN_TRY(cudnnCreateTensorDescriptor(&d->bd));
    DNN_TRY(cudnnCreateFilterDescriptor(&d->wd));
    DNN_TRY(cudnnCreateConvolutionDescriptor(&d->cd));
    return DPS_OK;
}

void conv_cudnn_free(backend *be, conv_cudnn *d)
{
    if (!d) return;
    if (d->s) cudaStreamSynchronize(d->s);
    if (d->cd) cudnnDestroyConvolutionDescriptor(d->cd);
    if (d->wd) cudnnDestroyFilterDescriptor(d->wd);
    if (d->bd) cudnnDestroyTensorDescriptor(d->bd);
    if (d->yd) cudnnDestroyTensorDescriptor(d->yd);
    if (d->xd) cudnnDestroyTensorDescriptor(d->xd);
    if (d->h) cudnnDestroy(d->h);
    be_buf_free(be, &d->ws);
    conv_cache_free(&d->cache);
    free(d);
}

void conv_cudnn_version(char *out, size_t len)
{
    size_t v = cudnnGetVersion(); /* major * 10000 + minor * 100 + patch since cuDNN 9 */
    snprintf(out, len, "cudnn %zu.%zu.%zu (built with %s; algorithms as cudnn.benchmark)",
             v / 10000, v / 100 % 100, v % 100, DPS_CUDNN_BUILD_VERSION);
}

static cudnnDataType_t dnn_type(be_dtype t)
{
    return t == BE_BF16 ? CUDNN_DATA_BFLOAT16 : t == BE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* The math type PyTorch sets before it finds (Conv_v7.cpp's
 * setConvolutionDescriptor): tensor ops for half types, cuDNN's default
 * (TF32 where the device has it) for fp32 with allow_tf32, else FMA. */
static cudnnMathType_t find_math(const be_conv *cv)
{
    if (cv->t != BE_F32) return CUDNN_TENSOR_OP_MATH;
    return cv->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* The descriptors of cv: NHWC input and output, KRSC filter, cross-correlation
 * with fp32 accumulation, cv's groups and math type. */
static dps_status describe(conv_cudnn *d, const be_conv *cv, cudnnMathType_t math)
{
    cudnnDataType_t t = dnn_type(cv->t);
    int oh = be_conv_out_h(cv), ow = be_conv_out_w(cv);
    if (cv->groups < 1 || cv->c % cv->groups || cv->k % cv->groups || oh < 1 || ow < 1)
        return dps_fail(DPS_ERR_RUNTIME, "convolution of %d to %d channels in %d groups, %dx%d "
                        "filter on %dx%d pixels: no output or channels that the groups do not "
                        "divide; check the model file's gemm and its im2col window",
                        cv->c, cv->k, cv->groups, cv->r, cv->s, cv->h, cv->w);
    DNN_TRY(cudnnSetTensor4dDescriptor(d->xd, CUDNN_TENSOR_NHWC, t, cv->n, cv->c, cv->h, cv->w));
    DNN_TRY(cudnnSetTensor4dDescriptor(d->yd, CUDNN_TENSOR_NHWC, t, cv->n, cv->k, oh, ow));
    DNN_TRY(cudnnSetTensor4dDescriptor(d->bd, CUDNN_TENSOR_NHWC, t, 1, cv->k, 1, 1));
    DNN_TRY(cudnnSetFilter4dDescriptor(d->wd, t, CUDNN_TENSOR_NHWC, cv->k, cv->c / cv->groups,
                                       cv->r, cv->s));
    DNN_TRY(cudnnSetConvolution2dDescriptor(d->cd, cv->pad_h, cv->pad_w, cv->str_h, cv->str_w,
                                            cv->dil_h, cv->dil_w, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
    DNN_TRY(cudnnSetConvolutionGroupCount(d->cd, cv->groups));
    DNN_TRY(cudnnSetConvolutionMathType(d->cd, math));
    return DPS_OK;
}

/* Find's workspace: the largest any algorithm needs that fits the device's
 * free memory (conv_find_workspace), plus `extra` bytes after it (a scratch
 * output that Find may overwrite), allocated as "cudnn workspace". */
static dps_status find_workspace(backend *be, conv_cudnn *d, const size_t *need, int n,
                                 size_t extra, dps_buf *tmp, size_t *ws_bytes)
{
    size_t free_b = 0, total_b = 0;
    CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    size_t room = free_b > extra ? free_b - extra : 0;
    *ws_bytes = (conv_find_workspace(need, n, room) + 255) / 256 * 256;
    memset(tmp, 0, sizeof *tmp);
    if (*ws_bytes + extra == 0) return DPS_OK;
    return be_buf_alloc(be, d->dev, *ws_bytes + extra, "cudnn workspace", tmp);
}

/* The stream's workspace grown to bytes (the stream drained before the old one goes). */
static dps_status grow_workspace(backend *be, conv_cudnn *d, size_t bytes)
{
    if (d->ws.bytes >= bytes) return DPS_OK;
    CUDA_TRY(cudaStreamSynchronize(d->s));
    be_buf_free(be, &d->ws);
    return be_buf_alloc(be, d->dev, bytes, "cudnn workspace", &d->ws);
}

/* The choice kept for key from Find's n results, timed within ws_bytes. */
static dps_status keep_choice(conv_cudnn *d, const conv_key *key, const conv_perf *perf, int n,
                              size_t ws_bytes, conv_choice *out)
{
    int best = conv_algo_pick(perf, n, ws_bytes);
    if (best < 0)
        return dps_fail(DPS_ERR_RUNTIME, "cuDNN ran none of its %d algorithms for the %s of a "
                        "%dx%d convolution of %d to %d channels on %dx%d pixels (n %d, groups %d) "
                        "within %zu bytes of workspace; free device memory or lower the batch",
                        n, key->dir == CONV_FWD ? "forward" : key->dir == CONV_BWD_DATA ?
                        "input gradient" : "filter gradient", key->cv.r, key->cv.s, key->cv.c,
                        key->cv.k, key->cv.h, key->cv.w, key->cv.n, key->cv.groups, ws_bytes);
    *out = (conv_choice){perf[best].algo, perf[best].math, perf[best].bytes};
    return conv_cache_put(&d->cache, key, *out);
}

/* Each forward algorithm's workspace (SIZE_MAX where it cannot run). */
static void fwd_needs(conv_cudnn *d, size_t *need, int n)
{
    for (int a = 0; a < n; a++)
        if (cudnnGetConvolutionForwardWorkspaceSize(d->h, d->xd, d->wd, d->cd, d->yd,
                (cudnnConvolutionFwdAlgo_t)a, &need[a]) != CUDNN_STATUS_SUCCESS)
            need[a] = SIZE_MAX;
}

static dps_status find_fwd(backend *be, conv_cudnn *d, const conv_key *key, const void *x,
                           const void *w, void *y, conv_choice *out)
{
    size_t need[CUDNN_CONVOLUTION_FWD_ALGO_COUNT], ws_bytes;
    cudnnConvolutionFwdAlgoPerf_t r[DNN_MAX_ALGOS];
    conv_perf perf[DNN_MAX_ALGOS];
    dps_buf tmp;
    int n = 0;
    fwd_needs(d, need, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    DPS_TRY(find_workspace(be, d, need, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, 0, &tmp, &ws_bytes));
    cudnnStatus_t rc = cudnnFindConvolutionForwardAlgorithmEx(d->h, d->xd, x, d->wd, w, d->cd,
        d->yd, y, DNN_MAX_ALGOS, &n, r, tmp.ptr, ws_bytes);
    be_buf_free(be, &tmp);
    DNN_TRY(rc);
    for (int i = 0; i < n; i++)
        perf[i] = (conv_perf){(int)r[i].algo, (int)r[i].mathType,
                              r[i].status == CUDNN_STATUS_SUCCESS, r[i].time, r[i].memory};
    return keep_choice(d, key, perf, n, ws_bytes, out);
}

dps_status conv_cudnn_fwd(backend *be, conv_cudnn *d, const be_conv *cv, const void *x,
                          const void *w, const void *bias, void *y)
{
    conv_key key = {*cv, CONV_FWD};
    const conv_choice *got = conv_cache_find(&d->cache, &key);
    conv_choice c;
    DPS_TRY(describe(d, cv, got ? (cudnnMathType_t)got->math : find_math(cv)));
    if (got) c = *got;
    else DPS_TRY(find_fwd(be, d, &key, x, w, y, &c));
    DNN_TRY(cudnnSetConvolutionMathType(d->cd, (cudnnMathType_t)c.math));
    DPS_TRY(grow_workspace(be, d, c.bytes));
    const float one = 1.0f, zero = 0.0f;
    DNN_TRY(cudnnConvolutionForward(d->h, &one, d->xd, x, d->wd, w, d->cd,
                                    (cudnnConvolutionFwdAlgo_t)c.algo, d->ws.ptr, c.bytes, &zero,
                                    d->yd, y));
    /* the bias after the convolution, as PyTorch adds it (output.add_(bias)) */
    if (bias) DNN_TRY(cudnnAddTensor(d->h, &one, d->bd, bias, &one, d->yd, y));
    return DPS_OK;
}

static void bwd_data_needs(conv_cudnn *d, size_t *need, int n)
{
    for (int a = 0; a < n; a++)
        if (cudnnGetConvolutionBackwardDataWorkspaceSize(d->h, d->wd, d->yd, d->cd, d->xd,
                (cudnnConvolutionBwdDataAlgo_t)a, &need[a]) != CUDNN_STATUS_SUCCESS)
            need[a] = SIZE_MAX;
}

static dps_status find_bwd_data(backend *be, conv_cudnn *d, const conv_key *key, const void *dy,
                                const void *w, void *dx, conv_choice *out)
{
    size_t need[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT], ws_bytes;
    cudnnConvolutionBwdDataAlgoPerf_t r[DNN_MAX_ALGOS];
    conv_perf perf[DNN_MAX_ALGOS];
    dps_buf tmp;
    int n = 0;
    bwd_data_needs(d, need, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    DPS_TRY(find_workspace(be, d, need, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, 0, &tmp, &ws_bytes));
    cudnnStatus_t rc = cudnnFindConvolutionBackwardDataAlgorithmEx(d->h, d->wd, w, d->yd, dy,
        d->cd, d->xd, dx, DNN_MAX_ALGOS, &n, r, tmp.ptr, ws_bytes);
    be_buf_free(be, &tmp);
    DNN_TRY(rc);
    for (int i = 0; i < n; i++)
        perf[i] = (conv_perf){(int)r[i].algo, (int)r[i].mathType,
                              r[i].status == CUDNN_STATUS_SUCCESS, r[i].time, r[i].memory};
    return keep_choice(d, key, perf, n, ws_bytes, out);
}

dps_status conv_cudnn_bwd_data(backend *be, conv_cudnn *d, const be_conv *cv, const void *dy,
                               const void *w, void *dx)
{
    conv_key key = {*cv, CONV_BWD_DATA};
    const conv_choice *got = conv_cache_find(&d->cache, &key);
    conv_choice c;
    DPS_TRY(describe(d, cv, got ? (cudnnMathType_t)got->math : find_math(cv)));
    if (got) c = *got;
    else DPS_TRY(find_bwd_data(be, d, &key, dy, w, dx, &c));
    DNN_TRY(cudnnSetConvolutionMathType(d->cd, (cudnnMathType_t)c.math));
    DPS_TRY(grow_workspace(be, d, c.bytes));
    const float one = 1.0f, zero = 0.0f;
    DNN_TRY(cudnnConvolutionBackwardData(d->h, &one, d->wd, w, d->yd, dy, d->cd,
                                         (cudnnConvolutionBwdDataAlgo_t)c.algo, d->ws.ptr, c.bytes,
                                         &zero, d->xd, dx));
    return DPS_OK;
}

static void bwd_filter_needs(conv_cudnn *d, size_t *need, int n)
{
    for (int a = 0; a < n; a++)
        if (cudnnGetConvolutionBackwardFilterWorkspaceSize(d->h, d->xd, d->yd, d->cd, d->wd,
                (cudnnConvolutionBwdFilterAlgo_t)a, &need[a]) != CUDNN_STATUS_SUCCESS)
            need[a] = SIZE_MAX;
}

/* Find writes the filter's gradient many times: into a scratch copy after
 * its workspace, so that a gradient being accumulated is left as it is. */
static dps_status find_bwd_filter(backend *be, conv_cudnn *d, const conv_key *key, const void *x,
                                  const void *dy, conv_choice *out)
{
    const be_conv *cv = &key->cv;
    size_t need[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT], ws_bytes;
    size_t dw_bytes = (size_t)cv->k * (size_t)(cv->c / cv->groups) * (size_t)cv->r *
                      (size_t)cv->s * be_dtype_bytes(cv->t);
    cudnnConvolutionBwdFilterAlgoPerf_t r[DNN_MAX_ALGOS];
    conv_perf perf[DNN_MAX_ALGOS];
    dps_buf tmp;
    int n = 0;
    bwd_filter_needs(d, need, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    DPS_TRY(find_workspace(be, d, need, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, dw_bytes, &tmp,
                           &ws_bytes));
    cudnnStatus_t rc = cudnnFindConvolutionBackwardFilterAlgorithmEx(d->h, d->xd, x, d->yd, dy,
        d->cd, d->wd, (char *)tmp.ptr + ws_bytes, DNN_MAX_ALGOS, &n, r, ws_bytes ? tmp.ptr : NULL,
        ws_bytes);
    be_buf_free(be, &tmp);
    DNN_TRY(rc);
    for (int i = 0; i < n; i++)
        perf[i] = (conv_perf){(int)r[i].algo, (int)r[i].mathType,
                              r[i].status == CUDNN_STATUS_SUCCESS, r[i].time, r[i].memory};
    return keep_choice(d, key, perf, n, ws_bytes, out);
}

dps_status conv_cudnn_bwd_filter(backend *be, conv_cudnn *d, const be_conv *cv, const void *x,
                                 const void *dy, int accumulate, void *dw)
{
    conv_key key = {*cv, CONV_BWD_FILTER};
    const conv_choice *got = conv_cache_find(&d->cache, &key);
    conv_choice c;
    DPS_TRY(describe(d, cv, got ? (cudnnMathType_t)got->math : find_math(cv)));
    if (got) c = *got;
    else DPS_TRY(find_bwd_filter(be, d, &key, x, dy, &c));
    DNN_TRY(cudnnSetConvolutionMathType(d->cd, (cudnnMathType_t)c.math));
    DPS_TRY(grow_workspace(be, d, c.bytes));
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    DNN_TRY(cudnnConvolutionBackwardFilter(d->h, &one, d->xd, x, d->yd, dy, d->cd,
                                           (cudnnConvolutionBwdFilterAlgo_t)c.algo, d->ws.ptr,
                                           c.bytes, &beta, d->wd, dw));
    return DPS_OK;
}
