/* The host backend: emulated devices on the CPU for machines without a GPU.
 * Each device is an allocation arena with accounting and an optional
 * capacity (--device-mem); operations run synchronously on the calling
 * thread, so a stream is only a device tag and an event a timestamp.
 * GEMM goes through the library chosen at build time (host_gemm.h), on the
 * calling thread alone. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build_config.h"
#include "elementwise.h"
#include "backend/backend.h"
#include "backend/host_attn.h"
#include "backend/host_devmem.h"
#include "backend/host_gemm.h"
#include "backend/host_grad_sums.h"
#include "backend/strict.h"
#include "backend/host_strict.h"
#include "core/util.h"

struct be_stream {
    int dev;
    int tf32; /* gemm_tf32: its fp32 GEMMs' inputs rounded to TF32 */
};

/* Every operation on a stream refuses a NULL one: the cuda backend reads
 * the stream's device and queue from it (a NULL there is a crash), so the
 * host fails here first, naming the operation. */
#define HOST_STREAM(s)                                                    \
    do {                                                                  \
        if (!(s)) return host_no_stream(__func__);                        \
    } while (0)

static dps_status host_no_stream(const char *fn)
{
    const char *op = strncmp(fn, "host_", 5) == 0 ? fn + 5 : fn;
    return dps_fail(DPS_ERR_RUNTIME, "host backend: %s called with no stream (NULL); issue it on "
                    "a stream of its device (be_ops.stream_create), as the cuda backend "
                    "requires", op);
}
struct be_event { int dev; double t_ms; int recorded; };

/* Operand p of an operation on stream s made the address the host reads
 * and writes: strict mode's device memory through its alias (host_devmem.h),
 * other memory as it is. Strict mode refuses another device's memory, which
 * a kernel reaches only through peer access (the cuda backend switches it on
 * for copies alone). */
#define HOST_RW(s, p)                                                     \
    do {                                                                  \
        if (host_dev_of(p) >= 0 && host_dev_of(p) != (s)->dev)            \
            return host_other_device(__func__, (s)->dev, (p));            \
        (p) = host_dev_rw(p);                                             \
    } while (0)

static dps_status host_other_device(const char *fn, int dev, const void *p)
{
    char what[256];
    host_devmem_describe(p, what, sizeof what);
    return dps_fail(DPS_ERR_RUNTIME, "host backend (strict): %s on a stream of device %d was "
                    "given %s; a GPU's kernel reaches another device's memory only through "
                    "peer access, which the cuda backend enables for copies alone: copy the "
                    "operand to device %d first (be_ops.copy)",
                    strncmp(fn, "host_", 5) == 0 ? fn + 5 : fn, dev, what, dev);
}

/* The process whose first device call made the emulated context. As with
 * CUDA, a child forked after its parent made one cannot use the devices
 * (CUDA answers cudaErrorInitializationError): emulating the rule makes a
 * parent that touches devices before forking fail here, not first on a GPU. */
static _Atomic pid_t context_pid;

/* What dev names in a message: "device 3", or the host's pinned memory (DPS_HOST). */
static const char *place(int dev, char *buf, size_t len)
{
    if (dev == DPS_HOST) snprintf(buf, len, "pinned host memory");
    else snprintf(buf, len, "device %d", dev);
    return buf;
}

static dps_status host_context(int dev)
{
    pid_t me = getpid(), owner = 0;
    char where[32];
    if (atomic_compare_exchange_strong(&context_pid, &owner, me) || owner == me) return DPS_OK;
    return dps_fail(DPS_ERR_RUNTIME, "host backend: %s used in process %d, forked after "
                    "process %d had initialised the devices (CUDA forbids this: "
                    "cudaErrorInitializationError); use devices only in the forked processes",
                    place(dev, where, sizeof where), (int)me, (int)owner);
}

/* The cores the process may use, as they were before any thread was pinned. */
static cpu_set_t process_cores;
static pthread_once_t process_cores_once = PTHREAD_ONCE_INIT;

static void read_process_cores(void)
{
    if (sched_getaffinity(0, sizeof process_cores, &process_cores) != 0) CPU_ZERO(&process_cores);
}

/* The calling thread runs device dev's work on one core (the dev-th of the
 * process's cores, modulo their count), as a GPU's work runs on that GPU:
 * the scheduler moving ranks and workers between cores would be noise in
 * every timing. Best effort: a refusal leaves the thread where it was. */
static void pin_thread(int dev)
{
    static _Thread_local int pinned = -1;
    if (pinned == dev) return;
    pthread_once(&process_cores_once, read_process_cores);
    int n = CPU_COUNT(&process_cores), want = dev % (n ? n : 1);
    for (int c = 0, k = 0; n > 1 && c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &process_cores) || k++ != want) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0) pinned = dev;
        break;
    }
}

static dps_status host_set_device(backend *be, int dev)
{
    DPS_TRY(host_context(dev));
    if (!be->unpinned) pin_thread(dev);
    return DPS_OK;
}

static dps_status host_raw_alloc(backend *be, int dev, size_t bytes, void **p)
{
    (void)be;
    DPS_TRY(host_context(dev));
    if (dev != DPS_HOST && host_strict()) return host_devmem_alloc(dev, bytes, p);
    size_t rounded = (bytes + 63) & ~(size_t)63;
    *p = aligned_alloc(64, rounded);
    char size[32], where[32];
    if (!*p)
        return dps_fail(DPS_ERR_OOM, "host memory exhausted allocating %s of %s",
                        dps_fmt_bytes(bytes, size, sizeof size), place(dev, where, sizeof where));
    return DPS_OK;
}

static void host_raw_free(backend *be, int dev, void *p)
{
    (void)be; (void)dev;
    if (!host_devmem_free(p)) free(p);
}

static dps_status host_host_alloc(backend *be, size_t bytes, void **p)
{
    return host_raw_alloc(be, DPS_HOST, bytes ? bytes : 1, p);
}

static void host_host_free(backend *be, void *p) { (void)be; free(p); }

