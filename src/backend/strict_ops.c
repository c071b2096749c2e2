/* Strict mode's table: each be_ops entry declares what it reads and writes
 * (pointer, bytes, device: one ISSUE line an op), which strict.c checks as
 * CUDA would and orders against the other streams' accesses; then the
 * wrapped backend's op is queued (DEFER's closure, ENQUEUE) on its
 * stream's worker (strict_queue.c), which runs it after the stream's
 * earlier work, concurrently with the host and the other streams. */
#include <stdint.h>

#include "backend/strict.h"
#include "windowed.h"

/* Bytes of a x b x c elements of eb bytes; -1 (refused as a negative size)
 * when a dimension is negative. */
static int64_t span(int64_t a, int64_t b, int64_t c, size_t eb)
{
    if (a < 0 || b < 0 || c < 0) return -1;
    return a * b * c * (int64_t)eb;
}

/* Bytes a rows x cols matrix at leading dimension ld spans. */
static int64_t mat(int64_t rows, int64_t cols, int64_t ld, size_t eb)
{
    if (rows < 0 || cols < 0 || ld < 0) return -1;
    return rows && cols ? ((rows - 1) * ld + cols) * (int64_t)eb : 0;
}

#define F4 sizeof(float)
#define H2 sizeof(uint16_t)
#define TB(t) be_dtype_bytes(t)
#define ACC(p, n, dev, w) ((be_access){(p), (n), (dev), (w)})
#define RD(p, n) ACC((p), (n), BE_ON_STREAM, 0)
#define WR(p, n) ACC((p), (n), BE_ON_STREAM, 1)
#define OPT_RD(p, n) RD((p), (p) ? (n) : 0) /* an operand that may be NULL */
#define OPT_WR(p, n) WR((p), (p) ? (n) : 0)

/* Declares the op's operands on stream s and leaves the wrapped backend's
 * stream in in_; returns the failure when the declaration breaks a rule. */
#define ISSUE(op, ...)                                                              \
    be_stream *in_;                                                                 \
    do {                                                                            \
        const be_access acc_[] = {__VA_ARGS__};                                     \
        DPS_TRY(strict_issue(be, s, op, acc_, (int)(sizeof acc_ / sizeof acc_[0]), &in_)); \
    } while (0)
#define ISSUE0(op)                                                                  \
    be_stream *in_;                                                                 \
    DPS_TRY(strict_issue(be, s, op, NULL, 0, &in_))
#define INNER strict_inner(be)

/* The op's closure: its arguments' struct name_args (descriptors passed by
 * pointer held by value) and run_name, which calls the wrapped op with
 * them on the stream's worker. */
#define DEFER(name, fields, call)                                                  \
    typedef struct { fields } name##_args;                                         \
    static dps_status run_##name(backend *be, be_stream *in_, const void *args_)   \
    {                                                                              \
        const name##_args *p_ = args_;                                             \
        return INNER->name call;                                                   \
    }
/* Queues the op, its checks passed, on its stream's worker with a copy of
 * its arguments; *ticket: the point of the queue where it completes. */
