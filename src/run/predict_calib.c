/* Calibration of the predictor's constants (see predict_calib.h). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/keyfile.h"
#include "run/predict_calib.h"
#include "core/stats.h"
#include "core/util.h"

typedef struct fit {
    const predict_machine *m;
    const predict_workload *w; /* the folder's profiles (predict_from_workloads) */
    int nw;
    predict_split *split;      /* [nw] */
    predict_measured *meas;
    int nmeas;
} fit;

static void predict_measured_row(const fit *f, const predict_consts *c, int i, predict_row *r)
{
    const predict_measured *x = &f->meas[i];
    predict_config(f->m, &f->w[x->workload], &f->split[x->workload], c, x->mode, x->ngpus, r);
}

/* compute_scale: each row's forward slow-down per other device. */
static double fit_compute_scale(const fit *f, double *v)
{
    int n = 0;
    for (int i = 0; i < f->nmeas; i++) {
        const predict_measured *x = &f->meas[i];
        int together = x->ngpus;
        if (x->forward_1 > 0 && together > 1 && together <= f->m->gpus_per_node)
            v[n++] = fmax(0.0, (x->forward_ms / x->forward_1 - 1.0) / (together - 1));
    }
    return stats_median_or(v, n, 0.0);
}

/* measured - predicted of one mode's rows into v; returns how many. */
static int residuals(const fit *f, const predict_consts *c, dps_mode mode, double *v)
{
    int n = 0;
    predict_row r;
    for (int i = 0; i < f->nmeas; i++) {
        if (f->meas[i].mode != mode) continue;
        predict_measured_row(f, c, i, &r);
        if (r.status == PRED_SKIPPED) continue;
        v[n++] = f->meas[i].step_ms - r.step_ms;
    }
    return n;
}

/* The median of ddp's residuals with constants c. */
static double ddp_residual(const fit *f, const predict_consts *c, double *v)
{
    int n = residuals(f, c, MODE_DDP, v);
    return stats_median_or(v, n, 0.0);
}

/* bus_eff without measured buckets: 1 when ddp runs no slower than
 * predicted at the full bus bandwidth, else the efficiency (bisection, at
 * least 0.01) at which its median residual is 0. */
static double bus_eff_from_steps(const fit *f, predict_consts *c, double *v)
{
    c->bus_eff = 1.0;
    if (ddp_residual(f, c, v) <= 0) return 1.0;
    double lo = 0.01, hi = 1.0;
    for (int i = 0; i < 40; i++) {
        c->bus_eff = (lo + hi) / 2;
        if (ddp_residual(f, c, v) > 0) hi = c->bus_eff;
        else lo = c->bus_eff;
    }
    return lo;
}

/* A measured bucket: the model's all-reduce time at the full bus, the
 * wait from when it could start (ready, the one before it done) to its
 * begin, and the time from then to its end. */
typedef struct bucket_obs {
    double full_ms, wait_ms, elapsed_ms;
    int after;   /* 1: mostly after backward ended; 0: ended beside it; -1: neither */
} bucket_obs;

static bucket_obs observe(const fit *f, const predict_measured *x, int b, const predict_consts *full)
{
    int nodes = (x->ngpus + f->m->gpus_per_node - 1) / f->m->gpus_per_node;
    double prev_end = b ? x->bk_begin[b - 1] + x->bk_ms[b - 1] : 0.0;
    double from = fmax(x->bk_ready[b], prev_end), end = x->bk_begin[b] + x->bk_ms[b];
    bucket_obs o = {predict_allreduce_ms(x->bk_bytes[b], x->ngpus, nodes, f->m, full),
                    fmax(0.0, x->bk_begin[b] - from), end - from, -1};
    /* after: most of it past backward's end (the last bucket is ready as
     * backward ends, and begins within noise of it) */
    o.after = x->bk_begin[b] + x->bk_ms[b] / 2 >= x->backward_ms ? 1 : end <= x->backward_ms ? 0 : -1;
    return o;
}