static dps_status host_stream_create(backend *be, int dev, be_stream **s)
{
    (void)be;
    DPS_TRY(host_context(dev));
    *s = calloc(1, sizeof **s);
    if (!*s) return dps_fail(DPS_ERR_RUNTIME, "out of host memory creating a stream");
    (*s)->dev = dev;
    return DPS_OK;
}

static void host_stream_destroy(backend *be, be_stream *s) { (void)be; free(s); }
static dps_status host_stream_sync(backend *be, be_stream *s)
{
    (void)be;
    HOST_STREAM(s);
    return DPS_OK;
}

static dps_status host_event_create(backend *be, int dev, be_event **e)
{
    (void)be;
    DPS_TRY(host_context(dev));
    *e = calloc(1, sizeof **e);
    if (!*e) return dps_fail(DPS_ERR_RUNTIME, "out of host memory creating an event");
    (*e)->dev = dev;
    return DPS_OK;
}

static void host_event_destroy(backend *be, be_event *e) { (void)be; free(e); }

static dps_status host_event_record(backend *be, be_event *e, be_stream *s)
{
    (void)be;
    HOST_STREAM(s);
    e->t_ms = dps_now_ms();
    e->recorded = 1;
    return DPS_OK;
}

static dps_status host_stream_wait(backend *be, be_stream *s, be_event *e)
{
    (void)be; (void)e;
    HOST_STREAM(s);
    return DPS_OK;
}

static dps_status host_event_sync(backend *be, be_event *e)
{
    (void)be; (void)e;
    return DPS_OK; /* host work is done when it is issued */
}

static void host_name_stream(backend *be, be_stream *s, const char *name)
{
    (void)be; (void)s; (void)name;
}

static void *host_native_stream(backend *be, be_stream *s)
{
    (void)be; (void)s;
    return NULL;
}

static dps_status host_peer_access(backend *be, int dev, int peer, int on)
{
    (void)be; (void)dev; (void)peer; (void)on;
    return dps_fail(DPS_WAIVED, "host backend: emulated devices share host memory, there is "
                    "no peer access to switch off");
}

static dps_status host_event_ms(backend *be, be_event *a, be_event *b, float *ms)
{
    (void)be;
    if (!a->recorded || !b->recorded)
        return dps_fail(DPS_ERR_RUNTIME, "host backend: elapsed time of an unrecorded event");
    *ms = (float)(b->t_ms - a->t_ms);
    return DPS_OK;
}

/* Strict mode: a copy's operand p is the memory its device index names,
 * host memory for DPS_HOST, else that device's own. A copy between two
 * devices needs no peer access (CUDA stages it through the host without). */
static dps_status copy_operand(const char *role, const void *p, int dev)
{
    int on = host_dev_of(p);
    if (on == dev || (dev == DPS_HOST && on < 0) || !host_strict()) return DPS_OK;
    char what[256], where[32];
    host_devmem_describe(p, what, sizeof what);
    return dps_fail(DPS_ERR_RUNTIME, "host backend (strict): a copy's %s is named %s but is %s; "
                    "name the device whose allocation it is (DPS_HOST for host memory)", role,
                    dev == DPS_HOST ? "host memory" : place(dev, where, sizeof where), what);
}

static dps_status host_copy(backend *be, be_stream *s, void *dst, int dst_dev,
                            const void *src, int src_dev, size_t bytes)
{
    (void)be;
    HOST_STREAM(s);
    HOST_STREAM(s);
    if (dps_escalated()) return dps_fail_escalated("a copy"); /* the step is being cut short */
    DPS_TRY(copy_operand("destination", dst, dst_dev));
    DPS_TRY(copy_operand("source", src, src_dev));
    if (bytes) memmove(host_dev_rw(dst), host_dev_rw(src), bytes);
    return DPS_OK;
}

static dps_status host_memset0(backend *be, be_stream *s, void *p, size_t bytes)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, p);
    if (bytes) memset(p, 0, bytes);
    return DPS_OK;
}

/* An fp32 operand stored as rows x cols at leading dimension ld: x itself,
 * or with tf32 a copy (*owned, the caller frees it) of its elements rounded
 * to TF32, as the tensor cores take them; NULL when out of memory. */
static const float *tf32_operand(const float *x, int rows, int cols, int ld, int tf32,
                                 float **owned)
{
    *owned = NULL;
    if (!tf32 || rows <= 0 || cols <= 0) return x;
    size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
    float *y = malloc(n * sizeof *y);
    if (!y) return NULL;
    for (size_t i = 0; i < n; i++) y[i] = dps_round_tf32(x[i]);
    return *owned = y;
}

static dps_status host_gemm_tf32(backend *be, be_stream *s, int on)
{
    (void)be;
    HOST_STREAM(s);
    s->tf32 = on != 0;
    return DPS_OK;
}

/* fp32, or with the stream's TF32 on (gemm_tf32) A and B rounded to TF32
 * and multiplied in fp32: TF32's products are exact in fp32 and the
 * tensor cores accumulate in fp32. */
static dps_status host_gemm(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                            float alpha, const float *a, int lda, const float *b, int ldb,
                            float beta, float *c, int ldc)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, c);
    if (dps_escalated()) return dps_fail_escalated("a GEMM"); /* the step is being cut short */
    float *oa, *ob;
    const float *ra = tf32_operand(a, ta ? k : m, ta ? m : k, lda, s->tf32, &oa);
    const float *rb = tf32_operand(b, tb ? n : k, tb ? k : n, ldb, s->tf32, &ob);
    dps_status rc = ra && rb ? host_sgemm(ta, tb, m, n, k, alpha, ra, lda, rb, ldb, beta, c, ldc)
                             : dps_fail(DPS_ERR_RUNTIME, "out of host memory rounding a %d x %d "
                                        "x %d GEMM's operands to TF32", m, n, k);
    free(oa);
    free(ob);
    return rc;
}

