/* The one table of device operations that the modes and the model call:
 * devices, memory with accounting, streams, events, copies, GEMM and the
 * element-wise kernels. Implemented by backend_host.c (emulated devices on
 * the CPU) and, where the toolkit is built in, by the CUDA backend.
 * Operations are issued on a stream and may be asynchronous; events order
 * work across streams and time it. */
#ifndef DPS_BACKEND_H
#define DPS_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/opt_hparams.h"
#include "core/err.h"
#include "windowed.h"

#define DPS_MAX_DEVICES 64

typedef struct be_stream be_stream; /* defined by each backend */
typedef struct be_event be_event;
typedef struct backend backend;

typedef enum be_kind { BE_AUTO, BE_HOST, BE_CUDA, BE_KIND_COUNT } be_kind;
extern const char *const be_kind_names[BE_KIND_COUNT]; /* --backend's words */

typedef struct be_device_info {
    char name[128];
    char bus_id[32];
    size_t total_bytes; /* physical memory; host: the capacity, 0 = unlimited */
    int cc_major;       /* compute capability's major (9: Hopper); 0 on the host or unknown */
} be_device_info;

/* A category of allocations (the `what` of be_buf_alloc: "gradients",
 * "log-probabilities", ...): bytes held now, and when the device's
 * allocation peak was last reached. */
#define BE_MEM_CATEGORIES 32
typedef struct be_mem_category {
    const char *what;         /* a string literal; the last slot takes "other" */
    size_t in_use, at_peak;
} be_mem_category;

/* Harness accounting of one device's memory (exact), by category, and the
 * sampled device-level usage (context, libraries' workspaces included). */
typedef struct be_mem {
    be_mem_category cat[BE_MEM_CATEGORIES];
    int ncat;
    size_t in_use, peak;      /* what the harness allocated */
    size_t capacity;          /* host backend: --device-mem, 0 = unlimited */
    size_t device_peak;       /* high-water mark of the device's used memory */
    size_t device_base;       /* its used memory once ready, before the run allocated:
                               * the context and other processes */
    _Atomic int phase_on;     /* 1 + the phase (dps_phase) the device runs; 0: setting up */
    int peak_phase_on;        /* phase_on when the allocation peak was reached */
} be_mem;

/* A device allocation: pointer, size and owner, freed through be_buf_free. */
typedef struct dps_buf {
    void *ptr;
    size_t bytes;
    int dev;
    int cat;          /* its category in be_mem.cat */
} dps_buf;

#define DPS_HOST (-1) /* device index of host memory in copies */

/* An operand's element type in the mixed-precision ops (autocast's bf16 or
 * fp16): fp32, or bfloat16 or IEEE binary16 bits (uint16_t); its value is
 * the type code of kernels/elementwise.h's dps_load_as */
typedef enum be_dtype { BE_F32, BE_BF16, BE_F16 } be_dtype;
static inline size_t be_dtype_bytes(be_dtype t) { return t == BE_F32 ? 4 : 2; }

/* The machine's CUDA stack, as a child process sees it (the asking process
 * stays CUDA-free); "" in a build without CUDA. */
typedef struct be_cuda_versions {
    char driver[32];   /* CUDA driver API, "none" without a driver */
    char runtime[32];  /* the CUDA runtime dpscale runs on */
    char cublas[32];
    char nccl[32];     /* NCCL loaded at run time, "not built" without it */
} be_cuda_versions;

/* Versions of what a backend runs on, each a separate field. */
typedef struct be_version_info {
    be_cuda_versions cuda; /* every backend of a CUDA build reports the machine's */
    char nccl_build[32];   /* NCCL_VERSION_CODE of the headers built with, or "not built" */
    char blas[256];        /* the host backend's GEMM library; "" for the cuda backend */
    char conv[160];        /* how convolutions run: "cudnn 9.x.y" or "im2col-gemm (why)" */
} be_version_info;

/* One field of be_version_info: meta.json's key, a label for people, the text. */
typedef struct be_version_field {
    const char *key, *label, *value;
} be_version_field;

