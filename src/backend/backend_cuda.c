/* The CUDA backend: devices are GPUs; memory through cudaMalloc with the
 * harness's accounting; streams and events are CUDA's; GEMM through cuBLAS
 * (fp32 without TF32, or bf16 inputs with fp32 accumulation as autocast
 * does); the element-wise work through kernels/. CUDA is initialised on
 * first use, not at open, so a process that only validates a configuration
 * and forks rank processes never touches it. Every call is checked and its
 * error returned with file:line, the call and the library's message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <cuda_profiler_api.h>
#include <cublas_v2.h>
#include <cublasLt.h>

#include "build_config.h"
#include "backend/backend.h"
#include "attention.h"
#include "kernels.h"
#include "grad_sums.h"
#include "loss.h"
#include "windowed_k.h"
#ifdef DPS_HAVE_NVTX
#include <nvtx3/nvToolsExtCudaRt.h>
#endif
#include "backend/cuda_check.h"
#include "core/util.h"
#ifdef DPS_HAVE_CUDNN
#include "backend/conv_cudnn.h" /* convolutions through cuDNN */
#endif

/* A cuBLASLt matmul with the bias in its epilogue (gemm_bias), as one
 * stream ran it: its shape, types and operands' alignments (the key), its
 * descriptors and the algorithm cuBLASLt's heuristic chose for them
 * (usable 0: none, and the shape runs unfused), made on its first call. */
typedef struct lt_key {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int ht, ct;              /* be_dtype of A and B, of C and the bias */
    int tf32;                /* fp32 A and B multiplied in TF32 (gemm_tf32) */
    uint32_t align[4];       /* bytes (lt_align): A, B, C, the bias */
} lt_key;

typedef struct lt_plan {
    lt_key key;
    int usable;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C and D */
    cublasLtMatmulAlgo_t algo;
} lt_plan;

#define LT_PLANS 64 /* a stream's plans: a model's Linear shapes, by alignment */

/* A stream owns its cuBLAS handle, the handle's workspace, its cuBLASLt
 * plans and bf16 scratch: two host threads issuing GEMMs on two streams of
 * one device never share any. */
struct be_stream {
    cudaStream_t s;
    int dev;
    cublasHandle_t blas;    /* made on the first GEMM; cuBLASLt's handle too (a cast) */
    dps_buf blas_ws;        /* its workspace, cuBLASLt's too (be_gemm_workspace_bytes) */
    lt_plan *lt;            /* [LT_PLANS], nlt made, the next to replace when full */
    int nlt, lt_next;
    int lt_off;             /* DPSCALE_UNFUSED_BIAS: every gemm_bias unfused */
    long unfused;           /* gemm_bias calls that ran unfused (for a debugger) */
    int tf32;               /* gemm_tf32: fp32 GEMMs in CUBLAS_COMPUTE_32F_FAST_TF32 */
    dps_buf scratch[2];     /* bf16 copies of GEMM inputs */
    dps_buf col_sum_ws;     /* the bias gradients' partial sums (dps_col_sum_workspace) */
#ifdef DPS_HAVE_CUDNN
    conv_cudnn *dnn;        /* cuDNN's handle, algorithms and workspace: on the first convolution */
#endif
};
struct be_event { cudaEvent_t e; int dev; };