/* GELU, its derivative and the softmax's exp in arithmetic the compiler
 * vectorizes: libm's erff and expf are calls it cannot, and next to oneDNN's
 * GEMM they took a sixth of a medium step. Same functions as dps_gelu and
 * dps_gelu_grad (elementwise.h, which the GPU kernels use), as accurate
 * (within 2e-7 + 2.5e-7 |value| of them, test_backend host_math):
 *   Phi(x) = erfc(-x / sqrt 2) / 2 with erfc from the Chebyshev fit of
 *            Numerical Recipes' erfcc (fractional error below 1.2e-7 for
 *            every argument, so the tails keep their relative accuracy)
 *   exp    Cody-Waite reduction by ln 2 and Cephes' expf polynomial
 * Selections are integer masks: a float ?: stops GCC vectorizing under
 * -ftrapping-math. Where the compiler can, the loops are cloned for AVX2
 * and AVX-512 and picked by the CPU at load time. */
#ifdef DPS_HAVE_TARGET_CLONES
#define HOST_VECTOR_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define HOST_VECTOR_CLONES
#endif

typedef union { float f; int32_t i; } host_fbits;

/* mask (all ones or zero) ? a : b */
static inline float host_pick(int32_t mask, float a, float b)
{
    host_fbits ua = {a}, ub = {b}, r;
    r.i = (ua.i & mask) | (ub.i & ~mask);
    return r.f;
}

static inline float host_exp(float x)
{
    int32_t nan = -(int32_t)(x != x), under = -(int32_t)(x < -87.0f); /* below FLT_MIN: 0 */
    float xs = host_pick(-(int32_t)(x >= -87.0f), x, -87.0f); /* NaN too: in range for (int) */
    xs = host_pick(-(int32_t)(xs > 88.0f), 88.0f, xs);
    float n = (xs * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to integer */
    float r = (xs - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    host_fbits scale = {.i = ((int32_t)n + 127) * (1 << 23)};
    return host_pick(nan, x, host_pick(under, 0.0f, p * scale.f));
}

/* the standard normal CDF */
static inline float host_phi(float x)
{
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / (1.0f + 0.5f * z);
    float q = 0.17087277f;
    q = q * t - 0.82215223f;
    q = q * t + 1.48851587f;
    q = q * t - 1.13520398f;
    q = q * t + 0.27886807f;
    q = q * t - 0.18628806f;
    q = q * t + 0.09678418f;
    q = q * t + 0.37409196f;
    q = q * t + 1.00002368f;
    q = q * t - 1.26551223f;
    float half_erfc = 0.5f * t * host_exp(q - z * z); /* erfc(|x| / sqrt 2) / 2 */
    host_fbits xb = {x};
    return host_pick(xb.i >> 31, half_erfc, 1.0f - half_erfc); /* x < 0: the lower tail */
}

HOST_VECTOR_CLONES
static dps_status host_bias_act(backend *be, be_stream *s, int rows, int cols, float *pre,
                                const float *bias, float *out)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, pre); HOST_RW(s, bias); HOST_RW(s, out);
    for (int r = 0; r < rows; r++) {
        float *x = pre + (size_t)r * cols;
        for (int c = 0; c < cols; c++) x[c] += bias[c];
        if (out) {
            float *y = out + (size_t)r * cols;
            for (int c = 0; c < cols; c++) y[c] = x[c] * host_phi(x[c]);
        }
    }
    return DPS_OK;
}

HOST_VECTOR_CLONES
static void host_gelu(int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * host_phi(x[i]);
}

HOST_VECTOR_CLONES
static void host_gelu_bwd(int64_t n, const float *dh, const float *pre, float *dpre)
{
    for (int64_t i = 0; i < n; i++) {
        float x = pre[i];
        dpre[i] = dh[i] * (host_phi(x) + x * 0.39894228040143268f * host_exp(-0.5f * x * x));
    }
}

/* GELU (and softmax in its place) by the vectorized arithmetic above, the
 * others by dps_act itself. */
static dps_status host_act(backend *be, be_stream *s, int fn, int64_t n, const float *x, float *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, y);
    if (fn == DPS_ACT_GELU || fn == DPS_ACT_SOFTMAX) host_gelu(n, x, y);
    else
        for (int64_t i = 0; i < n; i++) y[i] = dps_act(fn, x[i]);
    return DPS_OK;
}

static dps_status host_act_bwd(backend *be, be_stream *s, int fn, int64_t n, const float *g,
                               const float *v, float *dx)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, g); HOST_RW(s, v); HOST_RW(s, dx);
    if (fn == DPS_ACT_GELU || fn == DPS_ACT_SOFTMAX) host_gelu_bwd(n, g, v, dx);
    else
        for (int64_t i = 0; i < n; i++) dx[i] = dps_act_bwd(fn, g[i], v[i]);
    return DPS_OK;
}

/* Run k's partial sums of columns [c0, c0 + n) into part, in the plan's
 * order (elementwise.h): lane l sums rows r0 + l, r0 + l + LANES, ... */
#define HOST_COLSUM_BLOCK 256
HOST_VECTOR_CLONES
static void host_col_sum_run(int r0, int r1, int cols, int c0, int n, const float *x, float *part)
{
    float lane[DPS_COLSUM_LANES][HOST_COLSUM_BLOCK];
    for (int l = 0; l < DPS_COLSUM_LANES; l++)
        for (int c = 0; c < n; c++) lane[l][c] = 0.0f;
    for (int r = r0; r < r1; r++) {
        const float *row = x + (size_t)r * cols + c0;
        float *acc = lane[(r - r0) % DPS_COLSUM_LANES];
        for (int c = 0; c < n; c++) acc[c] += row[c];
    }
    for (int c = 0; c < n; c++) part[c] = dps_col_sum_lanes(&lane[0][c], HOST_COLSUM_BLOCK);
}

