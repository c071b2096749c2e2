/* The bucket size to use (see predict_bucket.h): each family's sizes
 * predicted and measured, the uncertainty, the table and the recommendation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/predict_bucket.h"
#include "core/stats.h"
#include "core/strategy.h"
#include "config/settings.h"

#define SAME_MB(a, b) (fabs((a) - (b)) < 1e-9)
#define MAX_FAMILY_SIZES (2 * SETTINGS_MAX_LIST) /* the list and the sizes a folder ran */

/* A series, a strategy with buckets, a device count. */
typedef struct bucket_family {
    int w;
    dps_mode mode;
    int ngpus;
} bucket_family;

/* A point's expected step time: measured where run, else predicted x scale. */
static double bucket_expected_ms(const bucket_point *p, double scale)
{
    return isnan(p->measured_ms) ? p->predicted_ms * scale : p->measured_ms;
}

/* The advice on n points in ascending size. */
static void predict_bucket_advise(const bucket_point *p, int n, bucket_advice *a)
{
    double ratio[MAX_FAMILY_SIZES] = {0}, least = INFINITY;
    int k = 0;
    a->error_pct = NAN;
    for (int i = 0; i < n && k < MAX_FAMILY_SIZES; i++) {
        if (isnan(p[i].measured_ms) || isnan(p[i].predicted_ms)) continue;
        ratio[k++] = p[i].measured_ms / p[i].predicted_ms;
        double e = 100.0 * fabs(p[i].predicted_ms / p[i].measured_ms - 1.0);
        a->error_pct = isnan(a->error_pct) ? e : fmax(a->error_pct, e);
    }
    a->scale = stats_median_or(ratio, k, 1.0);
    for (int i = 0; i < n; i++) least = fmin(least, bucket_expected_ms(&p[i], a->scale));
    a->best = 0;
    while (a->best < n - 1 && !(bucket_expected_ms(&p[a->best], a->scale) <= least * (1 + BUCKET_TIE)))
        a->best++;
}

/* "±8.1 %", or "n/a" for NAN. */
static const char *pct_text(double pct, char *buf, size_t len)
{
    if (isnan(pct)) snprintf(buf, len, "n/a");
    else snprintf(buf, len, "±%.1f %%", pct);
    return buf;
}

static void print_point(FILE *out, const bucket_point *p, const bucket_advice *a)
{
    char u[24], s[24], meas[24] = "-";
    if (!isnan(p->measured_ms)) snprintf(meas, sizeof meas, "%.3f", p->measured_ms);
    fprintf(out, "%10g %13.3f %12s %12s %10s %12.3f  %s\n", p->bucket_mb, p->predicted_ms,
            pct_text(a->error_pct, u, sizeof u), meas, pct_text(p->spread_pct, s, sizeof s),
            bucket_expected_ms(p, a->scale), isnan(p->measured_ms) ? "predicted x scale" : "measured");
}

/* The family's table and its recommendation line. */
static void print_family(FILE *out, const predict_workload *w, const bucket_family *fm,
                         const bucket_point *p, int n, const bucket_advice *a)
{
    char u[24];
    const bucket_point *b = &p[a->best];
    fprintf(out, "# bucket size: %s, %s on %d devices (scale %.3f: measured / predicted on the "
            "sizes run; uncertainty: the model's largest error on them)\n", w->name,
            dps_mode_name(fm->mode), fm->ngpus, a->scale);
    fprintf(out, "%10s %13s %12s %12s %10s %12s  %s\n", "bucket_mb", "predicted_ms", "uncertainty",
            "measured_ms", "spread", "expected_ms", "from");
    for (int i = 0; i < n; i++) print_point(out, &p[i], a);
    fprintf(out, "# recommended bucket_mb = %g for %s %s on %d devices: ", b->bucket_mb, w->name,
            dps_mode_name(fm->mode), fm->ngpus);
    if (!isnan(b->measured_ms)) fprintf(out, "measured %.3f ms, ", b->measured_ms);
    else fprintf(out, "expected %.3f ms (not run), ", bucket_expected_ms(b, a->scale));
    fprintf(out, "predicted %.3f ms %s\n", b->predicted_ms, pct_text(a->error_pct, u, sizeof u));
}

/* The family's sizes: the list and those the folder ran, ascending, once each. */
static int family_sizes(const bucket_ask *ask, const bucket_family *fm, const predict_measured *ms,
                        int nms, double *sizes)
{
    int n = 0;
    for (int i = 0; i < ask->nsizes + nms; i++) {
        double x = i < ask->nsizes ? ask->sizes[i] : ms[i - ask->nsizes].bucket_mb;
        if (i >= ask->nsizes) {
            const predict_measured *q = &ms[i - ask->nsizes];
            if (q->workload != fm->w || q->mode != fm->mode || q->ngpus != fm->ngpus) continue;
        }
        int k = 0;
        while (k < n && !SAME_MB(sizes[k], x)) k++;
        if (k == n && n < MAX_FAMILY_SIZES) sizes[n++] = x;
    }
    for (int i = 1; i < n; i++) /* insertion sort: a handful */
        for (int k = i; k > 0 && sizes[k] < sizes[k - 1]; k--) {
            double t = sizes[k];
            sizes[k] = sizes[k - 1], sizes[k - 1] = t;
        }
    return n;
}