static void lt_plan_free(lt_plan *p)
{
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

typedef struct cuda_impl {
    pthread_mutex_t init_lock;
    /* peer access switched on from device i to device j, on first use */
    unsigned char peer_on[DPS_MAX_DEVICES][DPS_MAX_DEVICES];
    /* held off by peer_access(i, j, 0) until it is switched on again */
    unsigned char peer_held_off[DPS_MAX_DEVICES][DPS_MAX_DEVICES];
    be_cuda_versions versions; /* read by the probe at open */
} cuda_impl;


/* Every operation on a stream refuses a NULL one with a message naming the
 * operation, instead of crashing on it (the host backend refuses it alike). */
#define CU_STREAM(s)                                                      \
    do {                                                                  \
        if (!(s)) return cu_no_stream(__func__);                          \
    } while (0)

static dps_status cu_no_stream(const char *fn)
{
    const char *op = strncmp(fn, "cu_", 3) == 0 ? fn + 3 : fn;
    return dps_fail(DPS_ERR_RUNTIME, "cuda backend: %s called with no stream (NULL); issue it on "
                    "a stream of its device (be_ops.stream_create)", op);
}

static cuda_impl *impl_of(backend *be) { return be->impl; }

/* Makes dev current for the calling thread. Nothing else happens on first
 * use: no context on another device, no peer access (a ddp rank touches
 * only its own GPU). */
static dps_status ensure_device(backend *be, int dev)
{
    (void)be;
    CUDA_TRY(cudaSetDevice(dev));
    return DPS_OK;
}

/* Peer access from dev to peer's memory, switched on the first time a copy
 * between the two needs it (dp's replicate, scatter, gather and reduce),
 * unless it is held off. dev is current. Pairs without peer access copy
 * through the host. */
static dps_status ensure_peer(backend *be, int dev, int peer)
{
    cuda_impl *im = impl_of(be);
    if (dev == peer || !be->peer[dev][peer] || im->peer_on[dev][peer]) return DPS_OK;
    pthread_mutex_lock(&im->init_lock);
    int skip = im->peer_on[dev][peer] || im->peer_held_off[dev][peer];
    cudaError_t e = skip ? cudaSuccess : cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;
    if (e == cudaSuccess) im->peer_on[dev][peer] = 1;
    pthread_mutex_unlock(&im->init_lock);
    if (e != cudaSuccess) return cuda_check_fail(e, __FILE__, __LINE__, "cudaDeviceEnablePeerAccess");
    cudaGetLastError();
    return DPS_OK;
}

static dps_status cu_set_device(backend *be, int dev) { return ensure_device(be, dev); }

static dps_status cu_raw_alloc(backend *be, int dev, size_t bytes, void **p)
{
    DPS_TRY(ensure_device(be, dev));
    CUDA_TRY(cudaMalloc(p, bytes));
    return DPS_OK;
}

static void cu_raw_free(backend *be, int dev, void *p)
{
    if (ensure_device(be, dev) == DPS_OK) cudaFree(p);
}

static dps_status cu_host_alloc(backend *be, size_t bytes, void **p)
{
    (void)be;
    CUDA_TRY(cudaMallocHost(p, bytes ? bytes : 1));
    return DPS_OK;
}

static void cu_host_free(backend *be, void *p) { (void)be; cudaFreeHost(p); }

static dps_status cu_stream_create(backend *be, int dev, be_stream **s)
{
    DPS_TRY(ensure_device(be, dev));
    *s = calloc(1, sizeof **s);
    if (!*s) return dps_fail(DPS_ERR_RUNTIME, "out of host memory creating a stream");
    (*s)->dev = dev;
    cudaError_t rc = cudaStreamCreateWithFlags(&(*s)->s, cudaStreamNonBlocking);
    if (rc != cudaSuccess) {
        free(*s);
        *s = NULL;
        return cuda_check_fail(rc, __FILE__, __LINE__, "cudaStreamCreateWithFlags");
    }
    return DPS_OK;
}

static void cu_stream_destroy(backend *be, be_stream *s)
{
    if (ensure_device(be, s->dev) == DPS_OK) {
        cudaStreamSynchronize(s->s);
        for (int i = 0; i < s->nlt; i++) lt_plan_free(&s->lt[i]);
        free(s->lt);
        if (s->blas) cublasDestroy(s->blas);
        be_buf_free(be, &s->blas_ws);
        for (int k = 0; k < 2; k++) be_buf_free(be, &s->scratch[k]);
        be_buf_free(be, &s->col_sum_ws);
#ifdef DPS_HAVE_CUDNN
        conv_cudnn_free(be, s->dnn);
#endif
        cudaStreamDestroy(s->s);
    }
    free(s);
}

static dps_status cu_stream_sync(backend *be, be_stream *s)
{
    CU_STREAM(s);
    (void)be;
    CUDA_TRY(cudaStreamSynchronize(s->s));
    return DPS_OK;
}

static dps_status cu_event_create(backend *be, int dev, be_event **e)
{
    DPS_TRY(ensure_device(be, dev));
    *e = calloc(1, sizeof **e);
    if (!*e) return dps_fail(DPS_ERR_RUNTIME, "out of host memory creating an event");
    (*e)->dev = dev;
    cudaError_t rc = cudaEventCreate(&(*e)->e);
    if (rc != cudaSuccess) {
        free(*e);
        *e = NULL;
        return cuda_check_fail(rc, __FILE__, __LINE__, "cudaEventCreate");
    }
    return DPS_OK;
}

static void cu_event_destroy(backend *be, be_event *e)
{
    if (ensure_device(be, e->dev) == DPS_OK) cudaEventDestroy(e->e);
    free(e);
}

static dps_status cu_event_record(backend *be, be_event *e, be_stream *s)
{
    CU_STREAM(s);
    DPS_TRY(ensure_device(be, s->dev));
    CUDA_TRY(cudaEventRecord(e->e, s->s));
    return DPS_OK;
}

static dps_status cu_stream_wait(backend *be, be_stream *s, be_event *e)
{
    CU_STREAM(s);
    DPS_TRY(ensure_device(be, s->dev));
    CUDA_TRY(cudaStreamWaitEvent(s->s, e->e, 0));
    return DPS_OK;
}

static dps_status cu_event_sync(backend *be, be_event *e)
{
    (void)be;
    CUDA_TRY(cudaEventSynchronize(e->e));
    return DPS_OK;
}

static void cu_name_stream(backend *be, be_stream *s, const char *name)
{
    (void)be;
#ifdef DPS_HAVE_NVTX
    nvtxNameCudaStreamA(s->s, name);
#else
    (void)s; (void)name;
#endif
}

static void *cu_native_stream(backend *be, be_stream *s)
{
    (void)be;
    return (void *)s->s;
}

/* Switches `from`'s access to `to`'s memory, under init_lock; a direction
 * already in the state asked for is no error (and is cleared from the
 * thread's last error). */
static cudaError_t switch_peer(cuda_impl *im, int from, int to, int on)
{
    cudaError_t e = cudaSetDevice(from);
    if (e == cudaSuccess) e = on ? cudaDeviceEnablePeerAccess(to, 0) : cudaDeviceDisablePeerAccess(to);
    if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorPeerAccessNotEnabled) {
        cudaGetLastError();
        e = cudaSuccess;
    }
    if (e == cudaSuccess) im->peer_on[from][to] = (unsigned char)on;
    return e;
}

static dps_status cuda_peer_fail(cudaError_t e, int on, int from, int to)
{
    cudaGetLastError();
    return dps_fail(DPS_ERR_RUNTIME, "%s:%d: switching GPU %d's access to GPU %d's memory %s "
                    "failed: %s (%s); the pair's copies cannot be measured %s peer access",
                    __FILE__, __LINE__, from, to, on ? "on" : "off", cudaGetErrorName(e),
                    cudaGetErrorString(e), on ? "with" : "without");
}

/* on = 0: both directions between dev and peer switched off and held off,
 * so that copies between the two go through the host (links' d2d_nopeer:
 * a copy engine may use either direction's mapping); on = 1: dev's access
 * to peer switched on again, the other direction left to the first copy
 * that needs it. The calling thread's device is kept. */
static dps_status cu_peer_access(backend *be, int dev, int peer, int on)
{
    if (!be->peer[dev][peer] && !be->peer[peer][dev])
        return dps_fail(DPS_WAIVED, "GPUs %d and %d cannot access each other's memory directly",
                        dev, peer);
    cuda_impl *im = impl_of(be);
    int current = dev;
    CUDA_TRY(cudaGetDevice(&current));
    pthread_mutex_lock(&im->init_lock);
    const int from[2] = {dev, peer}, to[2] = {peer, dev};
    cudaError_t e = cudaSuccess;
    int failed = 0;
    for (int k = 0; k < 2 && e == cudaSuccess; k++) {
        im->peer_held_off[from[k]][to[k]] = (unsigned char)!on;
        if (be->peer[from[k]][to[k]] && (!on || k == 0)) e = switch_peer(im, from[k], to[k], on);
        failed = k;
    }
    pthread_mutex_unlock(&im->init_lock);
    cudaError_t back = cudaSetDevice(current);
    if (e != cudaSuccess)
        return cuda_peer_fail(e, on, from[failed], to[failed]);
    CUDA_TRY(back);
    return DPS_OK;
}