#define BE_VERSION_NFIELDS 7

/* A 2-D convolution as PyTorch runs a Conv2d on GPUs through cuDNN: x holds
 * n samples of h x w pixels of c channels (NHWC), the filter k output
 * channels of r x s x c/groups (KRSC: a conv gemm's weight), y the n x oh
 * x ow pixels of k channels (NHWC: the gemm's output); x, w, y and the
 * bias of type t, accumulated in fp32; fp32 in TF32 when tf32 is set. */
typedef struct be_conv {
    int n, c, h, w;
    int k, r, s;
    int pad_h, pad_w, str_h, str_w, dil_h, dil_w;
    int groups;
    be_dtype t;
    int tf32;
} be_conv;
/* Its output's rows and columns of pixels (oh, ow), as cuDNN's. */
int be_conv_out_h(const be_conv *cv);
int be_conv_out_w(const be_conv *cv);

/* A model file's attn op (scaled dot-product attention as PyTorch's flash
 * and memory-efficient kernels run it, docs/model-file.md): `samples`
 * samples of t rows; row r of a sample's qkv holds its heads' queries,
 * then keys, then values, d columns a head ([q_0 .. q_{h-1} | k_0 .. |
 * v_0 ..], GPT-2's c_attn and nn.MultiheadAttention's in_proj output), its
 * row of out head h's context at columns h·d; softmax(q·kᵀ/√d, keys j > r
 * masked when causal)·v. qkv, out, their gradients and dout are of type dt
 * (fp32, or a half type: fp32 accumulation, one rounding of each output);
 * lse, [samples][heads][t] fp32, the log-sum-exp of each row's scaled
 * scores, forward's beside out and all that backward reads beside qkv, out
 * and dout: no t x t matrix is kept or made whole. */
typedef struct be_attn {
    int64_t samples;
    int heads, t, d;
    int causal;
    be_dtype dt;
} be_attn;