/* The bias gradient, bit for bit what the CUDA kernel computes. */
static dps_status host_col_sum(backend *be, be_stream *s, int rows, int cols, const float *x,
                               float *out)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, out);
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, cols);
    float part[HOST_COLSUM_BLOCK];
    for (int c0 = 0; c0 < cols; c0 += HOST_COLSUM_BLOCK) {
        int n = cols - c0 < HOST_COLSUM_BLOCK ? cols - c0 : HOST_COLSUM_BLOCK;
        for (int c = 0; c < n; c++) out[c0 + c] = 0.0f;
        for (int k = 0; k < p.chunks; k++) {
            int r0 = k * p.chunk_rows, r1 = r0 + p.chunk_rows < rows ? r0 + p.chunk_rows : rows;
            host_col_sum_run(r0, r1, cols, c0, n, x, part);
            for (int c = 0; c < n; c++) out[c0 + c] = k ? out[c0 + c] + part[c] : part[c];
        }
    }
    return DPS_OK;
}

static dps_status host_gelu_bwd_col_sum(backend *be, be_stream *s, int rows, int cols,
                                        const float *dh, const float *pre, float *dpre, float *db)
{
    HOST_STREAM(s);
    HOST_RW(s, dh); HOST_RW(s, pre); HOST_RW(s, dpre); HOST_RW(s, db);
    host_gelu_bwd((int64_t)rows * cols, dh, pre, dpre);
    return host_col_sum(be, s, rows, cols, dpre, db);
}

HOST_VECTOR_CLONES
static dps_status host_xent(backend *be, be_stream *s, int rows, int classes,
                            const float *logits, const int32_t *labels, float scale,
                            float *dlogits, float *row_loss)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, logits); HOST_RW(s, labels); HOST_RW(s, dlogits); HOST_RW(s, row_loss);
    for (int r = 0; r < rows; r++) {
        const float *x = logits + (size_t)r * classes;
        float *dx = dlogits + (size_t)r * classes;
        float mx = -INFINITY, sum = 0.0f;
        for (int c = 0; c < classes; c++) mx = fmaxf(mx, x[c]);
        for (int c = 0; c < classes; c++) dx[c] = host_exp(x[c] - mx);
        for (int c = 0; c < classes; c++) sum += dx[c];
        int label = labels[r];
        float at_label = dx[label];
        for (int c = 0; c < classes; c++) dx[c] = dx[c] / sum * scale;
        dx[label] = (at_label / sum - 1.0f) * scale;
        row_loss[r] = logf(sum) + mx - x[label];
    }
    return DPS_OK;
}

static dps_status host_log_softmax(backend *be, be_stream *s, int rows, int classes,
                                   const float *logits, float *logp)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, logits); HOST_RW(s, logp);
    for (int r = 0; r < rows; r++) {
        const float *x = logits + (size_t)r * classes;
        float *y = logp + (size_t)r * classes;
        float mx = -INFINITY, sum = 0.0f;
        for (int c = 0; c < classes; c++) mx = fmaxf(mx, x[c]);
        for (int c = 0; c < classes; c++) sum += expf(x[c] - mx);
        float lse = logf(sum) + mx;
        for (int c = 0; c < classes; c++) y[c] = x[c] - lse;
    }
    return DPS_OK;
}

static dps_status host_nll(backend *be, be_stream *s, int rows, int classes, const float *logp,
                           const int32_t *labels, float scale, float *row_loss, float *dlogp)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, logp); HOST_RW(s, labels); HOST_RW(s, row_loss); HOST_RW(s, dlogp);
    memset(dlogp, 0, (size_t)rows * (size_t)classes * sizeof(float));
    for (int r = 0; r < rows; r++) {
        row_loss[r] = -logp[(size_t)r * classes + labels[r]];
        dlogp[(size_t)r * classes + labels[r]] = -scale;
    }
    return DPS_OK;
}

static dps_status host_log_softmax_bwd(backend *be, be_stream *s, int rows, int classes,
                                       const float *logp, const float *dlogp, float *dlogits)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, logp); HOST_RW(s, dlogp); HOST_RW(s, dlogits);
    for (int r = 0; r < rows; r++) {
        const float *y = logp + (size_t)r * classes, *dy = dlogp + (size_t)r * classes;
        float *dx = dlogits + (size_t)r * classes, sum = 0.0f;
        for (int c = 0; c < classes; c++) sum += dy[c];
        for (int c = 0; c < classes; c++) dx[c] = dy[c] - expf(y[c]) * sum;
    }
    return DPS_OK;
}

static dps_status host_sum(backend *be, be_stream *s, int64_t n, const float *x, float *out)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, out);
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += x[i];
    *out = (float)acc;
    return DPS_OK;
}

static dps_status host_sgd(backend *be, be_stream *s, int64_t n, float *p, const float *g,
                           float *buf, dps_opt_hparams h)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, p); HOST_RW(s, g); HOST_RW(s, buf);
    for (int64_t i = 0; i < n; i++) dps_sgd_update(&p[i], g[i], &buf[i], h);
    return DPS_OK;
}

static dps_status host_adamw(backend *be, be_stream *s, int64_t n, float *p, const float *g,
                             float *m, float *v, dps_opt_hparams h)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, p); HOST_RW(s, g); HOST_RW(s, m); HOST_RW(s, v);
    for (int64_t i = 0; i < n; i++) dps_adamw_update(&p[i], g[i], &m[i], &v[i], h);
    return DPS_OK;
}

static dps_status host_scale(backend *be, be_stream *s, int64_t n, float *x, float a)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x);
    for (int64_t i = 0; i < n; i++) x[i] *= a;
    return DPS_OK;
}

static dps_status host_scale_copy(backend *be, be_stream *s, int64_t n, float *dst,
                                  const float *src, float a)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, dst); HOST_RW(s, src);
    for (int64_t i = 0; i < n; i++) dst[i] = dps_scale_copy(src[i], a);
    return DPS_OK;
}

/* The autocast ops, emulated exactly on the CPU: operands widened to fp32
 * (an fp32 A or B beside a half one rounded to its type first, as the CUDA
 * backend casts it), the fp32 GEMM, its output rounded once. */
static float *widened(const void *x, be_dtype t, be_dtype round_to, size_t n, float **owned)
{
    *owned = NULL;
    if (t == BE_F32 && round_to == BE_F32) return (float *)x;
    float *y = malloc((n ? n : 1) * sizeof(float));
    if (!y) return NULL;
    int f16 = (t == BE_F32 ? round_to : t) == BE_F16;
    for (size_t i = 0; i < n; i++)
        y[i] = t != BE_F32 ? dps_from_half(((const uint16_t *)x)[i], f16)
                           : dps_from_half(dps_to_half(((const float *)x)[i], f16), f16);
    return *owned = y;
}

