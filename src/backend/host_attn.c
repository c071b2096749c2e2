/* Scaled dot-product attention on the CPU as FlashAttention-2 computes it
 * (host_attn.h): forward an online softmax over key tiles, keeping the
 * output and each row's log-sum-exp; backward two passes that make the
 * probabilities P again from the log-sum-exp, pair by pair, with
 * D = rowsum(dO ∘ O): keys' gradients by key tile, then queries' by
 * query tile. Every operand read as fp32 (a half one widened), every sum
 * in fp32, each output rounded once to its type. */
#include <math.h>
#include <stdlib.h>

#include "elementwise.h"
#include "backend/host_attn.h"

#define TILE HOST_ATTN_TILE

/* Where sample s's head h's q, k, v and out rows start, in elements. */
typedef struct heads_at {
    int64_t q, k, v, o, lse;
    int64_t row3, row; /* the strides of a row of qkv and of out */
} heads_at;

static heads_at at_of(const be_attn *a, int64_t s, int h)
{
    int64_t hd = (int64_t)a->heads * a->d, t = a->t;
    heads_at p = {.row3 = 3 * hd, .row = hd};
    p.q = s * t * 3 * hd + (int64_t)h * a->d;
    p.k = p.q + hd;
    p.v = p.q + 2 * hd;
    p.o = s * t * hd + (int64_t)h * a->d;
    p.lse = (s * a->heads + h) * t;
    return p;
}

/* x[0..d) = row i's d elements from element `at` of a buffer of type t */
static void load_row(const void *buf, int t, int64_t at, int d, float *x)
{
    for (int c = 0; c < d; c++) x[c] = dps_load_as(buf, at + c, t);
}

static float dot(const float *x, const void *buf, int t, int64_t at, int d)
{
    float acc = 0.0f;
    for (int c = 0; c < d; c++) acc += x[c] * dps_load_as(buf, at + c, t);
    return acc;
}

/* The keys query row i sees: all t, or those up to i when causal. */
static int keys_of(const be_attn *a, int i)
{
    return a->causal ? i + 1 : a->t;
}

/* One query row's forward: its scores over the key tiles, each tile's
 * maximum folded into the running one (acc and l rescaled), then
 * out = acc / l and lse = m + log l. */
static void row_fwd(const be_attn *a, const void *qkv, const heads_at *p, int i, float *q,
                    float *acc, float *sc, void *out, float *lse)
{
    int t = (int)a->dt, d = a->d, nk = keys_of(a, i);
    float scale = 1.0f / sqrtf((float)d), m = -INFINITY, l = 0.0f;
    load_row(qkv, t, p->q + i * p->row3, d, q);
    for (int c = 0; c < d; c++) acc[c] = 0.0f;
    for (int j0 = 0; j0 < nk; j0 += TILE) {
        int nj = nk - j0 < TILE ? nk - j0 : TILE;
        float mt = m;
        for (int j = 0; j < nj; j++) {
            sc[j] = scale * dot(q, qkv, t, p->k + (j0 + j) * p->row3, d);
            if (sc[j] > mt) mt = sc[j];
        }
        float r = expf(m - mt); /* m = -inf on the first tile: 0 */
        l *= r;
        for (int c = 0; c < d; c++) acc[c] *= r;
        for (int j = 0; j < nj; j++) {
            float e = expf(sc[j] - mt);
            l += e;
            int64_t v = p->v + (j0 + j) * p->row3;
            for (int c = 0; c < d; c++) acc[c] += e * dps_load_as(qkv, v + c, t);
        }
        m = mt;
    }
    for (int c = 0; c < d; c++) dps_store_as(out, p->o + i * p->row + c, t, acc[c] / l);
    lse[p->lse + i] = m + logf(l);
}

dps_status host_attn_fwd(const be_attn *a, const void *qkv, void *out, float *lse)
{
    float *buf = malloc(((size_t)a->d * 2 + TILE) * sizeof(float));
    if (!buf) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for attention rows (d=%d)", a->d);
    for (int64_t s = 0; s < a->samples; s++)
        for (int h = 0; h < a->heads; h++) {
            heads_at p = at_of(a, s, h);
            for (int i = 0; i < a->t; i++)
                row_fwd(a, qkv, &p, i, buf, buf + a->d, buf + 2 * a->d, out, lse);
        }
    free(buf);
    return DPS_OK;
}

/* One (query i, key j) pair of backward: P_ij made again from the
 * log-sum-exp, dP_ij = dO_i · v_j, dS_ij = P_ij (dP_ij - D_i). */
