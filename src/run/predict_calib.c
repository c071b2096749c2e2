/* Calibration of the predictor's constants (see predict_calib.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/keyfile.h"
#include "run/predict_calib.h"
#include "core/util.h"

typedef struct fit {
    const predict_machine *m;
    predict_workload *w;
    int nw;
    predict_split *split;      /* [nw] */
    predict_measured *meas;
    int nmeas;
} fit;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place); `none` when n is 0. */
static double median_or(double *v, int n, double none)
{
    if (!n) return none;
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

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
        int together = x->ngpus < f->m->gpus_per_node ? x->ngpus : f->m->gpus_per_node;
        if (x->forward_1 > 0 && together > 1)
            v[n++] = fmax(0.0, (x->forward_ms / x->forward_1 - 1.0) / (together - 1));
    }
    return median_or(v, n, 0.0);
}

/* measured - predicted of one mode's rows into v, their bucket counts into nb. */
static int residuals(const fit *f, const predict_consts *c, dps_mode mode, double *v, double *nb)
{
    int n = 0;
    predict_row r;
    for (int i = 0; i < f->nmeas; i++) {
        if (f->meas[i].mode != mode) continue;
        predict_measured_row(f, c, i, &r);
        if (r.status == PRED_SKIPPED) continue;
        nb[n] = r.nbuckets;
        v[n++] = f->meas[i].step_ms - r.step_ms;
    }
    return n;
}

/* The median of ddp's residuals with constants c. */
static double ddp_residual(const fit *f, const predict_consts *c, double *v, double *nb)
{
    int n = residuals(f, c, MODE_DDP, v, nb);
    return median_or(v, n, 0.0);
}

/* bus_eff: 1 when ddp runs no slower than predicted at the full bus
 * bandwidth, else the efficiency (bisection) at which its median residual
 * is 0: all-reduces that share the host with backward run slower. */
static void fit_bus_eff(const fit *f, predict_consts *c, double *v, double *nb)
{
    c->bus_eff = 1.0;
    if (ddp_residual(f, c, v, nb) <= 0) return;
    double lo = 0.01, hi = 1.0;
    for (int i = 0; i < 40; i++) {
        c->bus_eff = (lo + hi) / 2;
        if (ddp_residual(f, c, v, nb) > 0) hi = c->bus_eff;
        else lo = c->bus_eff;
    }
    c->bus_eff = lo;
}

/* ddp's residual left as sync_ms + nbuckets x bucket_overhead_us (least
 * squares when the rows have different bucket counts, else all sync_ms). */
static void fit_ddp_terms(const fit *f, predict_consts *c, double *v, double *nb)
{
    int n = residuals(f, c, MODE_DDP, v, nb);
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) sx += nb[i], sy += v[i], sxx += nb[i] * nb[i], sxy += nb[i] * v[i];
    double den = n * sxx - sx * sx, slope = den > 1e-9 ? (n * sxy - sx * sy) / den : 0.0;
    c->bucket_overhead_us = fmax(0.0, 1000.0 * slope);
    for (int i = 0; i < n; i++) v[i] -= nb[i] * c->bucket_overhead_us / 1000.0;
    c->sync_ms = fmax(0.0, median_or(v, n, 0.0));
}

static void fit_all(const fit *f, predict_consts *c, double *v, double *nb)
{
    c->compute_scale = fit_compute_scale(f, v);
    int n = residuals(f, c, MODE_DP, v, nb);
    c->dp_sync_ms = fmax(0.0, median_or(v, n, 0.0));
    fit_bus_eff(f, c, v, nb);
    fit_ddp_terms(f, c, v, nb);
}

static void write_consts(FILE *out, const predict_consts *c)
{
    fprintf(out, "bus_eff = %.4f\nbase_latency_us = %.3f\nbucket_overhead_us = %.3f\n"
            "sync_ms = %.4f\ndp_sync_ms = %.4f\ncompute_scale = %.4f\n", c->bus_eff,
            c->base_latency_us, c->bucket_overhead_us, c->sync_ms, c->dp_sync_ms, c->compute_scale);
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

static dps_status load_fit(const char *dir, const predict_machine *m, fit *f)
{
    *f = (fit){.m = m};
    DPS_TRY(predict_from_workloads(dir, &f->w, &f->nw));
    f->split = calloc((size_t)f->nw, sizeof *f->split);
    dps_status rc = f->split ? DPS_OK : dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    for (int i = 0; !rc && i < f->nw; i++) rc = predict_split_step(m, &f->w[i], &f->split[i]);
    if (!rc) rc = predict_from_measured(dir, f->w, f->nw, &f->meas, &f->nmeas);
    if (!rc && !f->nmeas)
        rc = dps_fail(DPS_ERR_USAGE, "%s: no ok configuration on 2 or more devices beside a "
                      "one-device one of its series: nothing to calibrate against (run `dpscale "
                      "sweep --gpus 1,2 --out ... --name ...` into it)", dir);
    return rc;
}

static void free_fit(fit *f)
{
    predict_from_free(f->w, f->nw);
    free(f->split);
    free(f->meas);
}

dps_status predict_calibrate(const char *dir, const predict_machine *m, const char *path,
                             FILE *report, predict_consts *c)
{
    fit f;
    predict_consts_default(c);
    dps_status rc = load_fit(dir, m, &f);
    double *v = rc ? NULL : malloc(2 * ((size_t)f.nmeas + 1) * sizeof *v);
    if (!rc && !v) rc = dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    if (!rc) {
        fit_all(&f, c, v, v + f.nmeas + 1);
        calib_file k = {dir, &f, c};
        rc = dps_replace_file(path, write_file, &k);
        write_consts(report, c);
        write_rows(report, "  ", &f, c);
    }
    free(v);
    free_fit(&f);
    return rc;
}

static dps_status set_const(void *ctx, const char *path, int line, const char *key, const char *val)
{
    static const char *const keys[] = {"bus_eff", "base_latency_us", "bucket_overhead_us",
                                       "sync_ms", "dp_sync_ms", "compute_scale"};
    predict_consts *c = ctx;
    double *dst[] = {&c->bus_eff, &c->base_latency_us, &c->bucket_overhead_us, &c->sync_ms,
                     &c->dp_sync_ms, &c->compute_scale};
    double x;
    for (int i = 0; i < 6; i++) {
        if (strcmp(key, keys[i]) != 0) continue;
        if (dps_parse_f64(val, &x) || !isfinite(x) || x < 0 || x > 1e6 || (i == 0 && x == 0))
            return keyfile_fail(path, line, "%s = %s: expected a number %s 0, at most 1e6", key, val,
                                i == 0 ? "above" : "from");
        *dst[i] = x;
        return DPS_OK;
    }
    return keyfile_fail(path, line, "unknown key '%s' (expected bus_eff, base_latency_us, "
                        "bucket_overhead_us, sync_ms, dp_sync_ms, compute_scale)", key);
}

dps_status predict_consts_load(const char *path, predict_consts *c)
{
    return keyfile_read(path, "calibration file", set_const, c);
}