/* The elements a rows x cols matrix on a leading dimension ld spans (a
 * group's columns of a wider matrix end before its last row's stride). */
static size_t extent(int rows, int cols, int ld)
{
    return rows > 0 && cols > 0 ? (size_t)(rows - 1) * (size_t)ld + (size_t)cols : 0;
}

static dps_status host_gemm_ex(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                               float alpha, const void *a, be_dtype at, int lda, const void *b,
                               be_dtype bt, int ldb, float beta, void *c, be_dtype ct, int ldc)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, c);
    if (m <= 0 || n <= 0) return DPS_OK;
    be_dtype ht;
    DPS_TRY(be_gemm_half_type(at, bt, ct, &ht));
    if (ht == BE_F32) /* fp32 A, B and C: gemm's, TF32 included */
        return host_gemm(be, s, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    float *oa, *ob, *oc;
    size_t nc = (size_t)(m - 1) * (size_t)ldc + (size_t)n;
    float *fa = widened(a, at, ht, extent(ta ? k : m, ta ? m : k, lda), &oa);
    float *fb = widened(b, bt, ht, extent(tb ? n : k, tb ? k : n, ldb), &ob);
    float *fc = widened(c, ct, BE_F32, nc, &oc);
    dps_status rc = fa && fb && fc ? host_sgemm(ta, tb, m, n, k, alpha, fa, lda, fb, ldb, beta, fc, ldc)
                                   : dps_fail(DPS_ERR_RUNTIME, "out of host memory widening "
                                              "half GEMM operands (%d x %d x %d)", m, n, k);
    for (size_t i = 0; !rc && oc && i < nc; i++)
        ((uint16_t *)c)[i] = dps_to_half(oc[i], ct == BE_F16);
    free(oa);
    free(ob);
    free(oc);
    return rc;
}

static dps_status host_cast(backend *be, be_stream *s, int64_t n, const void *x, be_dtype xt,
                            void *y, be_dtype yt)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, y);
    for (int64_t i = 0; i < n; i++) {
        float v = xt == BE_F32 ? ((const float *)x)[i]
                               : dps_from_half(((const uint16_t *)x)[i], xt == BE_F16);
        if (yt == BE_F32) ((float *)y)[i] = v;
        else ((uint16_t *)y)[i] = xt == yt ? ((const uint16_t *)x)[i] : dps_to_half(v, yt == BE_F16);
    }
    return DPS_OK;
}

/* addmm: the GEMM's fp32 product (in C itself when C is fp32, else in a
 * temporary of this call's, which the GPU has no counterpart of: cuBLASLt
 * adds the bias before it stores C), the bias added, one rounding. */
static dps_status host_gemm_bias(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                                 const void *a, be_dtype at, int lda, const void *b, be_dtype bt,
                                 int ldb, const void *bias, void *c, be_dtype ct, int ldc)
{
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, bias); HOST_RW(s, c);
    if (dps_escalated()) return dps_fail_escalated("a GEMM"); /* the step is being cut short */
    if (m <= 0 || n <= 0) return DPS_OK;
    if (ct == BE_F32) {
        DPS_TRY(host_gemm_ex(be, s, ta, tb, m, n, k, 1.0f, a, at, lda, b, bt, ldb, 0.0f, c, ct, ldc));
        for (int r = 0; r < m; r++) {
            float *row = (float *)c + (size_t)r * (size_t)ldc;
            for (int j = 0; j < n; j++) row[j] += ((const float *)bias)[j];
        }
        return DPS_OK;
    }
    be_dtype ht;
    DPS_TRY(be_gemm_half_type(at, bt, ct, &ht));
    size_t nc = (size_t)m * (size_t)n;
    float *acc = aligned_alloc(64, (nc * sizeof(float) + 63) & ~(size_t)63);
    if (!acc) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for a %d x %d GEMM's product", m, n);
    dps_status rc = host_gemm_ex(be, s, ta, tb, m, n, k, 1.0f, a, at, lda, b, bt, ldb, 0.0f, acc,
                                 BE_F32, n);
    const uint16_t *b16 = bias;
    for (int r = 0; !rc && r < m; r++) {
        uint16_t *row = (uint16_t *)c + (size_t)r * (size_t)ldc;
        for (int j = 0; j < n; j++)
            row[j] = dps_add_bias_half(acc[(size_t)r * n + j], b16[j], ct == BE_F16);
    }
    free(acc);
    return rc;
}

static dps_status host_act_half(backend *be, be_stream *s, int fn, be_dtype ht, int64_t n,
                                const uint16_t *x, uint16_t *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, y);
    for (int64_t i = 0; i < n; i++) y[i] = dps_act_half(fn, x[i], ht == BE_F16);
    return DPS_OK;
}

static dps_status host_act_bwd_half(backend *be, be_stream *s, int fn, be_dtype ht, int64_t n,
                                    const uint16_t *g, const uint16_t *v, uint16_t *dx)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, g); HOST_RW(s, v); HOST_RW(s, dx);
    for (int64_t i = 0; i < n; i++) dx[i] = dps_act_bwd_half(fn, g[i], v[i], ht == BE_F16);
    return DPS_OK;
}

static dps_status host_col_sum_half(backend *be, be_stream *s, be_dtype ht, int rows, int cols,
                                    const uint16_t *x, float *out)
{
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, out);
    float *owned;
    size_t n = (size_t)rows * (size_t)cols;
    const float *fx = widened(x, ht, BE_F32, n, &owned);
    if (!fx) return dps_fail(DPS_ERR_RUNTIME, "out of host memory widening a %d x %d half matrix",
                             rows, cols);
    dps_status rc = host_col_sum(be, s, rows, cols, fx, out);
    free(owned);
    return rc;
}