typedef struct be_ops {
    const char *name;
    dps_status (*set_device)(backend *, int dev);   /* bind the calling thread */
    dps_status (*raw_alloc)(backend *, int dev, size_t bytes, void **p);
    void (*raw_free)(backend *, int dev, void *p);
    dps_status (*host_alloc)(backend *, size_t bytes, void **p); /* pinned */
    void (*host_free)(backend *, void *p);
    dps_status (*stream_create)(backend *, int dev, be_stream **s);
    void (*stream_destroy)(backend *, be_stream *s);
    dps_status (*stream_sync)(backend *, be_stream *s);
    dps_status (*event_create)(backend *, int dev, be_event **e);
    void (*event_destroy)(backend *, be_event *e);
    dps_status (*event_record)(backend *, be_event *e, be_stream *s);
    dps_status (*stream_wait)(backend *, be_stream *s, be_event *e);
    dps_status (*event_sync)(backend *, be_event *e);   /* the calling thread waits */
    void (*name_stream)(backend *, be_stream *s, const char *name); /* NVTX */
    void *(*native_stream)(backend *, be_stream *s); /* cudaStream_t; NULL on the host */
    /* on = 0: peer access between dev and peer switched off both ways and held off
     * (their copies go through the host) until on = 1 switches dev's access to
     * peer's memory on again; DPS_WAIVED (with why) when there is none */
    dps_status (*peer_access)(backend *, int dev, int peer, int on);
    /* elapsed ms between two recorded, completed events */
    dps_status (*event_ms)(backend *, be_event *start, be_event *end, float *ms);
    /* dst_dev/src_dev are device indices or DPS_HOST */
    dps_status (*copy)(backend *, be_stream *s, void *dst, int dst_dev,
                       const void *src, int src_dev, size_t bytes);
    dps_status (*memset0)(backend *, be_stream *s, void *p, size_t bytes);
    /* row-major C[m,n] = alpha * op(A) op(B) + beta * C, fp32 */
    dps_status (*gemm)(backend *, be_stream *s, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb,
                       float beta, float *c, int ldc);
    /* The fp32 GEMMs issued on s from now on (gemm, and gemm_ex and gemm_bias
     * with fp32 A and B) multiply in TF32 when on, else in fp32, as
     * cublasSetMathMode sets a handle's and PyTorch's allow_tf32 flags
     * choose: CUDA with CUBLAS_COMPUTE_32F_FAST_TF32, the host with A and B
     * rounded to TF32 first (dps_round_tf32) and an fp32 product; a stream
     * starts with it off; half GEMMs are not affected */
    dps_status (*gemm_tf32)(backend *, be_stream *s, int on);
    /* pre[r,c] += bias[c]; out = gelu(pre) when out != NULL */
    dps_status (*bias_act)(backend *, be_stream *s, int rows, int cols, float *pre,
                           const float *bias, float *out);
    /* y = fn(x), n elements, fn a DPS_ACT_* (kernels/elementwise.h's
     * dps_act: torch's relu, gelu (the erf form), tanh, ...); y may be x */
    dps_status (*act)(backend *, be_stream *s, int fn, int64_t n, const float *x, float *y);
    /* dx = g * fn'(.) from v, what fn's backward reads: its output where
     * dps_act_keeps_output(fn), else its input (dps_act_bwd); dx may be g */
    dps_status (*act_bwd)(backend *, be_stream *s, int fn, int64_t n, const float *g,
                          const float *v, float *dx);
    dps_status (*col_sum)(backend *, be_stream *s, int rows, int cols, const float *x,
                          float *out);
    /* GELU's backward and the bias gradient of the Linear before it in one
     * pass over rows x cols: dpre = act_bwd's for GELU, db = col_sum of dpre, bit for
     * bit; dpre may be dh */
    dps_status (*gelu_bwd_col_sum)(backend *, be_stream *s, int rows, int cols, const float *dh,
                                   const float *pre, float *dpre, float *db);
    dps_status (*xent)(backend *, be_stream *s, int rows, int classes, const float *logits,
                       const int32_t *labels, float scale, float *dlogits, float *row_loss);
    /* nn.CrossEntropyLoss as PyTorch runs it, in three steps on materialised
     * tensors: logp = log_softmax(logits) (rows x classes); row_loss[r] =
     * -logp[r, label] and its gradient dlogp = -scale at the label, 0
     * elsewhere; dlogits = dlogp - exp(logp) * sum over the row of dlogp */
    dps_status (*log_softmax)(backend *, be_stream *s, int rows, int classes, const float *logits,
                              float *logp);
    dps_status (*nll)(backend *, be_stream *s, int rows, int classes, const float *logp,
                      const int32_t *labels, float scale, float *row_loss, float *dlogp);
    dps_status (*log_softmax_bwd)(backend *, be_stream *s, int rows, int classes,
                                  const float *logp, const float *dlogp, float *dlogits);
    dps_status (*sum)(backend *, be_stream *s, int64_t n, const float *x, float *out);
    dps_status (*sgd)(backend *, be_stream *s, int64_t n, float *p, const float *g,
                      float *buf, dps_opt_hparams h);
    dps_status (*adamw)(backend *, be_stream *s, int64_t n, float *p, const float *g,
                        float *m, float *v, dps_opt_hparams h);
    dps_status (*scale)(backend *, be_stream *s, int64_t n, float *x, float a);
    /* dst = src * a in one pass, dst == src allowed (DDP's bucket copy) */
    dps_status (*scale_copy)(backend *, be_stream *s, int64_t n, float *dst, const float *src,
                             float a);
    dps_status (*add)(backend *, be_stream *s, int64_t n, float *dst, const float *src);
    /* A model file's reshaping (model/graph.c): per sample y[i] = x[i mod n_in]
     * for i < n_out; resample_bwd writes dx[j], the sum over c of dy[j + c n_in]
     * in c's order */
    dps_status (*resample)(backend *, be_stream *s, int64_t samples, int64_t n_in, int64_t n_out,
                           const float *x, float *y);
    dps_status (*resample_bwd)(backend *, be_stream *s, int64_t samples, int64_t n_in,
                               int64_t n_out, const float *dy, float *dx);
    /* y[r,c] = x[r,c] * g[c] (a norm's scale); y may be x */
    dps_status (*col_scale)(backend *, be_stream *s, int64_t rows, int cols, const float *x,
                            const float *g, float *y);
    /* A norm's forward (y = x·γ + β per column) in one pass over rows x
     * cols: x of type xt widened, γ and β fp32 (either may be NULL), the
     * product and the sum each in fp32 as col_scale then bias_act make them
     * (elementwise.h's dps_norm_affine), y stored once in type yt; y may be
     * x when xt is yt */
    dps_status (*norm_fwd)(backend *, be_stream *s, be_dtype xt, be_dtype yt, int rows, int cols,
                           const void *x, const float *gamma, const float *beta, void *y);
    /* y = a * b element-wise; y may be a or b */
    dps_status (*mul)(backend *, be_stream *s, int64_t n, const float *a, const float *b, float *y);
    /* A model file's mul op: y[r,c] = x[r,c] * sc[r] (squeeze-and-excitation's
     * scale broadcast over a channel's pixels); y may be x */
    dps_status (*row_scale)(backend *, be_stream *s, int64_t rows, int64_t cols, const float *x,
                            const float *sc, float *y);
    /* its scale's gradient: out[r] += the sum over c, in c's order, of a[r,c] * b[r,c] */
    dps_status (*row_dot_add)(backend *, be_stream *s, int64_t rows, int64_t cols, const float *a,
                              const float *b, float *out);
    /* The ops of a model under autocast (bf16 or fp16): every tensor cast once,
     * outputs in the half type where autocast writes them. gemm_ex is gemm with
     * each operand's type: half operands (A and B of one type) with fp32
     * accumulation, C rounded once (an fp32 A or B beside a half one is cast to
     * its type first; fp32 A and B with a half C are refused) */
    dps_status (*gemm_ex)(backend *, be_stream *s, int trans_a, int trans_b, int m, int n, int k,
                          float alpha, const void *a, be_dtype at, int lda, const void *b,
                          be_dtype bt, int ldb, float beta, void *c, be_dtype ct, int ldc);
    /* y = x in y's type: fp32 -> half rounds to nearest even (fp16: inf
     * beyond its range), half -> fp32 is exact; one half type to another
     * goes through fp32 */
    dps_status (*cast)(backend *, be_stream *s, int64_t n, const void *x, be_dtype xt, void *y,
                       be_dtype yt);
    /* A Linear as PyTorch's addmm runs it: row-major C[m,n] = op(A) op(B) +
     * bias[col], the bias (n elements of C's type) added to the fp32 product
     * before C's one rounding (CUDA: cuBLASLt's bias epilogue, as
     * at::cuda::blas::gemm_and_bias); operands as gemm_ex's, alpha 1 */
    dps_status (*gemm_bias)(backend *, be_stream *s, int trans_a, int trans_b, int m, int n,
                            int k, const void *a, be_dtype at, int lda, const void *b, be_dtype bt,
                            int ldb, const void *bias, void *c, be_dtype ct, int ldc);
    /* act and act_bwd on tensors of half type ht, computed in fp32 and
     * rounded (dps_act_half, dps_act_bwd_half); y may be x, dx may be g */
    dps_status (*act_half)(backend *, be_stream *s, int fn, be_dtype ht, int64_t n,
                           const uint16_t *x, uint16_t *y);
    dps_status (*act_bwd_half)(backend *, be_stream *s, int fn, be_dtype ht, int64_t n,
                               const uint16_t *g, const uint16_t *v, uint16_t *dx);
    /* col_sum of a matrix of half type ht into fp32, in col_sum's order */
    dps_status (*col_sum_half)(backend *, be_stream *s, be_dtype ht, int rows, int cols,
                               const uint16_t *x, float *out);
    /* act_bwd_half's GELU then col_sum_half of its output, in one pass (as
     * gelu_bwd_col_sum); dpre may be dh */
    dps_status (*gelu_bwd_col_sum_half)(backend *, be_stream *s, be_dtype ht, int rows, int cols,
                                        const uint16_t *dh, const uint16_t *pre, uint16_t *dpre,
                                        float *db);
    /* A model file's element-wise ops under autocast (model/graph_autocast.c).
     * add_ex: y = a + b with each operand of its own type, added in fp32 and
     * rounded once to y's (an add under type promotion); y may be a */
    dps_status (*add_ex)(backend *, be_stream *s, int64_t n, const void *a, be_dtype at,
                         const void *b, be_dtype bt, void *y, be_dtype yt);
    /* A mul under autocast: row_scale with each operand of its own type,
     * multiplied in fp32 and stored once in y's type (y may be x when they
     * are of one type); and its scale's gradient: out[r] += the sum over c,
     * in c's order, of a[r,c] * b[r,c] (b of type bt) each rounded to type
     * pt, the sum rounded to type rt (BE_F32: as it is) */
    dps_status (*row_scale_ex)(backend *, be_stream *s, int64_t rows, int64_t cols, const void *x,
                               be_dtype xt, const void *sc, be_dtype sct, void *y, be_dtype yt);
    dps_status (*row_dot_add_ex)(backend *, be_stream *s, int64_t rows, int64_t cols,
                                 const float *a, const void *b, be_dtype bt, be_dtype pt,
                                 be_dtype rt, float *out);
    /* A mul and a cat over pixels (model_file.h's pixels=: each sample's
     * pixels of channels held pixel by pixel, a pixel's channels together),
     * each operand of its own type (BE_F32: fp32's ops). pixel_scale_ex:
     * y[r,p,c] = x[r,p,c] * sc[r,c] for rows r (samples) of pixels p of cols
     * c, multiplied in fp32 and stored once in y's type (y may be x of one
     * type); pixel_dot_add_ex, its scale's gradient: out[r,c] += the sum over
     * p, in p's order, of a[r,p,c] * b[r,p,c] each rounded to type pt, the
     * sum rounded to type rt. cat_cols: y[r, 0:ca] = a[r,:], y[r, ca:ca+cb] =
     * b[r,:], each cast to y's type; cat_cols_bwd: da[r,:] += g[r, 0:ca] rounded to type dat and
     * db[r,:] += g[r, ca:ca+cb] rounded to type dbt (da or db NULL: not
     * wanted) */
    dps_status (*pixel_scale_ex)(backend *, be_stream *s, int64_t rows, int64_t pixels,
                                 int64_t cols, const void *x, be_dtype xt, const void *sc,
                                 be_dtype sct, void *y, be_dtype yt);
    dps_status (*pixel_dot_add_ex)(backend *, be_stream *s, int64_t rows, int64_t pixels,
                                   int64_t cols, const float *a, const void *b, be_dtype bt,
                                   be_dtype pt, be_dtype rt, float *out);
    dps_status (*cat_cols)(backend *, be_stream *s, int64_t rows, int64_t ca, const void *a,
                           be_dtype at, int64_t cb, const void *b, be_dtype bt, void *y,
                           be_dtype yt);
    dps_status (*cat_cols_bwd)(backend *, be_stream *s, int64_t rows, int64_t ca, int64_t cb,
                               const float *g, float *da, be_dtype dat, float *db, be_dtype dbt);
    /* x rounded in place to the nearest value of half type ht, kept in fp32
     * (a gradient cast to its tensor's half type) */
    dps_status (*round_half)(backend *, be_stream *s, be_dtype ht, int64_t n, float *x);
    /* resample of a tensor of a half type (its 2-byte elements copied) */
    dps_status (*resample_half)(backend *, be_stream *s, int64_t samples, int64_t n_in,
                                int64_t n_out, const uint16_t *x, uint16_t *y);
    /* A model file's windowed resample (kernels/windowed.h's dps_window: a
     * convolution's im2col or a max or average pooling over each sample's
     * h x w pixels of c channels), `samples` samples of dps_window_in_elems
     * elements in, dps_window_out_elems out. window: x and y of type t
     * (BE_F32 or a half type: im2col and max copy values, avg sums in fp32
     * and rounds once); a max pool writes each output's index in its input
     * plane (iy w + ix, int64, as max_pool2d_with_indices) into idx, which is
     * NULL for the others. window_bwd: dx, fp32, the sum of what each input
     * element fed (col2im; avg's dy / kh kw; max's dy through idx) */
    dps_status (*window)(backend *, be_stream *s, const dps_window *w, int64_t samples, be_dtype t,
                         const void *x, void *y, int64_t *idx);
    dps_status (*window_bwd)(backend *, be_stream *s, const dps_window *w, int64_t samples,
                             const float *dy, const int64_t *idx, float *dx);
    /* A model file's sums into gradients (model/graph*.c), each in
     * col_sum's order (dps_col_sum_plan_for) and added in fp32:
     * col_sum_add: out[c] += the sum over rows of x[r * ld + c] (x of type
     * xt), rounded to type rt first (BE_F32: as it is; a bias's gradient,
     * an embedding's); norm_bwd: a norm's backward (y = x·γ + β per
     * column) in one pass over rows x cols, dgamma[c] += the sum of g·x
     * (each product in fp32, x of type xt), dbeta[c] += the sum of g, dx
     * += (γ ? g·γ[c] : g) rounded to type rt (γ, dx, dgamma, dbeta may be
     * NULL, x too without dgamma); add_round: dst += src rounded to type rt.
     * CUDA keeps the runs' partial sums in the stream's bias-gradient workspace */
    dps_status (*col_sum_add)(backend *, be_stream *s, be_dtype xt, be_dtype rt, int rows,
                              int cols, int64_t ld, const void *x, float *out);
    dps_status (*norm_bwd)(backend *, be_stream *s, be_dtype xt, be_dtype rt, int rows, int cols,
                           const float *g, const void *x, const float *gamma, float *dx,
                           float *dgamma, float *dbeta);
    dps_status (*add_round)(backend *, be_stream *s, be_dtype rt, int64_t n, float *dst,
                            const float *src);
    /* attn: out and lse from qkv (be_attn); attn_bwd: dqkv from dout, qkv,
     * out and lse, every element of dqkv written */
    dps_status (*attn)(backend *, be_stream *s, const be_attn *a, const void *qkv, void *out,
                       float *lse);
    dps_status (*attn_bwd)(backend *, be_stream *s, const be_attn *a, const void *qkv,
                           const void *out, const float *lse, const void *dout, void *dqkv);
    /* GradScaler's unscale: g *= inv_scale, and *found_inf (device memory,
     * one float) set to 1 when any g is inf or NaN, left as it is otherwise */
    dps_status (*unscale)(backend *, be_stream *s, int64_t n, float *g, float inv_scale,
                          float *found_inf);
    /* Convolutions (be_conv), NULL where the backend has none (the host:
     * a model file's convolution stays its im2col GEMM). conv_fwd: y =
     * conv(x, w) + bias (NULL: none, else k elements added per pixel);
     * conv_bwd_data: dx = the input's gradient from dy; conv_bwd_filter: dw
     * = the filter's gradient from x and dy, added to dw when accumulate */
    dps_status (*conv_fwd)(backend *, be_stream *s, const be_conv *cv, const void *x,
                           const void *w, const void *bias, void *y);
    dps_status (*conv_bwd_data)(backend *, be_stream *s, const be_conv *cv, const void *dy,
                                const void *w, void *dx);
    dps_status (*conv_bwd_filter)(backend *, be_stream *s, const be_conv *cv, const void *x,
                                  const void *dy, int accumulate, void *dw);
    /* start (on = 1) or stop the profiler's capture range (cudaProfilerStart/Stop) */
    /* the stream stays busy for us microseconds (--inject-slowdown) */
    dps_status (*spin)(backend *, be_stream *s, double us);
    dps_status (*profile)(backend *, int on);
    /* the device's used memory now (host backend: the harness's own) */
    dps_status (*mem_used)(backend *, int dev, size_t *used);
    /* the backend's own fields of v, which be_versions has zeroed */
    void (*versions)(const backend *, be_version_info *v);
    void (*destroy)(backend *);
} be_ops;