/* The folder's run of family fm at size mb into p (NAN: none). */
static void measured_point(const predict_measured *ms, int nms, const bucket_family *fm, double mb,
                           bucket_point *p)
{
    p->measured_ms = p->spread_pct = NAN;
    for (int i = 0; i < nms; i++) {
        const predict_measured *q = &ms[i];
        if (q->workload != fm->w || q->mode != fm->mode || q->ngpus != fm->ngpus ||
            !SAME_MB(q->bucket_mb, mb))
            continue;
        p->measured_ms = q->step_ms;
        if (!isnan(q->p10_ms) && !isnan(q->p90_ms))
            p->spread_pct = 100.0 * (q->p90_ms - q->p10_ms) / 2.0 / q->step_ms;
    }
}

/* The prediction of family fm at size mb: the workload at that cap (the
 * folder's measured ready times only at its own cap), on the machine
 * (the folder's all-reduce nearest mb unless --machine). */
static dps_status predict_point(const predict_folder *f, const predict_workload *w,
                                const predict_machine *m0, const predict_consts *c,
                                const bucket_ask *ask, const bucket_family *fm, double mb,
                                predict_workload *wk, predict_row *row)
{
    predict_machine m = *m0;
    predict_split s;
    *wk = w[fm->w];
    if (!SAME_MB(wk->bucket_mb, mb)) wk->nready = 0;
    wk->bucket_mb = mb;
    if (!ask->machine_path[0]) DPS_TRY(predict_from_machine(predict_folder_dir(f), mb, &m));
    DPS_TRY(predict_split_step(&m, wk, &s));
    predict_config(&m, wk, &s, c, fm->mode, fm->ngpus, row);
    row->w = wk;
    return DPS_OK;
}

/* The families asked for: gpus x modes with buckets of every workload, or
 * the folder's. Returns the count (at most max). */
static int families(const bucket_ask *ask, int nw, const predict_measured *ms, int nms,
                    bucket_family *fm, int max)
{
    int n = 0;
    for (int k = 0; k < nw && ask->ngpus; k++)
        for (int g = 0; g < ask->ngpus; g++)
            for (int i = 0; i < (ask->nmodes ? ask->nmodes : 1) && n < max; i++) {
                dps_mode mode = ask->nmodes ? ask->modes[i] : MODE_DDP;
                if (dps_strategy_of(mode)->buckets) fm[n++] = (bucket_family){k, mode, ask->gpus[g]};
            }
    for (int i = 0; i < nms && !ask->ngpus && n < max; i++) {
        bucket_family x = {ms[i].workload, ms[i].mode, ms[i].ngpus};
        int k = 0;
        while (k < n && memcmp(&fm[k], &x, sizeof x) != 0) k++;
        if (k == n) fm[n++] = x;
    }
    return n;
}

/* One family: each size predicted and measured, the table. */
static dps_status one_family(const predict_folder *f, const predict_workload *w,
                             const predict_machine *m, const predict_consts *c,
                             const bucket_ask *ask, const bucket_family *fm,
                             const predict_measured *ms, int nms, FILE *out, bucket_run *run)
{
    double sizes[MAX_FAMILY_SIZES];
    bucket_point p[MAX_FAMILY_SIZES];
    bucket_advice a;
    int n = family_sizes(ask, fm, ms, nms, sizes);
    for (int i = 0; i < n; i++) {
        predict_row *row = &run->rows[run->nrows];
        DPS_TRY(predict_point(f, w, m, c, ask, fm, sizes[i], &run->ws[run->nrows], row));
        run->nrows++;
        p[i].bucket_mb = sizes[i];
        p[i].predicted_ms = row->status == PRED_SKIPPED ? NAN : row->step_ms;
        measured_point(ms, nms, fm, sizes[i], &p[i]);
    }
    predict_bucket_advise(p, n, &a);
    print_family(out, &w[fm->w], fm, p, n, &a);
    return DPS_OK;
}

dps_status predict_bucket_sizes(const predict_folder *f, const predict_workload *w, int nw,
                                const predict_machine *m, const predict_consts *c,
                                const bucket_ask *ask, FILE *out, bucket_run *run)
{
    predict_measured *ms = NULL;
    int nms = 0, max = nw * (ask->ngpus ? ask->ngpus : 1) * MODE_COUNT + 64;
    *run = (bucket_run){0};
    DPS_TRY(predict_from_bucketed(f, w, nw, &ms, &nms));
    bucket_family *fm = calloc((size_t)(max + nms), sizeof *fm);
    int nf = fm ? families(ask, nw, ms, nms, fm, max + nms) : 0;
    run->rows = calloc((size_t)nf * MAX_FAMILY_SIZES + 1, sizeof *run->rows);
    run->ws = calloc((size_t)nf * MAX_FAMILY_SIZES + 1, sizeof *run->ws);
    dps_status rc = fm && run->rows && run->ws ? DPS_OK
                    : dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    if (!rc && !nf)
        rc = dps_fail(DPS_ERR_USAGE, "%s: no ok run with DDP's buckets (ddp, zero1) on 2 or more "
                      "devices beside a one-device run of its series: nothing to advise on; give "
                      "--gpus LIST (and --modes ddp) to predict the sizes alone, or run `dpscale "
                      "sweep --mode ddp --gpus 1,2 --bucket-mb 1,25` into the folder",
                      predict_folder_dir(f));
    for (int i = 0; !rc && i < nf; i++) rc = one_family(f, w, m, c, ask, &fm[i], ms, nms, out, run);
    free(fm);
    free(ms);
    if (rc) predict_bucket_free(run);
    return rc;
}

void predict_bucket_free(bucket_run *run)
{
    free(run->rows); /* the workloads' copies share their arrays with the folder's */
    free(run->ws);
    *run = (bucket_run){0};
}