static dps_status host_col_sum_add(backend *be, be_stream *s, be_dtype xt, be_dtype rt, int rows,
                                   int cols, int64_t ld, const void *x, float *out)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, out);
    host_col_sum_add_run(xt, rt, rows, cols, ld, x, out);
    return DPS_OK;
}

static dps_status host_norm_bwd(backend *be, be_stream *s, be_dtype xt, be_dtype rt, int rows,
                                int cols, const float *g, const void *x, const float *gamma,
                                float *dx, float *dgamma, float *dbeta)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, g); HOST_RW(s, x); HOST_RW(s, gamma); HOST_RW(s, dx); HOST_RW(s, dgamma);
    HOST_RW(s, dbeta);
    host_norm_bwd_run(xt, rt, rows, cols, g, x, gamma, dx, dgamma, dbeta);
    return DPS_OK;
}

static dps_status host_add_round(backend *be, be_stream *s, be_dtype rt, int64_t n, float *dst,
                                 const float *src)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, dst); HOST_RW(s, src);
    host_add_round_run(rt, n, dst, src);
    return DPS_OK;
}

static dps_status host_gelu_bwd_col_sum_half(backend *be, be_stream *s, be_dtype ht, int rows,
                                             int cols, const uint16_t *dh, const uint16_t *pre,
                                             uint16_t *dpre, float *db)
{
    HOST_STREAM(s);
    HOST_RW(s, dh); HOST_RW(s, pre); HOST_RW(s, dpre); HOST_RW(s, db);
    DPS_TRY(host_act_bwd_half(be, s, DPS_ACT_GELU, ht, (int64_t)rows * cols, dh, pre, dpre));
    return host_col_sum_half(be, s, ht, rows, cols, dpre, db);
}

static dps_status host_unscale(backend *be, be_stream *s, int64_t n, float *g, float inv_scale,
                               float *found_inf)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, g); HOST_RW(s, found_inf);
    int found = 0;
    for (int64_t i = 0; i < n; i++) g[i] = dps_unscale(g[i], inv_scale, &found);
    if (found) *found_inf = 1.0f;
    return DPS_OK;
}

/* The stream is the calling thread: it is kept busy (a sleep would give
 * the core away and stretch by the scheduler's whim). */
static dps_status host_attn(backend *be, be_stream *s, const be_attn *a, const void *qkv,
                            void *out, float *lse)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, qkv); HOST_RW(s, out); HOST_RW(s, lse);
    return host_attn_fwd(a, qkv, out, lse);
}

static dps_status host_attn_bwd_op(backend *be, be_stream *s, const be_attn *a, const void *qkv,
                                   const void *out, const float *lse, const void *dout, void *dqkv)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, qkv); HOST_RW(s, out); HOST_RW(s, lse); HOST_RW(s, dout); HOST_RW(s, dqkv);
    return host_attn_bwd(a, qkv, out, lse, dout, dqkv);
}

static dps_status host_spin(backend *be, be_stream *s, double us)
{
    (void)be;
    HOST_STREAM(s);
    double end = dps_now_ms() + us * 1e-3;
    while (dps_now_ms() < end)
        if (dps_escalated()) return dps_fail_escalated("the rest of --inject-slowdown's spin");
    return DPS_OK;
}

static dps_status host_add(backend *be, be_stream *s, int64_t n, float *dst, const float *src)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, dst); HOST_RW(s, src);
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    return DPS_OK;
}

static dps_status host_add_ex(backend *be, be_stream *s, int64_t n, const void *a, be_dtype at,
                              const void *b, be_dtype bt, void *y, be_dtype yt)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, y);
    for (int64_t i = 0; i < n; i++)
        dps_store_as(y, i, (int)yt, dps_load_as(a, i, (int)at) + dps_load_as(b, i, (int)bt));
    return DPS_OK;
}

static dps_status host_round_half(backend *be, be_stream *s, be_dtype ht, int64_t n, float *x)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x);
    for (int64_t i = 0; i < n; i++) x[i] = dps_round_half(x[i], ht == BE_F16);
    return DPS_OK;
}

static dps_status host_resample_half(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                                     int64_t n_out, const uint16_t *x, uint16_t *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, y);
    for (int64_t r = 0; r < samples; r++)
        for (int64_t i = 0; i < n_out; i += n_in) {
            int64_t len = n_out - i < n_in ? n_out - i : n_in;
            memcpy(y + r * n_out + i, x + r * n_in, (size_t)len * sizeof *y);
        }
    return DPS_OK;
}

static dps_status host_resample(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                                int64_t n_out, const float *x, float *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, y);
    for (int64_t r = 0; r < samples; r++) /* n_in elements at a time: y[i] = x[i mod n_in] */
        for (int64_t i = 0; i < n_out; i += n_in) {
            int64_t len = n_out - i < n_in ? n_out - i : n_in;
            memcpy(y + r * n_out + i, x + r * n_in, (size_t)len * sizeof(float));
        }
    return DPS_OK;
}

static dps_status host_resample_bwd(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                                    int64_t n_out, const float *dy, float *dx)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, dy); HOST_RW(s, dx);
    for (int64_t r = 0; r < samples; r++) { /* dx[j] = the sum of dy[j + c n_in], c in order */
        float *out = dx + r * n_in;
        const float *in = dy + r * n_out;
        for (int64_t j = 0; j < n_in; j++) out[j] = j < n_out ? in[j] : 0.0f;
        for (int64_t i = n_in; i < n_out; i += n_in) {
            int64_t len = n_out - i < n_in ? n_out - i : n_in;
            for (int64_t j = 0; j < len; j++) out[j] += in[i + j];
        }
    }
    return DPS_OK;
}

/* A windowed resample (backend.h's window): each output element from
 * windowed.h, a max pool's index beside it. */
