/* Calibration of the predictor's constants (see predict_calib.h). Each
 * constant is fitted from measured points (step times, forward times,
 * all-reduces) and held to its physical range, the one the calibration
 * file accepts; the points, the warnings and whether the rows' errors test
 * anything go into the file beside the constants. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/keyfile.h"
#include "core/strategy.h"
#include "predict/predict_calib.h"
#include "core/stats.h"
#include "core/util.h"

enum { K_BUS, K_OVERLAP, K_BASE, K_OVERHEAD, K_SYNC, K_DP_SYNC, K_SCALE, NCONSTS };

#define C(f) offsetof(predict_consts, f)

/* The calibration file's keys; each range is the constant's physical one:
 * efficiencies in (0, 1], overheads and the compute share at least 0. */
static const keyfile_key consts_keys[NCONSTS] = {
    [K_BUS] = KEYFILE_ABOVE("bus_eff", C(bus_eff), 0, 1, "ratio"),
    [K_OVERLAP] = KEYFILE_ABOVE("overlap_eff", C(overlap_eff), 0, 1, "ratio"),
    [K_BASE] = KEYFILE_FROM("base_latency_us", C(base_latency_us), 0, 1e6, "us"),
    [K_OVERHEAD] = KEYFILE_FROM("bucket_overhead_us", C(bucket_overhead_us), 0, 1e6, "us"),
    [K_SYNC] = KEYFILE_FROM("sync_ms", C(sync_ms), 0, 1e6, "ms"),
    [K_DP_SYNC] = KEYFILE_FROM("dp_sync_ms", C(dp_sync_ms), 0, 1e6, "ms"),
    [K_SCALE] = KEYFILE_FROM("compute_scale", C(compute_scale), 0, 1e6, "ratio"),
};

/* What a fit outside its range says about the measurement, and what to
 * measure instead. */
static const char *const out_of_range_fix[NCONSTS] = {
    [K_BUS] = "the all-reduces ran faster than the machine's intra_busbw_gbps allows: measure the "
              "all-reduce at the buckets' sizes (dpscale comm-bench --sizes into the folder) or "
              "give --machine FILE with nccl-tests' busbw",
    [K_OVERLAP] = "the all-reduces beside backward ran faster than those after it: measure more "
                  "steps (--steps) for steadier bucket times",
    [K_OVERHEAD] = "the all-reduces began before their buckets were ready: measure more steps",
    [K_SYNC] = "ddp ran faster than the model allows with no synchronisation: check the machine's "
               "all-reduce (allreduce.csv, or --machine's intra_busbw_gbps) and measure more steps",
    [K_DP_SYNC] = "dp ran faster than the model allows with no synchronisation: check the "
                  "machine's copies (links.csv: dpscale links into the folder, or --machine's "
                  "p2p_gbps) and measure more steps",
    [K_SCALE] = "forward on several devices ran faster than on one: measure more steps (--steps) "
                "for steadier forward medians",
};

#define EFF_MIN 0.01     /* the least efficiency a fit gives */
#define FIT_TOL 1e-6     /* a fit this far past its range is rounding (a bisection's), held silently */
#define FIT_LINES_MAX (NCONSTS + 2 * MODE_COUNT)

/* A warning (stderr) or a note (the report) about the fit; both go into
 * the calibration file as comments. */
typedef struct fit_line {
    int warning;
    char text[512];
} fit_line;

typedef struct fit {
    const predict_machine *m;
    const predict_workload *w; /* the folder's profiles (predict_from_workloads) */
    int nw;
    predict_split *split;      /* [nw] */
    predict_measured *meas;
    int nmeas;
    int points[NCONSTS];       /* the measured points each constant came from; 0: default kept */
    const char *from[NCONSTS]; /* what those points are */
    int bus_from_steps;        /* bus_eff fitted to ddp's step times (no all-reduce measured) */
    int untested[MODE_COUNT];  /* a mode's rows had no more points than constants fitted to them */
    fit_line lines[FIT_LINES_MAX];
    int nlines;
} fit;