/* Bucket b of x was measured, and so was the one before it. */
static int measured(const predict_measured *x, int b)
{
    return x->mode == MODE_DDP && x->bk_ms[b] > 0 && !isnan(x->bk_begin[b]) &&
           (b == 0 || !isnan(x->bk_begin[b - 1]));
}

/* After backward: bus_eff, the model's time at the full bus against the
 * all-reduce's, and bucket_overhead_us, the wait to begin (medians).
 * Returns how many all-reduces ran after backward. */
static int fit_after(const fit *f, const predict_consts *full, predict_consts *c, double *v,
                     double *wait)
{
    int n = 0;
    for (int i = 0; i < f->nmeas; i++)
        for (int b = 0; b < f->meas[i].nbk; b++) {
            if (!measured(&f->meas[i], b)) continue;
            bucket_obs o = observe(f, &f->meas[i], b, full);
            if (o.after != 1) continue;
            wait[n] = 1000.0 * o.wait_ms;
            v[n++] = o.full_ms / f->meas[i].bk_ms[b];
        }
    if (!n) return 0;
    c->bus_eff = fmax(0.01, stats_median_or(v, n, 1.0));
    c->bucket_overhead_us = stats_median_or(wait, n, 0.0);
    return n;
}

/* Beside backward: overlap_eff, the model's time against the time from
 * start to end less the overhead, over bus_eff (median, 0.01 to 1). */
static int fit_beside(const fit *f, const predict_consts *full, predict_consts *c, double *v)
{
    int n = 0;
    for (int i = 0; i < f->nmeas; i++)
        for (int b = 0; b < f->meas[i].nbk; b++) {
            if (!measured(&f->meas[i], b)) continue;
            bucket_obs o = observe(f, &f->meas[i], b, full);
            double busy = o.elapsed_ms - c->bucket_overhead_us / 1000.0;
            if (o.after == 0 && busy > 0) v[n++] = o.full_ms / busy;
        }
    if (n) c->overlap_eff = fmin(1.0, fmax(0.01, stats_median_or(v, n, 1.0) / c->bus_eff));
    return n;
}

/* From buckets.csv: after backward, then beside it; v and wait are
 * scratch. 0: no all-reduce measured. */
static int fit_from_buckets(const fit *f, predict_consts *c, double *v, double *wait)
{
    predict_consts full = *c;
    full.bus_eff = full.overlap_eff = 1.0;
    int after = fit_after(f, &full, c, v, wait);
    return after + fit_beside(f, &full, c, v) > 0;
}

/* Every constant, in the order each needs the ones before; v and wait:
 * scratch for every measured bucket. */
static void fit_all(const fit *f, predict_consts *c, double *v, double *wait)
{
    c->compute_scale = fit_compute_scale(f, v);
    int n = residuals(f, c, MODE_DP, v);
    c->dp_sync_ms = fmax(0.0, stats_median_or(v, n, 0.0));
    if (!fit_from_buckets(f, c, v, wait)) c->bus_eff = bus_eff_from_steps(f, c, v);
    c->sync_ms = fmax(0.0, ddp_residual(f, c, v));
}

#define C(f) offsetof(predict_consts, f)

static const keyfile_key consts_keys[] = {
    KEYFILE_ABOVE("bus_eff", C(bus_eff), 0, 1e6, "ratio"),
    KEYFILE_ABOVE("overlap_eff", C(overlap_eff), 0, 1e6, "ratio"),
    KEYFILE_FROM("base_latency_us", C(base_latency_us), 0, 1e6, "us"),
    KEYFILE_FROM("bucket_overhead_us", C(bucket_overhead_us), 0, 1e6, "us"),
    KEYFILE_FROM("sync_ms", C(sync_ms), 0, 1e6, "ms"),
    KEYFILE_FROM("dp_sync_ms", C(dp_sync_ms), 0, 1e6, "ms"),
    KEYFILE_FROM("compute_scale", C(compute_scale), 0, 1e6, "ratio"),
};
#define NCONSTS KEYFILE_COUNT(consts_keys)