static dps_status host_window(backend *be, be_stream *s, const dps_window *w, int64_t samples,
                              be_dtype t, const void *x, void *y, int64_t *idx)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, y); HOST_RW(s, idx);
    int64_t n_in = dps_window_in_elems(w), n_out = dps_window_out_elems(w), arg = 0;
    size_t eb = be_dtype_bytes(t);
    for (int64_t r = 0; r < samples; r++) {
        const char *xs = (const char *)x + (size_t)(r * n_in) * eb;
        void *ys = (char *)y + (size_t)(r * n_out) * eb;
        for (int64_t i = 0; i < n_out; i++) {
            dps_store_as(ys, i, (int)t, dps_window_at(w, xs, (int)t, i, &arg));
            if (idx) idx[r * n_out + i] = arg;
        }
    }
    return DPS_OK;
}

/* Its gradient: a max pool's scattered through its indices in the outputs'
 * order, as max_pool2d's backward; the others gathered (windowed.h). */
static dps_status host_window_bwd(backend *be, be_stream *s, const dps_window *w, int64_t samples,
                                  const float *dy, const int64_t *idx, float *dx)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, dy); HOST_RW(s, idx); HOST_RW(s, dx);
    int64_t n_in = dps_window_in_elems(w), n_out = dps_window_out_elems(w);
    for (int64_t r = 0; r < samples; r++) {
        const float *g = dy + r * n_out;
        float *d = dx + r * n_in;
        if (w->pool != DPS_POOL_MAX) {
            for (int64_t j = 0; j < n_in; j++) d[j] = dps_window_grad_at(w, g, NULL, j);
            continue;
        }
        memset(d, 0, (size_t)n_in * sizeof *d);
        for (int64_t i = 0; i < n_out; i++) d[idx[r * n_out + i] * w->c + i % w->c] += g[i];
    }
    return DPS_OK;
}

static dps_status host_col_scale(backend *be, be_stream *s, int64_t rows, int cols, const float *x,
                                 const float *g, float *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, g); HOST_RW(s, y);
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) y[r * cols + c] = x[r * cols + c] * g[c];
    return DPS_OK;
}

/* dps_norm_affine on fp32 rows, a loop the compiler vectorizes */
HOST_VECTOR_CLONES
static void host_norm_fwd_f32(int rows, int cols, const float *x, const float *gamma,
                              const float *beta, float *y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            y[r * cols + c] = dps_norm_affine(x[r * cols + c], gamma, beta, c);
}

static dps_status host_norm_fwd(backend *be, be_stream *s, be_dtype xt, be_dtype yt, int rows,
                                int cols, const void *x, const float *gamma, const float *beta,
                                void *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, gamma); HOST_RW(s, beta); HOST_RW(s, y);
    if (xt == BE_F32 && yt == BE_F32) {
        host_norm_fwd_f32(rows, cols, x, gamma, beta, y);
        return DPS_OK;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            dps_store_as(y, i, (int)yt, dps_norm_affine(dps_load_as(x, i, (int)xt), gamma, beta, c));
        }
    return DPS_OK;
}

static dps_status host_mul(backend *be, be_stream *s, int64_t n, const float *a, const float *b,
                           float *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, y);
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
    return DPS_OK;
}

static dps_status host_row_scale(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                 const float *x, const float *sc, float *y)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, sc); HOST_RW(s, y);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = x[r * cols + c] * sc[r];
    return DPS_OK;
}

static dps_status host_row_dot_add(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                   const float *a, const float *b, float *out)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, out);
    for (int64_t r = 0; r < rows; r++) {
        float acc = 0.0f;
        for (int64_t c = 0; c < cols; c++) acc += a[r * cols + c] * b[r * cols + c];
        out[r] += acc;
    }
    return DPS_OK;
}

static dps_status host_row_scale_ex(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                    const void *x, be_dtype xt, const void *sc, be_dtype sct,
                                    void *y, be_dtype yt)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, sc); HOST_RW(s, y);
    for (int64_t r = 0; r < rows; r++) {
        float v = dps_load_as(sc, r, (int)sct);
        for (int64_t c = 0; c < cols; c++)
            dps_store_as(y, r * cols + c, (int)yt, dps_load_as(x, r * cols + c, (int)xt) * v);
    }
    return DPS_OK;
}

static dps_status host_pixel_scale_ex(backend *be, be_stream *s, int64_t rows, int64_t pixels,
                                      int64_t cols, const void *x, be_dtype xt, const void *sc,
                                      be_dtype sct, void *y, be_dtype yt)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, x); HOST_RW(s, sc); HOST_RW(s, y);
    for (int64_t t = 0; t < rows * pixels * cols; t++)
        dps_store_as(y, t, (int)yt, dps_load_as(x, t, (int)xt) *
                                    dps_load_as(sc, t / (pixels * cols) * cols + t % cols, (int)sct));
    return DPS_OK;
}

static dps_status host_pixel_dot_add_ex(backend *be, be_stream *s, int64_t rows, int64_t pixels,
                                        int64_t cols, const float *a, const void *b, be_dtype bt,
                                        be_dtype pt, be_dtype rt, float *out)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, out);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < pixels; p++) {
                int64_t t = (r * pixels + p) * cols + c;
                acc += dps_round_as(a[t] * dps_load_as(b, t, (int)bt), (int)pt);
            }
            out[r * cols + c] += dps_round_as(acc, (int)rt);
        }
    return DPS_OK;
}

static dps_status host_cat_cols(backend *be, be_stream *s, int64_t rows, int64_t ca, const void *a,
                                be_dtype at, int64_t cb, const void *b, be_dtype bt, void *y,
                                be_dtype yt)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, y);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < ca; c++)
            dps_store_as(y, r * (ca + cb) + c, (int)yt, dps_load_as(a, r * ca + c, (int)at));
        for (int64_t c = 0; c < cb; c++)
            dps_store_as(y, r * (ca + cb) + ca + c, (int)yt, dps_load_as(b, r * cb + c, (int)bt));
    }
    return DPS_OK;
}

static dps_status host_cat_cols_bwd(backend *be, be_stream *s, int64_t rows, int64_t ca, int64_t cb,
                                    const float *g, float *da, be_dtype dat, float *db, be_dtype dbt)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, g); HOST_RW(s, da); HOST_RW(s, db);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; da && c < ca; c++)
            da[r * ca + c] += dps_round_as(g[r * (ca + cb) + c], (int)dat);
        for (int64_t c = 0; db && c < cb; c++)
            db[r * cb + c] += dps_round_as(g[r * (ca + cb) + ca + c], (int)dbt);
    }
    return DPS_OK;
}