struct backend {
    const be_ops *ops;
    be_kind kind;
    int ndev;
    int emulated;                /* timings describe the CPU, not a GPU */
    int unpinned;                /* host: be_options.unpinned */
    int host_cores;              /* host: the cores this process may use; 0 on GPUs */
    be_device_info info[DPS_MAX_DEVICES];
    unsigned char peer[DPS_MAX_DEVICES][DPS_MAX_DEVICES]; /* i can access j's memory */
    be_mem mem[DPS_MAX_DEVICES];
    pthread_mutex_t mem_lock;
    void *impl;
    struct strict_state *strict; /* strict mode's registries (strict.c); NULL when off */
};

typedef struct be_options {
    be_kind kind;
    int host_devices;      /* emulated device count */
    size_t device_mem;     /* host capacity per device, 0 = unlimited */
    int quiet;             /* no "took the host backend" line */
    /* when set, auto's "took the host backend" line is written here instead of to
     * stderr, for the caller to print with what it adds (a sweep's outlook) */
    char *notice;
    size_t notice_len;
    int unpinned;          /* host: leave threads on the cores they have (a launcher placed them) */
} be_options;

/* Opens the backend; for BE_AUTO takes cuda when a GPU is visible, else host,
 * and says which; fails (be_auto_decide) rather than take the host on a
 * machine with NVIDIA GPUs that CUDA cannot use. */