static void write_consts(FILE *out, const predict_consts *c)
{
    for (int k = 0; k < NCONSTS; k++)
        fprintf(out, "%s = %.4f\n", consts_keys[k].key,
                *(const double *)((const char *)c + consts_keys[k].off));
}

/* The fit's evidence: each measured row against its prediction. */
static void write_rows(FILE *out, const char *lead, const fit *f, const predict_consts *c)
{
    predict_row r;
    fprintf(out, "%s%-44s %5s %5s %11s %11s %8s\n", lead, "configuration", "mode", "gpus",
            "measured_ms", "fitted_ms", "error");
    for (int i = 0; i < f->nmeas; i++) {
        predict_measured_row(f, c, i, &r);
        const predict_measured *x = &f->meas[i];
        if (r.status == PRED_SKIPPED) {
            fprintf(out, "%s%-44s %5s %5d %11.3f %11s  skipped: %s\n", lead, x->id,
                    dps_mode_name(x->mode), x->ngpus, x->step_ms, "-", r.note);
            continue;
        }
        fprintf(out, "%s%-44s %5s %5d %11.3f %11.3f %+7.1f%%\n", lead, x->id, dps_mode_name(x->mode),
                x->ngpus, x->step_ms, r.step_ms, 100.0 * (r.step_ms - x->step_ms) / x->step_ms);
    }
}

typedef struct calib_file {
    const char *dir;
    const fit *f;
    const predict_consts *c;
} calib_file;

static void write_file(FILE *out, void *ctx)
{
    const calib_file *k = ctx;
    fprintf(out, "# dpscale predict calibration, fitted to the measured runs of %s\n"
            "# on machine %s (%d devices a node, all-reduce busbw %.3f GB/s).\n"
            "# Read with: dpscale predict --calibration FILE ...\n", k->dir, k->f->m->name,
            k->f->m->gpus_per_node, k->f->m->intra_busbw_gbps);
    write_consts(out, k->c);
    write_rows(out, "# ", k->f, k->c);
}

static dps_status load_fit(const predict_folder *folder, const predict_machine *m,
                           const predict_workload *w, int nw, fit *f)
{
    *f = (fit){.m = m, .w = w, .nw = nw};
    f->split = calloc((size_t)f->nw, sizeof *f->split);
    dps_status rc = f->split ? DPS_OK : dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    for (int i = 0; !rc && i < f->nw; i++) rc = predict_split_step(m, &f->w[i], &f->split[i]);
    if (!rc) rc = predict_from_measured(folder, f->w, f->nw, &f->meas, &f->nmeas);
    if (!rc && !f->nmeas)
        rc = dps_fail(DPS_ERR_USAGE, "%s: no ok weak-scaling configuration on 2 or more devices "
                      "beside a one-device one of its series (ddp: overlapping, the same bucket "
                      "cap): nothing to calibrate against (run `dpscale sweep --gpus 1,2 --out "
                      "PARENT --name FOLDER` into it)", predict_folder_dir(folder));
    return rc;
}

static void free_fit(fit *f)
{
    free(f->split);
    free(f->meas);
}

dps_status predict_calibrate(const predict_folder *folder, const predict_machine *m,
                             const predict_workload *w, int nw, const char *path, FILE *report,
                             predict_consts *c)
{
    fit f;
    predict_consts_default(c);
    dps_status rc = load_fit(folder, m, w, nw, &f);
    /* room for every measured bucket, twice */
    size_t room = (size_t)f.nmeas * PREDICT_MEASURED_BUCKETS + 1;
    double *v = rc ? NULL : malloc(2 * room * sizeof *v);
    if (!rc && !v) rc = dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    if (!rc) {
        fit_all(&f, c, v, v + room);
        calib_file k = {predict_folder_dir(folder), &f, c};
        rc = dps_replace_file(path, write_file, &k);
        write_consts(report, c);
        write_rows(report, "  ", &f, c);
    }
    free(v);
    free_fit(&f);
    return rc;
}

dps_status predict_consts_load(const char *path, predict_consts *c)
{
    int line_of[NCONSTS];
    return keyfile_read_keys(path, "calibration file", consts_keys, NCONSTS, c, line_of);
}