static dps_status cu_event_ms(backend *be, be_event *a, be_event *b, float *ms)
{
    (void)be;
    CUDA_TRY(cudaEventElapsedTime(ms, a->e, b->e));
    return DPS_OK;
}

static dps_status cu_copy(backend *be, be_stream *s, void *dst, int dst_dev, const void *src,
                          int src_dev, size_t bytes)
{
    CU_STREAM(s);
    if (!bytes) return DPS_OK;
    DPS_TRY(ensure_device(be, s->dev));
    if (dst_dev >= 0 && src_dev >= 0 && dst_dev != src_dev) {
        DPS_TRY(ensure_peer(be, s->dev, s->dev == dst_dev ? src_dev : dst_dev));
        CUDA_TRY(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s->s));
    } else {
        CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->s));
    }
    return DPS_OK;
}

static dps_status cu_memset0(backend *be, be_stream *s, void *p, size_t bytes)
{
    CU_STREAM(s);
    DPS_TRY(ensure_device(be, s->dev));
    CUDA_TRY(cudaMemsetAsync(p, 0, bytes, s->s));
    return DPS_OK;
}

/* s's buffer b, made at least `bytes` long; a buffer too short is freed
 * once the stream's work, which may still read it, is done. */
static dps_status stream_scratch(backend *be, be_stream *s, dps_buf *b, size_t bytes,
                                 const char *what)
{
    if (b->bytes >= bytes) return DPS_OK;
    CUDA_TRY(cudaStreamSynchronize(s->s));
    be_buf_free(be, b);
    return be_buf_alloc(be, s->dev, bytes, what, b);
}

/* Half copy (type ht) of a GEMM operand in the stream's scratch buffer `slot`. */
static dps_status to_half(backend *be, be_stream *s, int slot, const float *x, size_t n,
                          be_dtype ht, const void **out)
{
    dps_buf *b = &s->scratch[slot];
    DPS_TRY(stream_scratch(be, s, b, n * 2, "half GEMM inputs"));
    CUDA_TRY(dps_k_cast_half(s->s, (int64_t)n, x, b->ptr, ht == BE_F16));
    *out = b->ptr;
    return DPS_OK;
}

/* The stream's cuBLAS handle, made on its first GEMM with its workspace
 * from the accounted allocator, as PyTorch's caching allocator holds one
 * per (handle, stream) (CublasHandlePool.cpp, setWorkspaceForHandle); set
 * after cublasSetStream, which would reset it to cuBLAS's own. dev current. */
static dps_status blas_for(backend *be, be_stream *s)
{
    DPS_TRY(ensure_device(be, s->dev));
    if (s->blas) return DPS_OK;
    if (!s->blas_ws.ptr)
        DPS_TRY(be_buf_alloc(be, s->dev, be_gemm_workspace_bytes(be, s->dev), "cuBLAS workspace",
                             &s->blas_ws));
    cublasHandle_t h = NULL;
    const char *call = "cublasCreate";
    cublasStatus_t rc = cublasCreate(&h);
    if (rc == CUBLAS_STATUS_SUCCESS) {
        call = "cublasSetStream";
        rc = cublasSetStream(h, s->s);
    }
    if (rc == CUBLAS_STATUS_SUCCESS) {
        call = "cublasSetWorkspace";
        rc = cublasSetWorkspace(h, s->blas_ws.ptr, s->blas_ws.bytes);
    }
    if (rc != CUBLAS_STATUS_SUCCESS) {
        if (h) cublasDestroy(h);
        return cuda_check_cublas_fail(rc, __FILE__, __LINE__, call);
    }
    s->blas = h;
    const char *unfused = getenv("DPSCALE_UNFUSED_BIAS");
    s->lt_off = unfused && *unfused && strcmp(unfused, "0") != 0;
    return DPS_OK;
}

