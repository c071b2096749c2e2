/* The host backend's sums into gradients (host_grad_sums.h): column sums in
 * dps_col_sum_plan_for's order (elementwise.h), lane l of a run summing its
 * rows l, l + LANES, ..., as kernels/grad_sums.cu's threads do. */
#include "backend/host_grad_sums.h"

#include "elementwise.h"

#define BLOCK 256 /* columns summed at once */

/* What one call sums: x (type xt, rows ld apart); with g, the products g·x
 * and g itself (a norm's), dx += (gamma ? g·gamma : g) rounded to rt. */
typedef struct sums_src {
    be_dtype xt, rt;
    int cols;
    int64_t ld;
    const void *x;
    const float *g, *gamma;
    float *dx;
} sums_src;

/* Run [r0, r1)'s partial sums of columns [c0, c0 + n): of x (or g·x) into
 * part[0][..], of g into part[1][..]; dx written on the way. */
static void run_sums(const sums_src *s, int r0, int r1, int c0, int n, float part[2][BLOCK])
{
    float lane[2][DPS_COLSUM_LANES][BLOCK] = {{{0}}};
    for (int r = r0; r < r1; r++) {
        int l = (r - r0) % DPS_COLSUM_LANES;
        for (int c = 0; c < n; c++) {
            int64_t i = (int64_t)r * s->ld + c0 + c;
            if (!s->g) {
                lane[0][l][c] += s->x ? dps_load_as(s->x, i, (int)s->xt) : 0.0f;
                continue;
            }
            float gi = s->g[i];
            if (s->x) lane[0][l][c] += gi * dps_load_as(s->x, i, (int)s->xt);
            lane[1][l][c] += gi;
            if (s->dx)
                s->dx[i] += dps_round_as(s->gamma ? gi * s->gamma[c0 + c] : gi, (int)s->rt);
        }
    }
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < n; c++) part[k][c] = dps_col_sum_lanes(&lane[k][0][c], BLOCK);
}

/* out[k] (NULL: not wanted) += the runs' sums, rounded to rt, for k = 0, 1. */
static void sums(const sums_src *s, int rows, float *out[2], be_dtype rt)
{
    dps_col_sum_plan p = dps_col_sum_plan_for(rows, s->cols);
    if (rows <= 0) return;
    float part[2][BLOCK], acc[2][BLOCK];
    for (int c0 = 0; c0 < s->cols; c0 += BLOCK) {
        int n = s->cols - c0 < BLOCK ? s->cols - c0 : BLOCK;
        for (int k = 0; k < p.chunks; k++) {
            int r0 = k * p.chunk_rows, r1 = r0 + p.chunk_rows < rows ? r0 + p.chunk_rows : rows;
            run_sums(s, r0, r1, c0, n, part);
            for (int j = 0; j < 2; j++)
                for (int c = 0; c < n; c++) acc[j][c] = k ? acc[j][c] + part[j][c] : part[j][c];
        }
        for (int j = 0; j < 2; j++)
            for (int c = 0; out[j] && c < n; c++) out[j][c0 + c] += dps_round_as(acc[j][c], (int)rt);
    }
}

void host_col_sum_add_run(be_dtype xt, be_dtype rt, int rows, int cols, int64_t ld, const void *x,
                          float *out)
{
    sums_src s = {xt, rt, cols, ld, x, NULL, NULL, NULL};
    float *outs[2] = {out, NULL};
    sums(&s, rows, outs, rt);
}

void host_norm_bwd_run(be_dtype xt, be_dtype rt, int rows, int cols, const float *g, const void *x,
                       const float *gamma, float *dx, float *dgamma, float *dbeta)
{
    sums_src s = {xt, rt, cols, cols, dgamma ? x : NULL, g, gamma, dx};
    float *outs[2] = {dgamma, dbeta};
    sums(&s, rows, outs, BE_F32);
}

void host_add_round_run(be_dtype rt, int64_t n, float *dst, const float *src)
{
    for (int64_t i = 0; i < n; i++) dst[i] += dps_round_as(src[i], (int)rt);
}