dps_status be_open(const be_options *opt, backend **out) DPS_MUST_USE;

/* What --backend auto sees when CUDA found no device. */
typedef struct be_auto_signs {
    const char *cuda_why;   /* why CUDA found none (the probe's words) */
    int dev_nodes;          /* /dev/nvidia0, /dev/nvidia1, ... (be_nvidia_dev_nodes) */
    int nvml_gpus;          /* NVML's device count; -1 without NVML */
    const char *visible;    /* CUDA_VISIBLE_DEVICES, NULL when unset */
    int built_with_cuda;
} be_auto_signs;
/* DPS_OK when the host backend may be taken: no sign of an NVIDIA GPU;
 * else a failure that says what was seen, why CUDA has none, and what to do. */
dps_status be_auto_decide(const be_auto_signs *s) DPS_MUST_USE;
/* The nvidiaN device nodes in dir (/dev). */
int be_nvidia_dev_nodes(const char *dir);
void be_close(backend *be);

/* The device now runs phase (a dps_phase; -1: setting up), for the phase of
 * its allocation peak. */
void be_mem_phase(backend *be, int dev, int phase);
/* What an allocation's purpose (be_buf_alloc's `what`) holds, in the
 * categories memory.csv's `kind` column uses: "parameters", "gradients",
 * "optimizer state", "activations", "inputs", "outputs", "loss buffers",
 * "communication", "workspace" or "other". */