static cudaDataType_t cuda_type(be_dtype t)
{
    return t == BE_BF16 ? CUDA_R_16BF : t == BE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* The half type of a GEMM's A and B (BE_F32: both fp32), or why the types
 * are no autocast GEMM. */
static dps_status gemm_types(be_dtype at, be_dtype bt, be_dtype ct, be_dtype *ht)
{
    *ht = at != BE_F32 ? at : bt;
    if (*ht == BE_F32 && ct != BE_F32)
        return dps_fail(DPS_ERR_RUNTIME, "%s:%d: gemm_ex: fp32 A and B with a half C is no "
                        "autocast GEMM; cast A or B to the half type first", __FILE__, __LINE__);
    if ((at != BE_F32 && bt != BE_F32 && at != bt) || (ct != BE_F32 && ct != *ht))
        return dps_fail(DPS_ERR_RUNTIME, "%s:%d: gemm_ex: operands of two half types",
                        __FILE__, __LINE__);
    return DPS_OK;
}

/* An operand of gemm_ex in half type ht: itself, or its cast in scratch `slot`. */
static dps_status operand_half(backend *be, be_stream *s, int slot, const void *x, be_dtype t,
                               be_dtype ht, size_t n, const void **out)
{
    if (t == ht) {
        *out = x;
        return DPS_OK;
    }
    return to_half(be, s, slot, x, n, ht, out);
}

/* A and B of a GEMM in their half type ht (an fp32 one beside a half one
 * cast first); fp32 A and B as they are. */
static dps_status operands(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                           const void **a, be_dtype at, int lda, const void **b, be_dtype bt,
                           int ldb, be_dtype ht)
{
    if (ht == BE_F32) return DPS_OK;
    DPS_TRY(operand_half(be, s, 0, *a, at, ht, (size_t)(ta ? k : m) * (size_t)lda, a));
    return operand_half(be, s, 1, *b, bt, ht, (size_t)(tb ? n : k) * (size_t)ldb, b);
}

/* The compute type of a GEMM of A and B of type ht on s: fp32 accumulation,
 * and fp32 operands in TF32 when the stream's gemm_tf32 is on (PyTorch's
 * allow_tf32: CUBLAS_COMPUTE_32F_FAST_TF32, as at::cuda::blas::gemm_and_bias
 * takes it for float). */
static cublasComputeType_t compute_type(const be_stream *s, be_dtype ht)
{
    return ht == BE_F32 && s->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* cuBLAS's GEMM of A and B of type ht (fp32: cublasSgemm, TF32 off; with
 * the stream's TF32 on, cublasGemmEx in CUBLAS_COMPUTE_32F_FAST_TF32) into
 * C of type ct, fp32 accumulation; the handle made. Row-major C = op(A)
 * op(B) is column-major C^T = op(B)^T op(A)^T. */
static dps_status blas_gemm(be_stream *s, int ta, int tb, int m, int n, int k, float alpha,
                            const void *a, int lda, const void *b, int ldb, be_dtype ht,
                            float beta, void *c, be_dtype ct, int ldc)
{
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (ht == BE_F32 && !s->tf32) {
        CUBLAS_TRY(cublasSgemm(s->blas, ob, oa, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
        return DPS_OK;
    }
    CUBLAS_TRY(cublasGemmEx(s->blas, ob, oa, n, m, k, &alpha, b, cuda_type(ht), ldb, a,
                            cuda_type(ht), lda, &beta, c, cuda_type(ct), ldc,
                            compute_type(s, ht), CUBLAS_GEMM_DEFAULT));
    return DPS_OK;
}

/* fp32 operands, accumulation and C (a model under autocast calls gemm_ex:
 * the precision is the caller's, per call, not the backend's). */
static dps_status cu_gemm(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                          float alpha, const float *a, int lda, const float *b, int ldb,
                          float beta, float *c, int ldc)
{
    CU_STREAM(s);
    if (m <= 0 || n <= 0) return DPS_OK;
    DPS_TRY(blas_for(be, s));
    return blas_gemm(s, ta, tb, m, n, k, alpha, a, lda, b, ldb, BE_F32, beta, c, BE_F32, ldc);
}

/* A GEMM's set-up, gemm_ex's and gemm_bias's: its half type, the stream's
 * cuBLAS handle, A and B in that type. */
static dps_status gemm_prepare(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                               const void **a, be_dtype at, int lda, const void **b, be_dtype bt,
                               int ldb, be_dtype ct, be_dtype *ht)
{
    DPS_TRY(gemm_types(at, bt, ct, ht));
    DPS_TRY(blas_for(be, s));
    return operands(be, s, ta, tb, m, n, k, a, at, lda, b, bt, ldb, *ht);
}

static dps_status cu_gemm_ex(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                             float alpha, const void *a, be_dtype at, int lda, const void *b,
                             be_dtype bt, int ldb, float beta, void *c, be_dtype ct, int ldc)
{
    CU_STREAM(s);
    if (m <= 0 || n <= 0) return DPS_OK;
    be_dtype ht;
    DPS_TRY(gemm_prepare(be, s, ta, tb, m, n, k, &a, at, lda, &b, bt, ldb, ct, &ht));
    return blas_gemm(s, ta, tb, m, n, k, alpha, a, lda, b, ldb, ht, beta, c, ct, ldc);
}

/* The largest power of two up to 256 that divides p: the alignment
 * PyTorch tells cuBLASLt an operand has (CUDABlas.cpp, _getAlignment). */
static uint32_t lt_align(const void *p)
{
    uint32_t a = 256;
    while ((uintptr_t)p % a) a /= 2;
    return a;
}

/* The matmul's descriptors for key, with cuBLAS's transposition: row-major
 * C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so cuBLASLt's A is
 * our B and D = C^T is n x m; the epilogue's bias runs along D's rows
 * ("bias vector length must match matrix D rows"): our C's columns. fp32
 * accumulation and scale (CUBLAS_COMPUTE_32F: no TF32, as cublasSgemm in
 * the default math mode; CUBLAS_COMPUTE_32F_FAST_TF32 for fp32 A and B
 * under the stream's gemm_tf32). */
static dps_status lt_describe(const lt_key *k, const void *bias, lt_plan *p)
{
    int32_t oa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t ab = cuda_type((be_dtype)k->ht), cd = cuda_type((be_dtype)k->ct);
    cublasComputeType_t compute = k->tf32 && k->ht == BE_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                             : CUBLAS_COMPUTE_32F;
    CUBLAS_TRY(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)(k->tb ? k->k : k->n),
                                          (uint64_t)(k->tb ? k->n : k->k), k->ldb));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)(k->ta ? k->m : k->k),
                                          (uint64_t)(k->ta ? k->k : k->m), k->lda));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lc, cd, (uint64_t)k->n, (uint64_t)k->m, k->ldc));
    return DPS_OK;
}

/* The heuristic's first algorithm for p within the stream's workspace and
 * the operands' alignments, as at::cuda::blas::gemm_and_bias asks for it
 * (D's alignment: C's or the bias's, the smaller); p->usable 0 when it has
 * none. */
static dps_status lt_choose(be_stream *s, lt_plan *p)
{
    const lt_key *k = &p->key;
    uint64_t ws = s->blas_ws.bytes;
    uint32_t d_align = k->align[2] < k->align[3] ? k->align[2] : k->align[3];
    const struct { cublasLtMatmulPreferenceAttributes_t attr; const void *v; size_t len; } set[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align[1], sizeof k->align[1]},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align[0], sizeof k->align[0]},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align[2], sizeof k->align[2]},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_align, sizeof d_align},
    };
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t rc = CUBLAS_STATUS_SUCCESS;
    const char *call = "cublasLtMatmulPreferenceSetAttribute";
    for (size_t i = 0; rc == CUBLAS_STATUS_SUCCESS && i < sizeof set / sizeof set[0]; i++)
        rc = cublasLtMatmulPreferenceSetAttribute(pref, set[i].attr, set[i].v, set[i].len);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    int found = 0;
    if (rc == CUBLAS_STATUS_SUCCESS) {
        call = "cublasLtMatmulAlgoGetHeuristic";
        rc = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)s->blas, p->desc, p->la, p->lb,
                                            p->lc, p->lc, pref, 1, &r, &found);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (rc == CUBLAS_STATUS_NOT_SUPPORTED) found = 0; /* no heuristic for this case */
    else if (rc != CUBLAS_STATUS_SUCCESS) return cuda_check_cublas_fail(rc, __FILE__, __LINE__, call);
    p->usable = found > 0 && r.state == CUBLAS_STATUS_SUCCESS;
    if (p->usable) p->algo = r.algo;
    return DPS_OK;
}

/* The stream's plan for key: kept from an earlier call, or made now in a
 * free slot (or the oldest's, round robin, once all LT_PLANS are taken). */