#define ENQUEUE_AT(name, ticket, ...)                                              \
    strict_enqueue(be, s, in_, #name, run_##name, &(const name##_args){__VA_ARGS__}, \
                   sizeof(name##_args), (ticket))
#define ENQUEUE(name, ...) ENQUEUE_AT(name, NULL, __VA_ARGS__)

dps_status strict_wrap(backend *be)
{
    be->strict = strict_state_new(be->ops);
    if (!be->strict) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for strict mode's "
                                     "registries");
    be->ops = &strict_ops;
    return DPS_OK;
}

static dps_status s_set_device(backend *be, int dev) { return INNER->set_device(be, dev); }

static dps_status s_peer_access(backend *be, int dev, int peer, int on)
{
    return INNER->peer_access(be, dev, peer, on);
}

DEFER(copy, void *dst; int dst_dev; const void *src; int src_dev; size_t bytes;,
      (be, in_, p_->dst, p_->dst_dev, p_->src, p_->src_dev, p_->bytes))
/* A copy's stream is of one of its ends' devices; host memory may be
 * pinned (ordered like a device's, the copy asynchronous) or pageable
 * (the host waits for the copy, as cudaMemcpyAsync makes it). */
static dps_status s_copy(backend *be, be_stream *s, void *dst, int dst_dev, const void *src,
                         int src_dev, size_t bytes)
{
    DPS_TRY(strict_copy_stream(be, s, dst_dev, src_dev));
    ISSUE("copy", ACC(dst, (int64_t)bytes, dst_dev, 1), ACC(src, (int64_t)bytes, src_dev, 0));
    uint64_t t;
    DPS_TRY(ENQUEUE_AT(copy, &t, dst, dst_dev, src, src_dev, bytes));
    return strict_copy_sync(be, s, t, dst, dst_dev, src, src_dev);
}

DEFER(memset0, void *p; size_t bytes;,
      (be, in_, p_->p, p_->bytes))
static dps_status s_memset0(backend *be, be_stream *s, void *p, size_t bytes)
{
    ISSUE("memset0", WR(p, (int64_t)bytes));
    return ENQUEUE(memset0, p, bytes);
}

DEFER(gemm, int ta; int tb; int m; int n; int k; float alpha; const float *a; int lda;
      const float *b; int ldb; float beta; float *c; int ldc;,
      (be, in_, p_->ta, p_->tb, p_->m, p_->n, p_->k, p_->alpha, p_->a, p_->lda, p_->b, p_->ldb,
       p_->beta, p_->c, p_->ldc))
static dps_status s_gemm(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                         float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                         float *c, int ldc)
{
    ISSUE("gemm", RD(a, mat(ta ? k : m, ta ? m : k, lda, F4)),
          RD(b, mat(tb ? n : k, tb ? k : n, ldb, F4)), WR(c, mat(m, n, ldc, F4)),
          RD(NULL, span(k, 1, 1, 1) < 0 ? -1 : 0));
    return ENQUEUE(gemm, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

DEFER(gemm_tf32, int on;,
      (be, in_, p_->on))
static dps_status s_gemm_tf32(backend *be, be_stream *s, int on)
{
    ISSUE0("gemm_tf32");
    return ENQUEUE(gemm_tf32, on);
}

DEFER(bias_act, int rows; int cols; float *pre; const float *bias; float *out;,
      (be, in_, p_->rows, p_->cols, p_->pre, p_->bias, p_->out))
static dps_status s_bias_act(backend *be, be_stream *s, int rows, int cols, float *pre,
                             const float *bias, float *out)
{
    ISSUE("bias_act", WR(pre, span(rows, cols, 1, F4)), RD(bias, span(cols, 1, 1, F4)),
          OPT_WR(out, span(rows, cols, 1, F4)));
    return ENQUEUE(bias_act, rows, cols, pre, bias, out);
}

DEFER(act, int fn; int64_t n; const float *x; float *y;,
      (be, in_, p_->fn, p_->n, p_->x, p_->y))
static dps_status s_act(backend *be, be_stream *s, int fn, int64_t n, const float *x, float *y)
{
    ISSUE("act", RD(x, span(n, 1, 1, F4)), WR(y, span(n, 1, 1, F4)));
    return ENQUEUE(act, fn, n, x, y);
}

DEFER(act_bwd, int fn; int64_t n; const float *g; const float *v; float *dx;,
      (be, in_, p_->fn, p_->n, p_->g, p_->v, p_->dx))
static dps_status s_act_bwd(backend *be, be_stream *s, int fn, int64_t n, const float *g,
                            const float *v, float *dx)
{
    ISSUE("act_bwd", RD(g, span(n, 1, 1, F4)), RD(v, span(n, 1, 1, F4)),
          WR(dx, span(n, 1, 1, F4)));
    return ENQUEUE(act_bwd, fn, n, g, v, dx);
}

DEFER(col_sum, int rows; int cols; const float *x; float *out;,
      (be, in_, p_->rows, p_->cols, p_->x, p_->out))
static dps_status s_col_sum(backend *be, be_stream *s, int rows, int cols, const float *x,
                            float *out)
{
    ISSUE("col_sum", RD(x, span(rows, cols, 1, F4)), WR(out, span(cols, 1, 1, F4)));
    return ENQUEUE(col_sum, rows, cols, x, out);
}

DEFER(gelu_bwd_col_sum, int rows; int cols; const float *dh; const float *pre; float *dpre;
      float *db;,
      (be, in_, p_->rows, p_->cols, p_->dh, p_->pre, p_->dpre, p_->db))
static dps_status s_gelu_bwd_col_sum(backend *be, be_stream *s, int rows, int cols,
                                     const float *dh, const float *pre, float *dpre, float *db)
{
    int64_t rc = span(rows, cols, 1, F4);
    ISSUE("gelu_bwd_col_sum", RD(dh, rc), RD(pre, rc), WR(dpre, rc), WR(db, span(cols, 1, 1, F4)));
    return ENQUEUE(gelu_bwd_col_sum, rows, cols, dh, pre, dpre, db);
}

DEFER(xent, int rows; int classes; const float *logits; const int32_t *labels; float scale;
      float *dlogits; float *row_loss;,
      (be, in_, p_->rows, p_->classes, p_->logits, p_->labels, p_->scale, p_->dlogits,
       p_->row_loss))
static dps_status s_xent(backend *be, be_stream *s, int rows, int classes, const float *logits,
                         const int32_t *labels, float scale, float *dlogits, float *row_loss)
{
    int64_t rc = span(rows, classes, 1, F4);
    ISSUE("xent", RD(logits, rc), RD(labels, span(rows, 1, 1, 4)), WR(dlogits, rc),
          WR(row_loss, span(rows, 1, 1, F4)));
    return ENQUEUE(xent, rows, classes, logits, labels, scale, dlogits, row_loss);
}

DEFER(log_softmax, int rows; int classes; const float *logits; float *logp;,
      (be, in_, p_->rows, p_->classes, p_->logits, p_->logp))
static dps_status s_log_softmax(backend *be, be_stream *s, int rows, int classes,
                                const float *logits, float *logp)
{
    int64_t rc = span(rows, classes, 1, F4);
    ISSUE("log_softmax", RD(logits, rc), WR(logp, rc));
    return ENQUEUE(log_softmax, rows, classes, logits, logp);
}

DEFER(nll, int rows; int classes; const float *logp; const int32_t *labels; float scale;
      float *row_loss; float *dlogp;,
      (be, in_, p_->rows, p_->classes, p_->logp, p_->labels, p_->scale, p_->row_loss, p_->dlogp))
static dps_status s_nll(backend *be, be_stream *s, int rows, int classes, const float *logp,
                        const int32_t *labels, float scale, float *row_loss, float *dlogp)
{
    int64_t rc = span(rows, classes, 1, F4);
    ISSUE("nll", RD(logp, rc), RD(labels, span(rows, 1, 1, 4)), WR(row_loss, span(rows, 1, 1, F4)),
          WR(dlogp, rc));
    return ENQUEUE(nll, rows, classes, logp, labels, scale, row_loss, dlogp);
}

DEFER(log_softmax_bwd, int rows; int classes; const float *logp; const float *dlogp;
      float *dlogits;,
      (be, in_, p_->rows, p_->classes, p_->logp, p_->dlogp, p_->dlogits))
static dps_status s_log_softmax_bwd(backend *be, be_stream *s, int rows, int classes,
                                    const float *logp, const float *dlogp, float *dlogits)
{
    int64_t rc = span(rows, classes, 1, F4);
    ISSUE("log_softmax_bwd", RD(logp, rc), RD(dlogp, rc), WR(dlogits, rc));
    return ENQUEUE(log_softmax_bwd, rows, classes, logp, dlogp, dlogits);
}

DEFER(sum, int64_t n; const float *x; float *out;,
      (be, in_, p_->n, p_->x, p_->out))
static dps_status s_sum(backend *be, be_stream *s, int64_t n, const float *x, float *out)
{
    ISSUE("sum", RD(x, span(n, 1, 1, F4)), WR(out, F4));
    return ENQUEUE(sum, n, x, out);
}

DEFER(sgd, int64_t n; float *p; const float *g; float *buf; dps_opt_hparams h;,
      (be, in_, p_->n, p_->p, p_->g, p_->buf, p_->h))
static dps_status s_sgd(backend *be, be_stream *s, int64_t n, float *p, const float *g, float *buf,
                        dps_opt_hparams h)
{
    int64_t b = span(n, 1, 1, F4);
    ISSUE("sgd", WR(p, b), RD(g, b), WR(buf, b));
    return ENQUEUE(sgd, n, p, g, buf, h);
}

DEFER(adamw, int64_t n; float *p; const float *g; float *m; float *v; dps_opt_hparams h;,
      (be, in_, p_->n, p_->p, p_->g, p_->m, p_->v, p_->h))
static dps_status s_adamw(backend *be, be_stream *s, int64_t n, float *p, const float *g,
                          float *m, float *v, dps_opt_hparams h)
{
    int64_t b = span(n, 1, 1, F4);
    ISSUE("adamw", WR(p, b), RD(g, b), WR(m, b), WR(v, b));
    return ENQUEUE(adamw, n, p, g, m, v, h);
}

DEFER(scale, int64_t n; float *x; float a;,
      (be, in_, p_->n, p_->x, p_->a))
static dps_status s_scale(backend *be, be_stream *s, int64_t n, float *x, float a)
{
    ISSUE("scale", WR(x, span(n, 1, 1, F4)));
    return ENQUEUE(scale, n, x, a);
}

DEFER(scale_copy, int64_t n; float *dst; const float *src; float a;,
      (be, in_, p_->n, p_->dst, p_->src, p_->a))
static dps_status s_scale_copy(backend *be, be_stream *s, int64_t n, float *dst, const float *src,
                               float a)
{
    ISSUE("scale_copy", RD(src, span(n, 1, 1, F4)), WR(dst, span(n, 1, 1, F4)));
    return ENQUEUE(scale_copy, n, dst, src, a);
}

DEFER(add, int64_t n; float *dst; const float *src;,
      (be, in_, p_->n, p_->dst, p_->src))
static dps_status s_add(backend *be, be_stream *s, int64_t n, float *dst, const float *src)
{
    ISSUE("add", WR(dst, span(n, 1, 1, F4)), RD(src, span(n, 1, 1, F4)));
    return ENQUEUE(add, n, dst, src);
}

DEFER(resample, int64_t samples; int64_t n_in; int64_t n_out; const float *x; float *y;,
      (be, in_, p_->samples, p_->n_in, p_->n_out, p_->x, p_->y))
static dps_status s_resample(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                             int64_t n_out, const float *x, float *y)
{
    ISSUE("resample", RD(x, span(samples, n_in, 1, F4)), WR(y, span(samples, n_out, 1, F4)));
    return ENQUEUE(resample, samples, n_in, n_out, x, y);
}

DEFER(resample_bwd, int64_t samples; int64_t n_in; int64_t n_out; const float *dy; float *dx;,
      (be, in_, p_->samples, p_->n_in, p_->n_out, p_->dy, p_->dx))
static dps_status s_resample_bwd(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                                 int64_t n_out, const float *dy, float *dx)
{
    ISSUE("resample_bwd", RD(dy, span(samples, n_out, 1, F4)), WR(dx, span(samples, n_in, 1, F4)));
    return ENQUEUE(resample_bwd, samples, n_in, n_out, dy, dx);
}

DEFER(col_scale, int64_t rows; int cols; const float *x; const float *g; float *y;,
      (be, in_, p_->rows, p_->cols, p_->x, p_->g, p_->y))
static dps_status s_col_scale(backend *be, be_stream *s, int64_t rows, int cols, const float *x,
                              const float *g, float *y)
{
    ISSUE("col_scale", RD(x, span(rows, cols, 1, F4)), RD(g, span(cols, 1, 1, F4)),
          WR(y, span(rows, cols, 1, F4)));
    return ENQUEUE(col_scale, rows, cols, x, g, y);
}

DEFER(mul, int64_t n; const float *a; const float *b; float *y;,
      (be, in_, p_->n, p_->a, p_->b, p_->y))
static dps_status s_mul(backend *be, be_stream *s, int64_t n, const float *a, const float *b,
                        float *y)
{
    int64_t nb = span(n, 1, 1, F4);
    ISSUE("mul", RD(a, nb), RD(b, nb), WR(y, nb));
    return ENQUEUE(mul, n, a, b, y);
}

DEFER(row_scale, int64_t rows; int64_t cols; const float *x; const float *sc; float *y;,
      (be, in_, p_->rows, p_->cols, p_->x, p_->sc, p_->y))
static dps_status s_row_scale(backend *be, be_stream *s, int64_t rows, int64_t cols,
                              const float *x, const float *sc, float *y)
{
    ISSUE("row_scale", RD(x, span(rows, cols, 1, F4)), RD(sc, span(rows, 1, 1, F4)),
          WR(y, span(rows, cols, 1, F4)));
    return ENQUEUE(row_scale, rows, cols, x, sc, y);
}

DEFER(row_dot_add, int64_t rows; int64_t cols; const float *a; const float *b; float *out;,
      (be, in_, p_->rows, p_->cols, p_->a, p_->b, p_->out))
static dps_status s_row_dot_add(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                const float *a, const float *b, float *out)
{
    ISSUE("row_dot_add", RD(a, span(rows, cols, 1, F4)), RD(b, span(rows, cols, 1, F4)),
          WR(out, span(rows, 1, 1, F4)));
    return ENQUEUE(row_dot_add, rows, cols, a, b, out);
}

DEFER(gemm_ex, int ta; int tb; int m; int n; int k; float alpha; const void *a; be_dtype at;
      int lda; const void *b; be_dtype bt; int ldb; float beta; void *c; be_dtype ct; int ldc;,
      (be, in_, p_->ta, p_->tb, p_->m, p_->n, p_->k, p_->alpha, p_->a, p_->at, p_->lda, p_->b,
       p_->bt, p_->ldb, p_->beta, p_->c, p_->ct, p_->ldc))
static dps_status s_gemm_ex(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                            float alpha, const void *a, be_dtype at, int lda, const void *b,
                            be_dtype bt, int ldb, float beta, void *c, be_dtype ct, int ldc)
{
    ISSUE("gemm_ex", RD(a, mat(ta ? k : m, ta ? m : k, lda, TB(at))),
          RD(b, mat(tb ? n : k, tb ? k : n, ldb, TB(bt))), WR(c, mat(m, n, ldc, TB(ct))),
          RD(NULL, k < 0 ? -1 : 0));
    return ENQUEUE(gemm_ex, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc);
}

DEFER(cast, int64_t n; const void *x; be_dtype xt; void *y; be_dtype yt;,
      (be, in_, p_->n, p_->x, p_->xt, p_->y, p_->yt))
static dps_status s_cast(backend *be, be_stream *s, int64_t n, const void *x, be_dtype xt, void *y,
                         be_dtype yt)
{
    ISSUE("cast", RD(x, span(n, 1, 1, TB(xt))), WR(y, span(n, 1, 1, TB(yt))));
    return ENQUEUE(cast, n, x, xt, y, yt);
}

DEFER(gemm_bias, int ta; int tb; int m; int n; int k; const void *a; be_dtype at; int lda;
      const void *b; be_dtype bt; int ldb; const void *bias; void *c; be_dtype ct; int ldc;,
      (be, in_, p_->ta, p_->tb, p_->m, p_->n, p_->k, p_->a, p_->at, p_->lda, p_->b, p_->bt, p_->ldb,
       p_->bias, p_->c, p_->ct, p_->ldc))
static dps_status s_gemm_bias(backend *be, be_stream *s, int ta, int tb, int m, int n, int k,
                              const void *a, be_dtype at, int lda, const void *b, be_dtype bt,
                              int ldb, const void *bias, void *c, be_dtype ct, int ldc)
{
    ISSUE("gemm_bias", RD(a, mat(ta ? k : m, ta ? m : k, lda, TB(at))),
          RD(b, mat(tb ? n : k, tb ? k : n, ldb, TB(bt))), RD(bias, span(n, 1, 1, TB(ct))),
          WR(c, mat(m, n, ldc, TB(ct))), RD(NULL, k < 0 ? -1 : 0));
    return ENQUEUE(gemm_bias, ta, tb, m, n, k, a, at, lda, b, bt, ldb, bias, c, ct, ldc);
}

DEFER(act_half, int fn; be_dtype ht; int64_t n; const uint16_t *x; uint16_t *y;,
      (be, in_, p_->fn, p_->ht, p_->n, p_->x, p_->y))
static dps_status s_act_half(backend *be, be_stream *s, int fn, be_dtype ht, int64_t n,
                             const uint16_t *x, uint16_t *y)
{
    ISSUE("act_half", RD(x, span(n, 1, 1, H2)), WR(y, span(n, 1, 1, H2)));
    return ENQUEUE(act_half, fn, ht, n, x, y);
}

DEFER(act_bwd_half, int fn; be_dtype ht; int64_t n; const uint16_t *g; const uint16_t *v;
      uint16_t *dx;,
      (be, in_, p_->fn, p_->ht, p_->n, p_->g, p_->v, p_->dx))
static dps_status s_act_bwd_half(backend *be, be_stream *s, int fn, be_dtype ht, int64_t n,
                                 const uint16_t *g, const uint16_t *v, uint16_t *dx)
{
    int64_t nb = span(n, 1, 1, H2);
    ISSUE("act_bwd_half", RD(g, nb), RD(v, nb), WR(dx, nb));
    return ENQUEUE(act_bwd_half, fn, ht, n, g, v, dx);
}

DEFER(col_sum_half, be_dtype ht; int rows; int cols; const uint16_t *x; float *out;,
      (be, in_, p_->ht, p_->rows, p_->cols, p_->x, p_->out))
static dps_status s_col_sum_half(backend *be, be_stream *s, be_dtype ht, int rows, int cols,
                                 const uint16_t *x, float *out)
{
    ISSUE("col_sum_half", RD(x, span(rows, cols, 1, H2)), WR(out, span(cols, 1, 1, F4)));
    return ENQUEUE(col_sum_half, ht, rows, cols, x, out);
}

DEFER(gelu_bwd_col_sum_half, be_dtype ht; int rows; int cols; const uint16_t *dh;
      const uint16_t *pre; uint16_t *dpre; float *db;,
      (be, in_, p_->ht, p_->rows, p_->cols, p_->dh, p_->pre, p_->dpre, p_->db))
static dps_status s_gelu_bwd_col_sum_half(backend *be, be_stream *s, be_dtype ht, int rows,
                                          int cols, const uint16_t *dh, const uint16_t *pre,
                                          uint16_t *dpre, float *db)
{
    int64_t rc = span(rows, cols, 1, H2);
    ISSUE("gelu_bwd_col_sum_half", RD(dh, rc), RD(pre, rc), WR(dpre, rc),
          WR(db, span(cols, 1, 1, F4)));
    return ENQUEUE(gelu_bwd_col_sum_half, ht, rows, cols, dh, pre, dpre, db);
}

DEFER(add_ex, int64_t n; const void *a; be_dtype at; const void *b; be_dtype bt; void *y;
      be_dtype yt;,
      (be, in_, p_->n, p_->a, p_->at, p_->b, p_->bt, p_->y, p_->yt))
static dps_status s_add_ex(backend *be, be_stream *s, int64_t n, const void *a, be_dtype at,
                           const void *b, be_dtype bt, void *y, be_dtype yt)
{
    ISSUE("add_ex", RD(a, span(n, 1, 1, TB(at))), RD(b, span(n, 1, 1, TB(bt))),
          WR(y, span(n, 1, 1, TB(yt))));
    return ENQUEUE(add_ex, n, a, at, b, bt, y, yt);
}

DEFER(row_scale_ex, int64_t rows; int64_t cols; const void *x; be_dtype xt; const void *sc;
      be_dtype sct; void *y; be_dtype yt;,
      (be, in_, p_->rows, p_->cols, p_->x, p_->xt, p_->sc, p_->sct, p_->y, p_->yt))
static dps_status s_row_scale_ex(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                 const void *x, be_dtype xt, const void *sc, be_dtype sct, void *y,
                                 be_dtype yt)
{
    ISSUE("row_scale_ex", RD(x, span(rows, cols, 1, TB(xt))), RD(sc, span(rows, 1, 1, TB(sct))),
          WR(y, span(rows, cols, 1, TB(yt))));
    return ENQUEUE(row_scale_ex, rows, cols, x, xt, sc, sct, y, yt);
}

DEFER(row_dot_add_ex, int64_t rows; int64_t cols; const float *a; const void *b; be_dtype bt;
      be_dtype pt; be_dtype rt; float *out;,
      (be, in_, p_->rows, p_->cols, p_->a, p_->b, p_->bt, p_->pt, p_->rt, p_->out))
static dps_status s_row_dot_add_ex(backend *be, be_stream *s, int64_t rows, int64_t cols,
                                   const float *a, const void *b, be_dtype bt, be_dtype pt,
                                   be_dtype rt, float *out)
{
    ISSUE("row_dot_add_ex", RD(a, span(rows, cols, 1, F4)), RD(b, span(rows, cols, 1, TB(bt))),
          WR(out, span(rows, 1, 1, F4)));
    return ENQUEUE(row_dot_add_ex, rows, cols, a, b, bt, pt, rt, out);
}

DEFER(pixel_scale_ex, int64_t rows; int64_t pixels; int64_t cols; const void *x; be_dtype xt;
      const void *sc; be_dtype sct; void *y; be_dtype yt;,
      (be, in_, p_->rows, p_->pixels, p_->cols, p_->x, p_->xt, p_->sc, p_->sct, p_->y, p_->yt))
static dps_status s_pixel_scale_ex(backend *be, be_stream *s, int64_t rows, int64_t pixels,
                                   int64_t cols, const void *x, be_dtype xt, const void *sc,
                                   be_dtype sct, void *y, be_dtype yt)
{
    ISSUE("pixel_scale_ex", RD(x, span(rows, pixels, cols, TB(xt))),
          RD(sc, span(rows, cols, 1, TB(sct))), WR(y, span(rows, pixels, cols, TB(yt))));
    return ENQUEUE(pixel_scale_ex, rows, pixels, cols, x, xt, sc, sct, y, yt);
}

DEFER(pixel_dot_add_ex, int64_t rows; int64_t pixels; int64_t cols; const float *a; const void *b;
      be_dtype bt; be_dtype pt; be_dtype rt; float *out;,
      (be, in_, p_->rows, p_->pixels, p_->cols, p_->a, p_->b, p_->bt, p_->pt, p_->rt, p_->out))
static dps_status s_pixel_dot_add_ex(backend *be, be_stream *s, int64_t rows, int64_t pixels,
                                     int64_t cols, const float *a, const void *b, be_dtype bt,
                                     be_dtype pt, be_dtype rt, float *out)
{
    ISSUE("pixel_dot_add_ex", RD(a, span(rows, pixels, cols, F4)),
          RD(b, span(rows, pixels, cols, TB(bt))), WR(out, span(rows, cols, 1, F4)));
    return ENQUEUE(pixel_dot_add_ex, rows, pixels, cols, a, b, bt, pt, rt, out);
}

DEFER(cat_cols, int64_t rows; int64_t ca; const void *a; be_dtype at; int64_t cb; const void *b;
      be_dtype bt; void *y; be_dtype yt;,
      (be, in_, p_->rows, p_->ca, p_->a, p_->at, p_->cb, p_->b, p_->bt, p_->y, p_->yt))
static dps_status s_cat_cols(backend *be, be_stream *s, int64_t rows, int64_t ca, const void *a,
                             be_dtype at, int64_t cb, const void *b, be_dtype bt, void *y,
                             be_dtype yt)
{
    ISSUE("cat_cols", RD(a, span(rows, ca, 1, TB(at))), RD(b, span(rows, cb, 1, TB(bt))),
          WR(y, ca < 0 || cb < 0 ? -1 : span(rows, ca + cb, 1, TB(yt))));
    return ENQUEUE(cat_cols, rows, ca, a, at, cb, b, bt, y, yt);
}

DEFER(cat_cols_bwd, int64_t rows; int64_t ca; int64_t cb; const float *g; float *da; be_dtype dat;
      float *db; be_dtype dbt;,
      (be, in_, p_->rows, p_->ca, p_->cb, p_->g, p_->da, p_->dat, p_->db, p_->dbt))
static dps_status s_cat_cols_bwd(backend *be, be_stream *s, int64_t rows, int64_t ca, int64_t cb,
                                 const float *g, float *da, be_dtype dat, float *db, be_dtype dbt)
{
    ISSUE("cat_cols_bwd", RD(g, ca < 0 || cb < 0 ? -1 : span(rows, ca + cb, 1, F4)),
          OPT_WR(da, span(rows, ca, 1, F4)), OPT_WR(db, span(rows, cb, 1, F4)));
    return ENQUEUE(cat_cols_bwd, rows, ca, cb, g, da, dat, db, dbt);
}

DEFER(round_half, be_dtype ht; int64_t n; float *x;,
      (be, in_, p_->ht, p_->n, p_->x))
static dps_status s_round_half(backend *be, be_stream *s, be_dtype ht, int64_t n, float *x)
{
    ISSUE("round_half", WR(x, span(n, 1, 1, F4)));
    return ENQUEUE(round_half, ht, n, x);
}

DEFER(resample_half, int64_t samples; int64_t n_in; int64_t n_out; const uint16_t *x; uint16_t *y;,
      (be, in_, p_->samples, p_->n_in, p_->n_out, p_->x, p_->y))
static dps_status s_resample_half(backend *be, be_stream *s, int64_t samples, int64_t n_in,
                                  int64_t n_out, const uint16_t *x, uint16_t *y)
{
    ISSUE("resample_half", RD(x, span(samples, n_in, 1, H2)), WR(y, span(samples, n_out, 1, H2)));
    return ENQUEUE(resample_half, samples, n_in, n_out, x, y);
}

DEFER(window, dps_window w; int64_t samples; be_dtype t; const void *x; void *y; int64_t *idx;,
      (be, in_, &p_->w, p_->samples, p_->t, p_->x, p_->y, p_->idx))
static dps_status s_window(backend *be, be_stream *s, const dps_window *w, int64_t samples,
                           be_dtype t, const void *x, void *y, int64_t *idx)
{
    int64_t out = span(samples, dps_window_out_elems(w), 1, 1);
    ISSUE("window", RD(x, span(samples, dps_window_in_elems(w), 1, TB(t))),
          WR(y, span(out, 1, 1, TB(t))), OPT_WR(idx, span(out, 1, 1, sizeof *idx)));
    return ENQUEUE(window, *w, samples, t, x, y, idx);
}

DEFER(window_bwd, dps_window w; int64_t samples; const float *dy; const int64_t *idx; float *dx;,
      (be, in_, &p_->w, p_->samples, p_->dy, p_->idx, p_->dx))
static dps_status s_window_bwd(backend *be, be_stream *s, const dps_window *w, int64_t samples,
                               const float *dy, const int64_t *idx, float *dx)
{
    int64_t out = span(samples, dps_window_out_elems(w), 1, 1);
    ISSUE("window_bwd", RD(dy, span(out, 1, 1, F4)), OPT_RD(idx, span(out, 1, 1, sizeof *idx)),
          WR(dx, span(samples, dps_window_in_elems(w), 1, F4)));
    return ENQUEUE(window_bwd, *w, samples, dy, idx, dx);
}

DEFER(col_sum_add, be_dtype xt; be_dtype rt; int rows; int cols; int64_t ld; const void *x;
      float *out;,
      (be, in_, p_->xt, p_->rt, p_->rows, p_->cols, p_->ld, p_->x, p_->out))
static dps_status s_col_sum_add(backend *be, be_stream *s, be_dtype xt, be_dtype rt, int rows,
                                int cols, int64_t ld, const void *x, float *out)
{
    ISSUE("col_sum_add", RD(x, mat(rows, cols, ld, TB(xt))), WR(out, span(cols, 1, 1, F4)));
    return ENQUEUE(col_sum_add, xt, rt, rows, cols, ld, x, out);
}

DEFER(norm_fwd, be_dtype xt; be_dtype yt; int rows; int cols; const void *x; const float *gamma;
      const float *beta; void *y;,
      (be, in_, p_->xt, p_->yt, p_->rows, p_->cols, p_->x, p_->gamma, p_->beta, p_->y))
static dps_status s_norm_fwd(backend *be, be_stream *s, be_dtype xt, be_dtype yt, int rows,
                             int cols, const void *x, const float *gamma, const float *beta, void *y)
{
    int64_t c = span(cols, 1, 1, F4);
    ISSUE("norm_fwd", RD(x, span(rows, cols, 1, TB(xt))), OPT_RD(gamma, c), OPT_RD(beta, c),
          WR(y, span(rows, cols, 1, TB(yt))));
    return ENQUEUE(norm_fwd, xt, yt, rows, cols, x, gamma, beta, y);
}

DEFER(norm_bwd, be_dtype xt; be_dtype rt; int rows; int cols; const float *g; const void *x;
      const float *gamma; float *dx; float *dgamma; float *dbeta;,
      (be, in_, p_->xt, p_->rt, p_->rows, p_->cols, p_->g, p_->x, p_->gamma, p_->dx, p_->dgamma,
       p_->dbeta))
static dps_status s_norm_bwd(backend *be, be_stream *s, be_dtype xt, be_dtype rt, int rows,
                             int cols, const float *g, const void *x, const float *gamma,
                             float *dx, float *dgamma, float *dbeta)
{
    int64_t rc = span(rows, cols, 1, F4), c = span(cols, 1, 1, F4);
    ISSUE("norm_bwd", RD(g, rc), OPT_RD(x, span(rows, cols, 1, TB(xt))), OPT_RD(gamma, c),
          OPT_WR(dx, rc), OPT_WR(dgamma, c), OPT_WR(dbeta, c));
    return ENQUEUE(norm_bwd, xt, rt, rows, cols, g, x, gamma, dx, dgamma, dbeta);
}

DEFER(add_round, be_dtype rt; int64_t n; float *dst; const float *src;,
      (be, in_, p_->rt, p_->n, p_->dst, p_->src))
static dps_status s_add_round(backend *be, be_stream *s, be_dtype rt, int64_t n, float *dst,
                              const float *src)
{
    ISSUE("add_round", WR(dst, span(n, 1, 1, F4)), RD(src, span(n, 1, 1, F4)));
    return ENQUEUE(add_round, rt, n, dst, src);
}

/* qkv's, out's and lse's bytes of an attention. */
static void attn_bytes(const be_attn *a, int64_t *qkv, int64_t *out, int64_t *lse)
{
    int64_t rows = span(a->samples, a->t, 1, 1), hd = span(a->heads, a->d, 1, 1);
    *qkv = rows < 0 || hd < 0 ? -1 : span(rows, 3 * hd, 1, TB(a->dt));
    *out = rows < 0 || hd < 0 ? -1 : span(rows, hd, 1, TB(a->dt));
    *lse = span(a->samples, a->heads, a->t, F4);
}

DEFER(attn, be_attn a; const void *qkv; void *out; float *lse;,
      (be, in_, &p_->a, p_->qkv, p_->out, p_->lse))
static dps_status s_attn(backend *be, be_stream *s, const be_attn *a, const void *qkv, void *out,
                         float *lse)
{
    int64_t bq, bo, bl;
    attn_bytes(a, &bq, &bo, &bl);
    ISSUE("attn", RD(qkv, bq), WR(out, bo), WR(lse, bl));
    return ENQUEUE(attn, *a, qkv, out, lse);
}

DEFER(attn_bwd, be_attn a; const void *qkv; const void *out; const float *lse; const void *dout;
      void *dqkv;,
      (be, in_, &p_->a, p_->qkv, p_->out, p_->lse, p_->dout, p_->dqkv))
static dps_status s_attn_bwd(backend *be, be_stream *s, const be_attn *a, const void *qkv,
                             const void *out, const float *lse, const void *dout, void *dqkv)
{
    int64_t bq, bo, bl;
    attn_bytes(a, &bq, &bo, &bl);
    ISSUE("attn_bwd", RD(qkv, bq), RD(out, bo), RD(lse, bl), RD(dout, bo), WR(dqkv, bq));
    return ENQUEUE(attn_bwd, *a, qkv, out, lse, dout, dqkv);
}

DEFER(unscale, int64_t n; float *g; float inv_scale; float *found_inf;,
      (be, in_, p_->n, p_->g, p_->inv_scale, p_->found_inf))
static dps_status s_unscale(backend *be, be_stream *s, int64_t n, float *g, float inv_scale,
                            float *found_inf)
{
    ISSUE("unscale", WR(g, span(n, 1, 1, F4)), WR(found_inf, F4));
    return ENQUEUE(unscale, n, g, inv_scale, found_inf);
}

DEFER(spin, double us;,
      (be, in_, p_->us))
static dps_status s_spin(backend *be, be_stream *s, double us)
{
    ISSUE0("spin");
    return ENQUEUE(spin, us);
}

static dps_status s_profile(backend *be, int on) { return INNER->profile(be, on); }

static dps_status s_mem_used(backend *be, int dev, size_t *used)
{
    return INNER->mem_used(be, dev, used);
}

static void s_versions(const backend *be, be_version_info *v) { INNER->versions(be, v); }

/* The host backend's table wrapped (it has no convolutions: NULL, as its own). */
const be_ops strict_ops = {
    .name = "host",
    .set_device = s_set_device,
    .raw_alloc = strict_raw_alloc,
    .raw_free = strict_raw_free,
    .host_alloc = strict_host_alloc,
    .host_free = strict_host_free,
    .stream_create = strict_stream_create,
    .stream_destroy = strict_stream_destroy,
    .stream_sync = strict_stream_sync,
    .event_create = strict_event_create,
    .event_destroy = strict_event_destroy,
    .event_record = strict_event_record,
    .stream_wait = strict_stream_wait,
    .event_sync = strict_event_sync,
    .name_stream = strict_name_stream,
    .native_stream = strict_native_stream,
    .peer_access = s_peer_access,
    .event_ms = strict_event_ms,
    .copy = s_copy,
    .memset0 = s_memset0,
    .gemm = s_gemm,
    .gemm_tf32 = s_gemm_tf32,
    .bias_act = s_bias_act,
    .act = s_act,
    .act_bwd = s_act_bwd,
    .col_sum = s_col_sum,
    .gelu_bwd_col_sum = s_gelu_bwd_col_sum,
    .xent = s_xent,
    .log_softmax = s_log_softmax,
    .nll = s_nll,
    .log_softmax_bwd = s_log_softmax_bwd,
    .sum = s_sum,
    .sgd = s_sgd,
    .adamw = s_adamw,
    .scale = s_scale,
    .scale_copy = s_scale_copy,
    .add = s_add,
    .resample = s_resample,
    .resample_bwd = s_resample_bwd,
    .col_scale = s_col_scale,
    .mul = s_mul,
    .row_scale = s_row_scale,
    .row_dot_add = s_row_dot_add,
    .gemm_ex = s_gemm_ex,
    .cast = s_cast,
    .gemm_bias = s_gemm_bias,
    .act_half = s_act_half,
    .act_bwd_half = s_act_bwd_half,
    .col_sum_half = s_col_sum_half,
    .gelu_bwd_col_sum_half = s_gelu_bwd_col_sum_half,
    .add_ex = s_add_ex,
    .row_scale_ex = s_row_scale_ex,
    .row_dot_add_ex = s_row_dot_add_ex,
    .pixel_scale_ex = s_pixel_scale_ex,
    .pixel_dot_add_ex = s_pixel_dot_add_ex,
    .cat_cols = s_cat_cols,
    .cat_cols_bwd = s_cat_cols_bwd,
    .round_half = s_round_half,
    .resample_half = s_resample_half,
    .window = s_window,
    .window_bwd = s_window_bwd,
    .col_sum_add = s_col_sum_add,
    .norm_fwd = s_norm_fwd,
    .norm_bwd = s_norm_bwd,
    .add_round = s_add_round,
    .attn = s_attn,
    .attn_bwd = s_attn_bwd,
    .unscale = s_unscale,
    .spin = s_spin,
    .profile = s_profile,
    .mem_used = s_mem_used,
    .versions = s_versions,
    .destroy = strict_destroy,
};