const char *be_mem_kind(const char *what);

/* cuBLAS's workspace of one (handle, stream), as PyTorch sizes it
 * (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize):
 * config, CUBLAS_WORKSPACE_CONFIG's value (NULL when unset), is read as
 * its ":SIZE:COUNT" pairs, SIZE in KiB, summed; without one pair, or unset,
 * 32 MiB on compute capability 9, 10 and 12 (Hopper, Blackwell) and
 * 8 MiB + 128 KiB (":4096:2:16:8") on the others. */
size_t be_cublas_workspace_bytes(int cc_major, const char *config);
/* The GEMM library's workspace a stream that runs GEMMs holds on device dev:
 * be_cublas_workspace_bytes of the device's compute capability and the
 * environment on the cuda backend (cuBLAS and cuBLASLt share it, as
 * PyTorch's do by default); 0 on the host backend, as PyTorch on the CPU. */
size_t be_gemm_workspace_bytes(const backend *be, int dev);

/* Accounted allocation: checks the capacity, records in-use and peak, and on
 * failure returns DPS_ERR_OOM with the device, the purpose and the sizes. */
/* gemm_ex's operand types, checked as cuBLAS checks them when the call is
 * made: *ht the half type of A and B (BE_F32: none); A and B of two half
 * types, fp32 A and B with a half C, or C of another half type, refused. */