static dps_status lt_plan_for(be_stream *s, const lt_key *key, const void *bias, lt_plan **out)
{
    for (int i = 0; i < s->nlt; i++)
        if (memcmp(&s->lt[i].key, key, sizeof *key) == 0) {
            *out = &s->lt[i];
            return DPS_OK;
        }
    if (!s->lt && !(s->lt = calloc(LT_PLANS, sizeof *s->lt)))
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory for cuBLASLt's plans");
    lt_plan *p = &s->lt[s->nlt < LT_PLANS ? s->nlt++ : s->lt_next++ % LT_PLANS];
    lt_plan_free(p);
    p->key = *key;
    dps_status rc = lt_describe(key, bias, p);
    if (!rc) rc = lt_choose(s, p);
    if (rc) lt_plan_free(p); /* a zero key matches no call */
    *out = p;
    return rc;
}

/* C = op(A) op(B) + bias through cuBLASLt's bias epilogue on the stream's
 * workspace, A and B of type ht; *done 0 when cuBLASLt has no algorithm
 * for it (then PyTorch's addmm takes its unfused path, and so does the
 * caller). */
static dps_status lt_gemm_bias(be_stream *s, int ta, int tb, int m, int n, int k, const void *a,
                               int lda, const void *b, int ldb, be_dtype ht, const void *bias,
                               void *c, be_dtype ct, int ldc, int *done)
{
    lt_key key;
    memset(&key, 0, sizeof key); /* compared whole, padding included */
    key.ta = ta;
    key.tb = tb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.ht = (int)ht;
    key.ct = (int)ct;
    key.tf32 = ht == BE_F32 && s->tf32;
    key.align[0] = lt_align(a);
    key.align[1] = lt_align(b);
    key.align[2] = lt_align(c);
    key.align[3] = lt_align(bias);
    lt_plan *p = NULL;
    *done = 0;
    DPS_TRY(lt_plan_for(s, &key, bias, &p));
    if (!p->usable) return DPS_OK;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    cublasStatus_t rc = cublasLtMatmul((cublasLtHandle_t)s->blas, p->desc, &one, b, p->la, a,
                                       p->lb, &zero, c, p->lc, c, p->lc, &p->algo, s->blas_ws.ptr,
                                       s->blas_ws.bytes, s->s);
    if (rc == CUBLAS_STATUS_NOT_SUPPORTED) {
        p->usable = 0;
        return DPS_OK;
    }
    if (rc != CUBLAS_STATUS_SUCCESS) return cuda_check_cublas_fail(rc, __FILE__, __LINE__, "cublasLtMatmul");
    *done = 1;
    return DPS_OK;
}

/* addmm as PyTorch runs it on CUDA: cuBLASLt with the bias in its epilogue
 * (at::cuda::blas::gemm_and_bias), else (no algorithm, k = 0, or
 * DPSCALE_UNFUSED_BIAS) its unfused path: the bias broadcast into C, then
 * the GEMM added to it (beta 1); either way C = round(acc + bias) once. */
static dps_status cu_gemm_bias(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                               const void *a, be_dtype at, int lda, const void *b, be_dtype bt,
                               int ldb, const void *bias, void *c, be_dtype ct, int ldc)
{
    CU_STREAM(s);
    if (m <= 0 || n <= 0) return DPS_OK;
    be_dtype ht;
    DPS_TRY(gemm_prepare(be, s, ta, tb, m, n, k, &a, at, lda, &b, bt, ldb, ct, &ht));
    int done = 0;
    if (k > 0 && !s->lt_off)
        DPS_TRY(lt_gemm_bias(s, ta, tb, m, n, k, a, lda, b, ldb, ht, bias, c, ct, ldc, &done));
    if (done) return DPS_OK;
    s->unfused++;
    CUDA_TRY(dps_k_fill_rows(s->s, m, n, bias, c, ldc, (int)be_dtype_bytes(ct)));
    if (k <= 0) return DPS_OK;
    return blas_gemm(s, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, ht, 1.0f, c, ct, ldc);
}

static dps_status cu_gemm_tf32(backend *be, be_stream *s, int on)
{
    (void)be;
    CU_STREAM(s);
    s->tf32 = on != 0;
    return DPS_OK;
}

#define KERNEL(s, launch)                                                   \
    do {                                                                    \
        DPS_TRY(ensure_device(be, (s)->dev));                               \
        CUDA_TRY(launch);                                                   \
        return DPS_OK;                                                      \
    } while (0)

static dps_status cu_bias_act(backend *be, be_stream *s, int rows, int cols, float *pre,
                              const float *bias, float *out)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_bias_act(s->s, rows, cols, pre, bias, out));
}

static dps_status cu_act(backend *be, be_stream *s, int fn, int64_t n, const float *x, float *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_act(s->s, fn, n, x, y));
}

static dps_status cu_act_bwd(backend *be, be_stream *s, int fn, int64_t n, const float *g,
                             const float *v, float *dx)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_act_bwd(s->s, fn, n, g, v, dx));
}

/* The stream's bias-gradient workspace, grown to the partial sums of a
 * rows x cols column sum. */
static dps_status col_sum_workspace(backend *be, be_stream *s, int rows, int cols)
{
    DPS_TRY(ensure_device(be, s->dev));
    size_t ws = (size_t)dps_col_sum_workspace(rows, cols) * sizeof(float);
    return stream_scratch(be, s, &s->col_sum_ws, ws, "bias-gradient workspace");
}

static dps_status cu_col_sum(backend *be, be_stream *s, int rows, int cols, const float *x,
                             float *out)
{
    CU_STREAM(s);
    DPS_TRY(col_sum_workspace(be, s, rows, cols));
    KERNEL(s, dps_k_col_sum(s->s, rows, cols, x, out, s->col_sum_ws.ptr));
}

static dps_status cu_gelu_bwd_col_sum(backend *be, be_stream *s, int rows, int cols,
                                      const float *dh, const float *pre, float *dpre, float *db)
{
    CU_STREAM(s);
    DPS_TRY(col_sum_workspace(be, s, rows, cols));
    KERNEL(s, dps_k_gelu_bwd_col_sum(s->s, rows, cols, dh, pre, dpre, db, s->col_sum_ws.ptr));
}