static dps_status host_row_dot_add_ex(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                      const float *a, const void *b, be_dtype bt, be_dtype pt,
                                      be_dtype rt, float *out)
{
    (void)be;
    HOST_STREAM(s);
    HOST_RW(s, a); HOST_RW(s, b); HOST_RW(s, out);
    for (int64_t r = 0; r < rows; r++) {
        float acc = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            acc += dps_round_as(a[r * cols + c] * dps_load_as(b, r * cols + c, (int)bt), (int)pt);
        out[r] += dps_round_as(acc, (int)rt);
    }
    return DPS_OK;
}

static dps_status host_mem_used(backend *be, int dev, size_t *used)
{
    pthread_mutex_lock(&be->mem_lock);
    *used = be->mem[dev].in_use;
    pthread_mutex_unlock(&be->mem_lock);
    return DPS_OK;
}

static dps_status host_profile(backend *be, int on) { (void)be; (void)on; return DPS_OK; }

static void host_destroy(backend *be)
{
    pthread_mutex_destroy(&be->mem_lock);
    free(be);
}

/* The GEMM library; the CUDA fields are be_versions' to fill. */
static void host_versions(const backend *be, be_version_info *v)
{
    host_sgemm_library(v->blas, sizeof v->blas);
}

static const be_ops host_ops = {
    .name = "host",
    .set_device = host_set_device,
    .raw_alloc = host_raw_alloc,
    .raw_free = host_raw_free,
    .host_alloc = host_host_alloc,
    .host_free = host_host_free,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .stream_wait = host_stream_wait,
    .event_sync = host_event_sync,
    .name_stream = host_name_stream,
    .native_stream = host_native_stream,
    .peer_access = host_peer_access,
    .event_ms = host_event_ms,
    .copy = host_copy,
    .memset0 = host_memset0,
    .gemm = host_gemm,
    .gemm_tf32 = host_gemm_tf32,
    .bias_act = host_bias_act,
    .act = host_act,
    .act_bwd = host_act_bwd,
    .col_sum = host_col_sum,
    .gelu_bwd_col_sum = host_gelu_bwd_col_sum,
    .xent = host_xent,
    .log_softmax = host_log_softmax,
    .nll = host_nll,
    .log_softmax_bwd = host_log_softmax_bwd,
    .sum = host_sum,
    .sgd = host_sgd,
    .adamw = host_adamw,
    .scale = host_scale,
    .scale_copy = host_scale_copy,
    .gemm_ex = host_gemm_ex,
    .cast = host_cast,
    .gemm_bias = host_gemm_bias,
    .add_ex = host_add_ex,
    .round_half = host_round_half,
    .resample_half = host_resample_half,
    .act_half = host_act_half,
    .act_bwd_half = host_act_bwd_half,
    .col_sum_half = host_col_sum_half,
    .gelu_bwd_col_sum_half = host_gelu_bwd_col_sum_half,
    .unscale = host_unscale,
    .attn = host_attn,
    .attn_bwd = host_attn_bwd_op,
    .add = host_add,
    .resample = host_resample,
    .resample_bwd = host_resample_bwd,
    .window = host_window,
    .window_bwd = host_window_bwd,
    .col_scale = host_col_scale,
    .norm_fwd = host_norm_fwd,
    .mul = host_mul,
    .row_scale = host_row_scale,
    .row_dot_add = host_row_dot_add,
    .row_scale_ex = host_row_scale_ex,
    .row_dot_add_ex = host_row_dot_add_ex,
    .col_sum_add = host_col_sum_add,
    .norm_bwd = host_norm_bwd,
    .add_round = host_add_round,
    .pixel_scale_ex = host_pixel_scale_ex,
    .pixel_dot_add_ex = host_pixel_dot_add_ex,
    .cat_cols = host_cat_cols,
    .cat_cols_bwd = host_cat_cols_bwd,
    .spin = host_spin,
    .profile = host_profile,
    .mem_used = host_mem_used,
    .versions = host_versions,
    .destroy = host_destroy,
};

static void cpu_model(char *buf, size_t len)
{
    dps_strlcpy(buf, "CPU", len);
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += 1 + (colon[1] == ' ');
            colon[strcspn(colon, "\n")] = '\0';
            dps_strlcpy(buf, colon, len);
            break;
        }
    }
    fclose(f);
}

dps_status be_host_open(const be_options *opt, backend **out)
{
    backend *be = calloc(1, sizeof *be);
    if (!be) return dps_fail(DPS_ERR_RUNTIME, "out of host memory opening the host backend");
    be->ops = &host_ops;
    be->kind = BE_HOST;
    be->emulated = 1;
    be->ndev = opt->host_devices > 0 ? opt->host_devices : 8;
    be->unpinned = opt->unpinned;
    pthread_once(&process_cores_once, read_process_cores);
    be->host_cores = CPU_COUNT(&process_cores) > 0 ? CPU_COUNT(&process_cores) : 1;
    if (be->ndev > DPS_MAX_DEVICES) be->ndev = DPS_MAX_DEVICES;
    pthread_mutex_init(&be->mem_lock, NULL);
    host_sgemm_init(); /* one thread per emulated device */
    char cpu[96];
    cpu_model(cpu, sizeof cpu);
    for (int d = 0; d < be->ndev; d++) {
        snprintf(be->info[d].name, sizeof be->info[d].name, "emulated device on %s", cpu);
        snprintf(be->info[d].bus_id, sizeof be->info[d].bus_id, "host:%d", d);
        be->info[d].total_bytes = opt->device_mem;
        be->mem[d].capacity = opt->device_mem;
    }
    if (be_strict_wanted()) {
        dps_status rc = strict_wrap(be);
        if (rc) {
            host_destroy(be);
            return rc;
        }
    }
    *out = be;
    return DPS_OK;
}