dps_status be_gemm_half_type(be_dtype at, be_dtype bt, be_dtype ct, be_dtype *ht) DPS_MUST_USE;
dps_status be_buf_alloc(backend *be, int dev, size_t bytes, const char *what, dps_buf *buf) DPS_MUST_USE;
void be_buf_free(backend *be, dps_buf *buf);
/* Samples the device's used memory into mem[dev].device_base: call once a
 * device is ready (its streams made) and before the run allocates on it. */
dps_status be_mark_baseline(backend *be, int dev) DPS_MUST_USE;
/* Samples the device's used memory into mem[dev].device_peak. */
dps_status be_sample_mem(backend *be, int dev) DPS_MUST_USE;
void be_reset_peaks(backend *be);

/* The versions of what be runs on; with CUDA built in, a backend other than
 * cuda gets the machine's CUDA stack from a short-lived child process. */
void be_versions(const backend *be, be_version_info *v);
/* v's fields in a fixed order, driver first; values point into v. */
void be_version_fields(const be_version_info *v, be_version_field out[BE_VERSION_NFIELDS]);

dps_status be_host_open(const be_options *opt, backend **out) DPS_MUST_USE;

/* Strict mode (DPSCALE_STRICT=1, host backend; strict.c): every op's
 * stream, pointers and sizes checked as CUDA checks them, and the accesses
 * of streams that nothing orders caught as compute-sanitizer's racecheck
 * and synccheck catch them. An op's operand: bytes at p, read or written,
 * on device dev (BE_ON_STREAM: the stream's; DPS_HOST: pinned or pageable
 * host memory, as a copy allows). */