static dps_status cu_xent(backend *be, be_stream *s, int rows, int classes, const float *logits,
                          const int32_t *labels, float scale, float *dlogits, float *row_loss)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_xent(s->s, rows, classes, logits, labels, scale, dlogits, row_loss));
}

static dps_status cu_log_softmax(backend *be, be_stream *s, int rows, int classes,
                                 const float *logits, float *logp)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_log_softmax(s->s, rows, classes, logits, logp));
}

static dps_status cu_nll(backend *be, be_stream *s, int rows, int classes, const float *logp,
                         const int32_t *labels, float scale, float *row_loss, float *dlogp)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_nll(s->s, rows, classes, logp, labels, scale, row_loss, dlogp));
}

static dps_status cu_log_softmax_bwd(backend *be, be_stream *s, int rows, int classes,
                                     const float *logp, const float *dlogp, float *dlogits)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_log_softmax_bwd(s->s, rows, classes, logp, dlogp, dlogits));
}

static dps_status cu_sum(backend *be, be_stream *s, int64_t n, const float *x, float *out)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_sum(s->s, n, x, out));
}

static dps_status cu_sgd(backend *be, be_stream *s, int64_t n, float *p, const float *g,
                         float *buf, dps_opt_hparams h)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_sgd(s->s, n, p, g, buf, h));
}

static dps_status cu_adamw(backend *be, be_stream *s, int64_t n, float *p, const float *g,
                           float *m, float *v, dps_opt_hparams h)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_adamw(s->s, n, p, g, m, v, h));
}

static dps_status cu_scale(backend *be, be_stream *s, int64_t n, float *x, float a)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_scale(s->s, n, x, a));
}

static dps_status cu_cast(backend *be, be_stream *s, int64_t n, const void *x, be_dtype xt, void *y,
                          be_dtype yt)
{
    CU_STREAM(s);
    if (xt == yt) return cu_copy(be, s, y, s->dev, x, s->dev, (size_t)n * be_dtype_bytes(xt));
    if (xt != BE_F32 && yt != BE_F32)
        return dps_fail(DPS_ERR_RUNTIME, "%s:%d: cast between two half types", __FILE__, __LINE__);
    if (xt == BE_F32) KERNEL(s, dps_k_cast_half(s->s, n, x, y, yt == BE_F16));
    KERNEL(s, dps_k_half_to_f32(s->s, n, x, y, xt == BE_F16));
}

static dps_status cu_act_half(backend *be, be_stream *s, int fn, be_dtype ht, int64_t n,
                              const uint16_t *x, uint16_t *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_act_half(s->s, fn, n, x, y, ht == BE_F16));
}

static dps_status cu_act_bwd_half(backend *be, be_stream *s, int fn, be_dtype ht, int64_t n,
                                  const uint16_t *g, const uint16_t *v, uint16_t *dx)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_act_bwd_half(s->s, fn, n, g, v, dx, ht == BE_F16));
}

static dps_status cu_col_sum_half(backend *be, be_stream *s, be_dtype ht, int rows, int cols,
                                  const uint16_t *x, float *out)
{
    CU_STREAM(s);
    DPS_TRY(col_sum_workspace(be, s, rows, cols));
    KERNEL(s, dps_k_col_sum_half(s->s, rows, cols, x, out, s->col_sum_ws.ptr, ht == BE_F16));
}

static dps_status cu_gelu_bwd_col_sum_half(backend *be, be_stream *s, be_dtype ht, int rows,
                                           int cols, const uint16_t *dh, const uint16_t *pre,
                                           uint16_t *dpre, float *db)
{
    CU_STREAM(s);
    DPS_TRY(col_sum_workspace(be, s, rows, cols));
    KERNEL(s, dps_k_gelu_bwd_col_sum_half(s->s, rows, cols, dh, pre, dpre, db, s->col_sum_ws.ptr,
                                          ht == BE_F16));
}

static dps_status cu_unscale(backend *be, be_stream *s, int64_t n, float *g, float inv_scale,
                             float *found_inf)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_unscale(s->s, n, g, inv_scale, found_inf));
}

static dps_status cu_scale_copy(backend *be, be_stream *s, int64_t n, float *dst,
                                const float *src, float a)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_scale_copy(s->s, n, dst, src, a));
}

static dps_status cu_spin(backend *be, be_stream *s, double us)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_spin(s->s, us));
}

static dps_status cu_add(backend *be, be_stream *s, int64_t n, float *dst, const float *src)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_add(s->s, n, dst, src));
}

static dps_status cu_resample(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                              int64_t n_out, const float *x, float *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_resample(s->s, samples, n_in, n_out, x, y));
}

static dps_status cu_resample_bwd(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                                  int64_t n_out, const float *dy, float *dx)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_resample_bwd(s->s, samples, n_in, n_out, dy, dx));
}

static dps_status cu_window(backend *be, be_stream *s, const dps_window *w, int64_t samples,
                            be_dtype t, const void *x, void *y, int64_t *idx)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_window(s->s, w, samples, (int)t, x, y, idx));
}

static dps_status cu_window_bwd(backend *be, be_stream *s, const dps_window *w, int64_t samples,
                                const float *dy, const int64_t *idx, float *dx)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_window_bwd(s->s, w, samples, dy, idx, dx));
}

static dps_status cu_add_ex(backend *be, be_stream *s, int64_t n, const void *a, be_dtype at,
                            const void *b, be_dtype bt, void *y, be_dtype yt)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_add_ex(s->s, n, a, (int)at, b, (int)bt, y, (int)yt));
}

static dps_status cu_round_half(backend *be, be_stream *s, be_dtype ht, int64_t n, float *x)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_round_half(s->s, n, x, ht == BE_F16));
}

/* The stream's bias-gradient workspace grown to a grad_sums call's partial sums. */
static dps_status grad_sums_workspace(backend *be, be_stream *s, int rows, int cols, int norm)
{
    DPS_TRY(ensure_device(be, s->dev));
    size_t ws = (size_t)dps_k_grad_sums_workspace(rows, cols, norm) * sizeof(float);
    return stream_scratch(be, s, &s->col_sum_ws, ws, "bias-gradient workspace");
}