static void add_line(fit *f, int warning, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_line(fit *f, int warning, const char *fmt, ...)
{
    if (f->nlines == FIT_LINES_MAX) return;
    fit_line *l = &f->lines[f->nlines++];
    va_list ap;
    va_start(ap, fmt);
    l->warning = warning;
    vsnprintf(l->text, sizeof l->text, fmt, ap);
    va_end(ap);
}

/* "(0, 1]" or "[0, inf)": key k's range as the fit holds it. */
static const char *range_text(const keyfile_key *k, char *buf, size_t len)
{
    if (k->hi >= 1e6) snprintf(buf, len, "%s%g, inf)", k->zero_ok ? "[" : "(", k->lo);
    else snprintf(buf, len, "%s%g, %g]", k->zero_ok ? "[" : "(", k->lo, k->hi);
    return buf;
}

/* Constant k fitted to raw from `points` measured `from`: held to its
 * range, with a warning naming what to measure when it left it. */
static void set_fitted(fit *f, predict_consts *c, int k, double raw, int points, const char *from)
{
    const keyfile_key *key = &consts_keys[k];
    double held = fmin(raw, key->hi);
    if (key->zero_ok ? held < key->lo : held <= key->lo) held = key->zero_ok ? key->lo : EFF_MIN;
    *(double *)((char *)c + key->off) = held;
    f->points[k] = points;
    f->from[k] = from;
    char range[48];
    if (fabs(held - raw) > FIT_TOL)
        add_line(f, 1, "%s = %.4g, fitted to %d point%s (%s), is outside its range %s: held to "
                 "%g; %s", key->key, raw, points, points == 1 ? "" : "s", from,
                 range_text(key, range, sizeof range), held, out_of_range_fix[k]);
}

static void predict_measured_row(const fit *f, const predict_consts *c, int i, predict_row *r)
{
    const predict_measured *x = &f->meas[i];
    predict_config(f->m, &f->w[x->workload], &f->split[x->workload], c, x->mode, x->ngpus, r);
}

/* A row of a sharded strategy (zero1, zero2, fsdp): no constant is
 * fitted to it (its forward holds fsdp's gathers, its step the post-step
 * gathers); its error tests the sharded model with dp's and ddp's constants. */
static int is_sharded(const predict_measured *x)
{
    return dps_strategy_of(x->mode)->shard > 0;
}

/* The sharded rows, left out of the fit, in a note naming their modes. */
static void note_sharded(fit *f)
{
    char modes[64] = "";
    int n = 0, seen[MODE_COUNT] = {0};
    for (int i = 0; i < f->nmeas; i++) {
        if (!is_sharded(&f->meas[i])) continue;
        n++;
        if (seen[f->meas[i].mode]++) continue;
        size_t used = strlen(modes);
        snprintf(modes + used, sizeof modes - used, "%s%s", used ? ", " : "",
                 dps_mode_name(f->meas[i].mode));
    }
    if (n)
        add_line(f, 0, "%d row%s of the sharded strategies (%s) fitted no constant: the constants "
                 "are dp's and ddp's, and %s error%s test%s the sharded model with them", n,
                 n == 1 ? "" : "s", modes, n == 1 ? "its" : "their", n == 1 ? "" : "s",
                 n == 1 ? "s" : "");
}

/* compute_scale: the median of each row's forward slow-down per other
 * device of its node (dp's and ddp's rows). */
static void fit_compute_scale(fit *f, predict_consts *c, double *v)
{
    int n = 0;
    for (int i = 0; i < f->nmeas; i++) {
        const predict_measured *x = &f->meas[i];
        if (is_sharded(x)) continue;
        int together = x->ngpus;
        if (x->forward_1 > 0 && together > 1 && together <= f->m->gpus_per_node)
            v[n++] = (x->forward_ms / x->forward_1 - 1.0) / (together - 1);
    }
    if (n) set_fitted(f, c, K_SCALE, stats_median_or(v, n, 0.0), n, "forward times within a node");
}

/* measured - predicted of one mode's rows into v, each over the times its
 * step pays the mode's synchronisation (dp: once a micro-step), so that
 * their median fits that constant; returns how many. */
static int residuals(const fit *f, const predict_consts *c, dps_mode mode, double *v)
{
    int n = 0;
    predict_row r;
    for (int i = 0; i < f->nmeas; i++) {
        const predict_measured *x = &f->meas[i];
        if (x->mode != mode) continue;
        predict_measured_row(f, c, i, &r);
        if (r.status == PRED_SKIPPED) continue;
        v[n++] = (x->step_ms - r.step_ms) / predict_syncs(&f->w[x->workload], mode);
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
 * least EFF_MIN) at which its median residual is 0. */
static void fit_bus_from_steps(fit *f, predict_consts *c, double *v)
{
    int n = residuals(f, c, MODE_DDP, v);
    double lo = EFF_MIN, hi = 1.0;
    c->bus_eff = 1.0;
    if (!n) return;
    f->bus_from_steps = 1;
    if (ddp_residual(f, c, v) <= 0) lo = 1.0;
    for (int i = 0; lo < 1.0 && i < 40; i++) {
        c->bus_eff = (lo + hi) / 2;
        if (ddp_residual(f, c, v) > 0) hi = c->bus_eff;
        else lo = c->bus_eff;
    }
    set_fitted(f, c, K_BUS, lo, n, "ddp step times, no all-reduce being in buckets.csv");
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
static int fit_after(fit *f, const predict_consts *full, predict_consts *c, double *v, double *wait)
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
    set_fitted(f, c, K_BUS, fmax(EFF_MIN, stats_median_or(v, n, 1.0)), n,
               "all-reduces after backward in buckets.csv");
    set_fitted(f, c, K_OVERHEAD, stats_median_or(wait, n, 0.0), n,
               "waits to begin of the all-reduces after backward in buckets.csv");
    return n;
}

/* Beside backward: overlap_eff, the model's time against the time from
 * start to end less the overhead, over bus_eff (median, at least EFF_MIN). */
static int fit_beside(fit *f, const predict_consts *full, predict_consts *c, double *v)
{
    int n = 0;
    for (int i = 0; i < f->nmeas; i++)
        for (int b = 0; b < f->meas[i].nbk; b++) {
            if (!measured(&f->meas[i], b)) continue;
            bucket_obs o = observe(f, &f->meas[i], b, full);
            double busy = o.elapsed_ms - c->bucket_overhead_us / 1000.0;
            if (o.after == 0 && busy > 0) v[n++] = o.full_ms / busy;
        }
    if (n)
        set_fitted(f, c, K_OVERLAP, fmax(EFF_MIN, stats_median_or(v, n, 1.0) / c->bus_eff), n,
                   "all-reduces beside backward in buckets.csv");
    return n;
}

/* From buckets.csv: after backward, then beside it; v and wait are
 * scratch. 0: no all-reduce measured. */
static int fit_from_buckets(fit *f, predict_consts *c, double *v, double *wait)
{
    predict_consts full = *c;
    full.bus_eff = full.overlap_eff = 1.0;
    int after = fit_after(f, &full, c, v, wait);
    return after + fit_beside(f, &full, c, v) > 0;
}

/* A mode's step times against the constants fitted to them: fewer points
 * than constants is a warning (any split between them fits); no more
 * points than constants leaves the rows' errors testing nothing. */
static void check_points(fit *f, dps_mode mode)
{
    int ddp = mode == MODE_DDP, k = ddp ? K_SYNC : K_DP_SYNC, n = f->points[k];
    int nc = 1 + (ddp && f->bus_from_steps);
    const char *name = dps_mode_name(mode);
    const char *which = nc == 2 ? "bus_eff and sync_ms" : consts_keys[k].key;
    if (!n || n > nc) return;
    if (n < nc) /* only ddp's two from one step time */
        add_line(f, 1, "%s: %d constants (%s) fitted to %d step time: any split between them fits "
                 "it; measure %s on more device counts (dpscale sweep --mode %s --gpus 1,2,4 into "
                 "the folder, with its buckets.csv, which fits bus_eff from the all-reduces)",
                 name, nc, which, n, name, name);
    f->untested[mode] = 1;
    add_line(f, 0, "%s's error is n/a: %d step time%s, %d constant%s (%s) fitted to %s, so no "
             "point is left to test the model against; measure %s on more device counts (dpscale "
             "sweep --mode %s --gpus 1,2,4 into the folder)", name, n, n == 1 ? "" : "s", nc,
             nc == 1 ? "" : "s", which, n == 1 ? "it" : "them", name, name);
}

/* Every constant, in the order each needs the ones before; v and wait:
 * scratch for every measured bucket. */
static void fit_all(fit *f, predict_consts *c, double *v, double *wait)
{
    fit_compute_scale(f, c, v);
    int n = residuals(f, c, MODE_DP, v);
    if (n) set_fitted(f, c, K_DP_SYNC, stats_median_or(v, n, 0.0), n, "dp step times");
    if (!fit_from_buckets(f, c, v, wait)) fit_bus_from_steps(f, c, v);
    n = residuals(f, c, MODE_DDP, v);
    if (n) set_fitted(f, c, K_SYNC, stats_median_or(v, n, 0.0), n, "ddp step times");
    check_points(f, MODE_DP);
    check_points(f, MODE_DDP);
    note_sharded(f);
}

/* Each constant and, as a comment, the points it was fitted from. */
static void write_consts(FILE *out, const fit *f, const predict_consts *c)
{
    for (int k = 0; k < NCONSTS; k++) {
        char line[64];
        snprintf(line, sizeof line, "%s = %.4f", consts_keys[k].key,
                 *(const double *)((const char *)c + consts_keys[k].off));
        if (f->points[k]) fprintf(out, "%-30s # %d point%s: %s\n", line, f->points[k],
                                 f->points[k] == 1 ? "" : "s", f->from[k]);
        else fprintf(out, "%-30s # not fitted: the default\n", line);
    }
}

/* The fit's evidence: each measured row against its prediction; n/a where
 * the row's mode had no more points than constants. */
static void write_rows(FILE *out, const char *lead, const fit *f, const predict_consts *c)
{
    predict_row r;
    fprintf(out, "%s%-44s %5s %5s %11s %11s %8s\n", lead, "configuration", "mode", "gpus",
            "measured_ms", "fitted_ms", "error");
    for (int i = 0; i < f->nmeas; i++) {
        predict_measured_row(f, c, i, &r);
        const predict_measured *x = &f->meas[i];
        char err[16] = "     n/a";
        if (r.status == PRED_SKIPPED) {
            fprintf(out, "%s%-44s %5s %5d %11.3f %11s  skipped: %s\n", lead, x->id,
                    dps_mode_name(x->mode), x->ngpus, x->step_ms, "-", r.note);
            continue;
        }
        if (!f->untested[x->mode])
            snprintf(err, sizeof err, "%+7.1f%%", 100.0 * (r.step_ms - x->step_ms) / x->step_ms);
        fprintf(out, "%s%-44s %5s %5d %11.3f %11.3f %s\n", lead, x->id, dps_mode_name(x->mode),
                x->ngpus, x->step_ms, r.step_ms, err);
    }
}

/* The fit's warnings or notes, each line led by `lead`. */
static void write_lines(FILE *out, const char *lead, const fit *f, int warnings)
{
    for (int i = 0; i < f->nlines; i++)
        if (f->lines[i].warning == warnings)
            fprintf(out, "%s%s: %s\n", lead, warnings ? "warning" : "note", f->lines[i].text);
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
    write_lines(out, "# ", k->f, 1);
    write_consts(out, k->f, k->c);
    write_rows(out, "# ", k->f, k->c);
    write_lines(out, "# ", k->f, 0);
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
                             FILE *warn, predict_consts *c)
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
        write_lines(warn, "dpscale: calibration ", &f, 1);
        write_consts(report, &f, c);
        write_rows(report, "  ", &f, c);
        write_lines(report, "  ", &f, 0);
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