#define BE_ON_STREAM (-2)
typedef struct be_access {
    const void *p;
    int64_t bytes;   /* negative: the op was given a negative size */
    int dev;
    int write;
} be_access;
/* Whether DPSCALE_STRICT=1 asks for strict mode (the environment is read here only). */
int be_strict_wanted(void);
/* Whether be runs in strict mode. */
int be_strict_on(const backend *be);
/* Work that is not a be_ops entry (a collective issued on stream s) declared
 * as an op named op: its operands checked and its accesses ordered as an op
 * of s. DPS_OK at once when be is not strict. */
dps_status be_strict_op(backend *be, be_stream *s, const char *op, const be_access *acc, int n)
    DPS_MUST_USE;
/* The label be_buf_alloc gives its allocation at p (`what`, a string literal). */
void be_strict_label(backend *be, const void *p, const char *what);
/* The first misuse seen where no status could carry it (a free, a destroy),
 * as a failure; DPS_OK when none. */
dps_status be_strict_status(backend *be) DPS_MUST_USE;
/* Whether ndev emulated devices outnumber the cores that run them; then
 * note says so ("oversubscribed: 4 devices on 2 cores: scaling beyond 2
 * reflects the CPU"). 0 on GPUs. */
int be_oversubscribed(const backend *be, int ndev, char *note, size_t len);
#ifdef DPS_HAVE_CUDA
/* cuda_probe.c: devices and versions seen by a child process (the caller
 * stays CUDA-free). info: [DPS_MAX_DEVICES]; info and versions may be NULL;
 * be (may be NULL) gets the peer-access matrix. Returns the device count. */
int cuda_probe_devices(be_device_info *info, be_cuda_versions *versions, backend *be, char *why,
                   size_t len);
/* The versions alone (no device is opened); "unknown" when the child fails. */
void cuda_probe_versions(be_cuda_versions *versions);
/* backend_cuda.c; why (may be NULL) says why there is no device */
dps_status be_cuda_open(const be_options *opt, backend **out, char *why, size_t len) DPS_MUST_USE;
#endif

#endif