static dps_status cu_col_sum_add(backend *be, be_stream *s, be_dtype xt, be_dtype rt, int rows,
                                 int cols, int64_t ld, const void *x, float *out)
{
    CU_STREAM(s);
    DPS_TRY(grad_sums_workspace(be, s, rows, cols, 0));
    KERNEL(s, dps_k_col_sum_add(s->s, (int)xt, (int)rt, rows, cols, ld, x, out, s->col_sum_ws.ptr));
}

static dps_status cu_norm_bwd(backend *be, be_stream *s, be_dtype xt, be_dtype rt, int rows,
                              int cols, const float *g, const void *x, const float *gamma,
                              float *dx, float *dgamma, float *dbeta)
{
    CU_STREAM(s);
    DPS_TRY(grad_sums_workspace(be, s, rows, cols, 1));
    KERNEL(s, dps_k_norm_bwd(s->s, (int)xt, (int)rt, rows, cols, g, x, gamma, dx, dgamma, dbeta,
                             s->col_sum_ws.ptr));
}

static dps_status cu_add_round(backend *be, be_stream *s, be_dtype rt, int64_t n, float *dst,
                               const float *src)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_add_round(s->s, n, dst, src, (int)rt));
}

/* The kernels' limits as a refusal that names the op's shape (a launch
 * would only say "invalid argument"). */
static dps_status attn_fits(const be_attn *a)
{
    if (a->d <= DPS_ATTN_MAX_D && a->samples <= 65535 && a->heads <= 65535) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "%s:%d: attention of %lld samples, %d heads of d=%d: the CUDA "
                    "kernels (kernels/attention.cu) take d up to %d and up to 65535 samples and "
                    "heads; run fewer samples a device, or a model of smaller heads",
                    __FILE__, __LINE__, (long long)a->samples, a->heads, a->d, DPS_ATTN_MAX_D);
}

static dps_status cu_attn(backend *be, be_stream *s, const be_attn *a, const void *qkv, void *out,
                          float *lse)
{
    CU_STREAM(s);
    DPS_TRY(attn_fits(a));
    KERNEL(s, dps_k_attn_fwd(s->s, a->samples, a->heads, a->t, a->d, a->causal, (int)a->dt, qkv,
                             out, lse));
}

static dps_status cu_attn_bwd(backend *be, be_stream *s, const be_attn *a, const void *qkv,
                              const void *out, const float *lse, const void *dout, void *dqkv)
{
    CU_STREAM(s);
    DPS_TRY(attn_fits(a));
    KERNEL(s, dps_k_attn_bwd(s->s, a->samples, a->heads, a->t, a->d, a->causal, (int)a->dt, qkv,
                             out, lse, dout, dqkv));
}

static dps_status cu_resample_half(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                                   int64_t n_out, const uint16_t *x, uint16_t *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_resample_half(s->s, samples, n_in, n_out, x, y));
}

static dps_status cu_col_scale(backend *be, be_stream *s, int64_t rows, int cols, const float *x,
                               const float *g, float *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_col_scale(s->s, rows, cols, x, g, y));
}

static dps_status cu_norm_fwd(backend *be, be_stream *s, be_dtype xt, be_dtype yt, int rows,
                              int cols, const void *x, const float *gamma, const float *beta,
                              void *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_norm_fwd(s->s, (int)xt, (int)yt, rows, cols, x, gamma, beta, y));
}

static dps_status cu_row_scale(backend *be, be_stream *s, int64_t rows, int64_t cols,
                               const float *x, const float *sc, float *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_row_scale(s->s, rows, cols, x, sc, y));
}

static dps_status cu_row_dot_add(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                 const float *a, const float *b, float *out)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_row_dot_add(s->s, rows, cols, a, b, out));
}

static dps_status cu_row_scale_ex(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                  const void *x, be_dtype xt, const void *sc, be_dtype sct, void *y,
                                  be_dtype yt)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_row_scale_ex(s->s, rows, cols, x, (int)xt, sc, (int)sct, y, (int)yt));
}

static dps_status cu_pixel_scale_ex(backend *be, be_stream *s, int64_t rows, int64_t pixels,
                                    int64_t cols, const void *x, be_dtype xt, const void *sc,
                                    be_dtype sct, void *y, be_dtype yt)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_pixel_scale_ex(s->s, rows, pixels, cols, x, (int)xt, sc, (int)sct, y, (int)yt));
}

static dps_status cu_pixel_dot_add_ex(backend *be, be_stream *s, int64_t rows, int64_t pixels,
                                      int64_t cols, const float *a, const void *b, be_dtype bt,
                                      be_dtype pt, be_dtype rt, float *out)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_pixel_dot_add_ex(s->s, rows, pixels, cols, a, b, (int)bt, (int)pt, (int)rt, out));
}

static dps_status cu_cat_cols(backend *be, be_stream *s, int64_t rows, int64_t ca, const void *a,
                              be_dtype at, int64_t cb, const void *b, be_dtype bt, void *y, be_dtype yt)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_cat_cols(s->s, rows, ca, a, (int)at, cb, b, (int)bt, y, (int)yt));
}

static dps_status cu_cat_cols_bwd(backend *be, be_stream *s, int64_t rows, int64_t ca, int64_t cb,
                                  const float *g, float *da, be_dtype dat, float *db, be_dtype dbt)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_cat_cols_bwd(s->s, rows, ca, cb, g, da, (int)dat, db, (int)dbt));
}

static dps_status cu_row_dot_add_ex(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                    const float *a, const void *b, be_dtype bt, be_dtype pt,
                                    be_dtype rt, float *out)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_row_dot_add_ex(s->s, rows, cols, a, b, (int)bt, (int)pt, (int)rt, out));
}

static dps_status cu_mul(backend *be, be_stream *s, int64_t n, const float *a, const float *b,
                         float *y)
{
    CU_STREAM(s);
    KERNEL(s, dps_k_mul(s->s, n, a, b, y));
}

#ifdef DPS_HAVE_CUDNN
/* The stream's cuDNN state, made on its first convolution. dev current. */
static dps_status dnn_for(backend *be, be_stream *s)
{
    DPS_TRY(ensure_device(be, s->dev));
    if (s->dnn) return DPS_OK;
    conv_cudnn *d = NULL;
    dps_status rc = conv_cudnn_make(s->dev, s->s, &d);
    if (rc) {
        conv_cudnn_free(be, d);
        return rc;
    }
    s->dnn = d;
    return DPS_OK;
}