typedef struct pair { float p, ds; } pair;

static pair pair_of(const be_attn *a, const void *qkv, const heads_at *p, const float *lse,
                    const float *dd, int i, int j, const float *q, const float *go)
{
    int t = (int)a->dt, d = a->d;
    float scale = 1.0f / sqrtf((float)d);
    float s = scale * dot(q, qkv, t, p->k + j * p->row3, d);
    float pr = expf(s - lse[p->lse + i]);
    float dp = dot(go, qkv, t, p->v + j * p->row3, d);
    return (pair){pr, pr * (dp - dd[i])};
}

/* D_i = rowsum(dO_i ∘ O_i) for every row of sample s's head h. */
static void row_dots(const be_attn *a, const void *out, const void *dout, const heads_at *p,
                     float *dd)
{
    int t = (int)a->dt;
    for (int i = 0; i < a->t; i++) {
        float acc = 0.0f;
        for (int c = 0; c < a->d; c++)
            acc += dps_load_as(dout, p->o + i * p->row + c, t) * dps_load_as(out, p->o + i * p->row + c, t);
        dd[i] = acc;
    }
}

/* Keys' and values' gradients, a key row at a time: dV_j = Σ_i P_ij dO_i, dK_j = Σ_i dS_ij q_i / √d over the query
 * rows that see key j. */
static void keys_bwd(const be_attn *a, const void *qkv, const void *dout, const heads_at *p,
                     const float *lse, const float *dd, float *w, void *dqkv)
{
    int t = (int)a->dt, d = a->d;
    float scale = 1.0f / sqrtf((float)d), *q = w, *go = w + d, *dk = w + 2 * d, *dv = w + 3 * d;
    for (int j = 0; j < a->t; j++) {
        for (int c = 0; c < d; c++) dk[c] = dv[c] = 0.0f;
        for (int i = a->causal ? j : 0; i < a->t; i++) {
            load_row(qkv, t, p->q + i * p->row3, d, q);
            load_row(dout, t, p->o + i * p->row, d, go);
            pair pr = pair_of(a, qkv, p, lse, dd, i, j, q, go);
            for (int c = 0; c < d; c++) {
                dv[c] += pr.p * go[c];
                dk[c] += pr.ds * scale * q[c];
            }
        }
        for (int c = 0; c < d; c++) {
            dps_store_as(dqkv, p->k + j * p->row3 + c, t, dk[c]);
            dps_store_as(dqkv, p->v + j * p->row3 + c, t, dv[c]);
        }
    }
}

/* Queries' gradients, query row by query row: dQ_i = Σ_j dS_ij k_j / √d. */
static void queries_bwd(const be_attn *a, const void *qkv, const void *dout, const heads_at *p,
                        const float *lse, const float *dd, float *w, void *dqkv)
{
    int t = (int)a->dt, d = a->d;
    float scale = 1.0f / sqrtf((float)d), *q = w, *go = w + d, *dq = w + 2 * d;
    for (int i = 0; i < a->t; i++) {
        load_row(qkv, t, p->q + i * p->row3, d, q);
        load_row(dout, t, p->o + i * p->row, d, go);
        for (int c = 0; c < d; c++) dq[c] = 0.0f;
        for (int j = 0; j < keys_of(a, i); j++) {
            pair pr = pair_of(a, qkv, p, lse, dd, i, j, q, go);
            int64_t k = p->k + j * p->row3;
            for (int c = 0; c < d; c++) dq[c] += pr.ds * scale * dps_load_as(qkv, k + c, t);
        }
        for (int c = 0; c < d; c++) dps_store_as(dqkv, p->q + i * p->row3 + c, t, dq[c]);
    }
}

dps_status host_attn_bwd(const be_attn *a, const void *qkv, const void *out, const float *lse,
                         const void *dout, void *dqkv)
{
    float *w = malloc(((size_t)a->d * 4 + (size_t)a->t) * sizeof(float));
    if (!w) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for attention's backward (t=%d, d=%d)",
                            a->t, a->d);
    float *dd = w + 4 * a->d;
    for (int64_t s = 0; s < a->samples; s++)
        for (int h = 0; h < a->heads; h++) {
            heads_at p = at_of(a, s, h);
            row_dots(a, out, dout, &p, dd);
            keys_bwd(a, qkv, dout, &p, lse, dd, w, dqkv);
            queries_bwd(a, qkv, dout, &p, lse, dd, w, dqkv);
        }
    free(w);
    return DPS_OK;
}