static dps_status cu_conv_fwd(backend *be, be_stream *s, const be_conv *cv, const void *x,
                              const void *w, const void *bias, void *y)
{
    CU_STREAM(s);
    DPS_TRY(dnn_for(be, s));
    return conv_cudnn_fwd(be, s->dnn, cv, x, w, bias, y);
}

static dps_status cu_conv_bwd_data(backend *be, be_stream *s, const be_conv *cv, const void *dy,
                                   const void *w, void *dx)
{
    CU_STREAM(s);
    DPS_TRY(dnn_for(be, s));
    return conv_cudnn_bwd_data(be, s->dnn, cv, dy, w, dx);
}

static dps_status cu_conv_bwd_filter(backend *be, be_stream *s, const be_conv *cv, const void *x,
                                     const void *dy, int accumulate, void *dw)
{
    CU_STREAM(s);
    DPS_TRY(dnn_for(be, s));
    return conv_cudnn_bwd_filter(be, s->dnn, cv, x, dy, accumulate, dw);
}
#endif

/* The device's used memory: CUDA context, cuBLAS workspace and NCCL buffers included. */
static dps_status cu_mem_used(backend *be, int dev, size_t *used)
{
    size_t free_b = 0, total = 0;
    DPS_TRY(ensure_device(be, dev));
    CUDA_TRY(cudaMemGetInfo(&free_b, &total));
    *used = total - free_b;
    return DPS_OK;
}

static dps_status cu_profile(backend *be, int on)
{
    (void)be;
    if (on) CUDA_TRY(cudaProfilerStart());
    else CUDA_TRY(cudaProfilerStop());
    return DPS_OK;
}

static void cu_destroy(backend *be)
{
    cuda_impl *im = impl_of(be);
    if (im) pthread_mutex_destroy(&im->init_lock);
    free(im);
    pthread_mutex_destroy(&be->mem_lock);
    free(be);
}

static void cu_versions(const backend *be, be_version_info *v)
{
    v->cuda = ((const cuda_impl *)be->impl)->versions;
#ifdef DPS_HAVE_CUDNN
    conv_cudnn_version(v->conv, sizeof v->conv);
#endif
}

static const be_ops cuda_ops = {
    .name = "cuda",
    .set_device = cu_set_device,
    .raw_alloc = cu_raw_alloc,
    .raw_free = cu_raw_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_sync = cu_stream_sync,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait = cu_stream_wait,
    .event_sync = cu_event_sync,
    .name_stream = cu_name_stream,
    .native_stream = cu_native_stream,
    .peer_access = cu_peer_access,
    .event_ms = cu_event_ms,
    .copy = cu_copy,
    .memset0 = cu_memset0,
    .gemm = cu_gemm,
    .gemm_tf32 = cu_gemm_tf32,
    .bias_act = cu_bias_act,
    .act = cu_act,
    .act_bwd = cu_act_bwd,
    .col_sum = cu_col_sum,
    .gelu_bwd_col_sum = cu_gelu_bwd_col_sum,
    .xent = cu_xent,
    .log_softmax = cu_log_softmax,
    .nll = cu_nll,
    .log_softmax_bwd = cu_log_softmax_bwd,
    .sum = cu_sum,
    .sgd = cu_sgd,
    .adamw = cu_adamw,
    .scale = cu_scale,
    .scale_copy = cu_scale_copy,
    .gemm_ex = cu_gemm_ex,
    .cast = cu_cast,
    .gemm_bias = cu_gemm_bias,
    .add_ex = cu_add_ex,
    .round_half = cu_round_half,
    .resample_half = cu_resample_half,
    .attn = cu_attn,
    .attn_bwd = cu_attn_bwd,
    .act_half = cu_act_half,
    .act_bwd_half = cu_act_bwd_half,
    .col_sum_half = cu_col_sum_half,
    .gelu_bwd_col_sum_half = cu_gelu_bwd_col_sum_half,
    .unscale = cu_unscale,
    .add = cu_add,
    .resample = cu_resample,
    .resample_bwd = cu_resample_bwd,
    .window = cu_window,
    .window_bwd = cu_window_bwd,
    .col_scale = cu_col_scale,
    .norm_fwd = cu_norm_fwd,
    .row_scale = cu_row_scale,
    .row_dot_add = cu_row_dot_add,
    .row_scale_ex = cu_row_scale_ex,
    .row_dot_add_ex = cu_row_dot_add_ex,
    .col_sum_add = cu_col_sum_add,
    .norm_bwd = cu_norm_bwd,
    .add_round = cu_add_round,
    .pixel_scale_ex = cu_pixel_scale_ex,
    .pixel_dot_add_ex = cu_pixel_dot_add_ex,
    .cat_cols = cu_cat_cols,
    .cat_cols_bwd = cu_cat_cols_bwd,
    .mul = cu_mul,
    .spin = cu_spin,
    .profile = cu_profile,
    .mem_used = cu_mem_used,
#ifdef DPS_HAVE_CUDNN
    .conv_fwd = cu_conv_fwd,
    .conv_bwd_data = cu_conv_bwd_data,
    .conv_bwd_filter = cu_conv_bwd_filter,
#endif
    .versions = cu_versions,
    .destroy = cu_destroy,
};

dps_status be_cuda_open(const be_options *opt, backend **out, char *reason, size_t len)
{
    (void)opt;
    *out = NULL;
    backend *be = calloc(1, sizeof *be);
    cuda_impl *im = calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        return dps_fail(DPS_ERR_RUNTIME, "out of host memory opening the CUDA backend");
    }
    char why[256];
    /* devices, versions and peer matrix, read by a child: this process stays CUDA-free */
    int n = cuda_probe_devices(be->info, &im->versions, be, why, sizeof why);
    if (reason) dps_strlcpy(reason, why, len);
    if (n <= 0) {
        free(be);
        free(im);
        return dps_fail(DPS_ERR_RUNTIME, "--backend cuda: no CUDA device is visible (%s); "
                        "use --backend host to run on emulated devices", why);
    }
    be->ops = &cuda_ops;
    be->kind = BE_CUDA;
    be->ndev = n;
    be->impl = im;
    pthread_mutex_init(&be->mem_lock, NULL);
    pthread_mutex_init(&im->init_lock, NULL);
    *out = be;
    return DPS_OK;
}
