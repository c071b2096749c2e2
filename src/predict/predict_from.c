/* `predict --from` (see predict_from.h): runs.csv's one-device rows, their
 * phases, memory and model; links.csv, allreduce.csv and devices.csv. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/predict_from.h"
#include "config/config.h"
#include "core/csv_table.h"
#include "core/strategy.h"
#include "core/util.h"
#include "model/bucket.h"
#include "model/model_file.h"

#define CELL CSV_TABLE_CELL

/* runs.csv's columns the workloads need, looked up once; from R_ACCUM on
 * those a folder written before them lacks (read as empty: accum 1, no_sync
 * on). */
enum { R_ID, R_STATUS, R_MODE, R_NGPUS, R_MODEL, R_LAYERS, R_WIDTH, R_TOKENS, R_CLASSES,
       R_PARAMS, R_PRECISION, R_OPTIMIZER, R_BATCH, R_SCALING, R_BUCKET, R_STEP, R_BUSBW,
       R_OVERLAP, R_ACCUM, R_NO_SYNC, R_P10, R_P90, R_NCOLS };
static const char *const run_cols[R_NCOLS] = {"config_id", "status", "mode", "ngpus", "model",
    "layers", "width", "tokens", "classes", "params", "precision", "optimizer", "batch_per_gpu",
    "scaling", "bucket_mb", "step_ms_median", "busbw_gbps", "overlap", "accum", "no_sync",
    "step_ms_p10", "step_ms_p90"};

typedef struct runs_view {
    csv_table t;
    int col[R_NCOLS];
} runs_view;

struct predict_folder {
    char dir[DPS_PATH_MAX];
    runs_view v;
    csv_table ph, mem, bk;  /* phases.csv; memory.csv and buckets.csv when present */
    int have_mem, have_bk;
};

/* Column name's index, or -1 when the table lacks it (a folder written
 * before it). */
static int optional_col(const csv_table *t, const char *name)
{
    for (int c = 0; c < t->ncols; c++)
        if (strcmp(t->cols[c], name) == 0) return c;
    return -1;
}

static const char *cell(const runs_view *v, int r, int c, char *buf)
{
    if (v->col[c] < 0) return buf[0] = '\0', buf; /* a column the folder predates */
    return csv_table_cell(&v->t, r, v->col[c], buf, CELL);
}

/* Row r's micro-batches per optimizer step: 1 where empty or absent. */
static int accum_cell(const runs_view *v, int r)
{
    char a[CELL];
    int n = atoi(cell(v, r, R_ACCUM, a));
    return n > 1 ? n : 1;
}

/* Row r is ddp with --no-sync off (every micro-step all-reduced). */
static int is_sync_all(const runs_view *v, int r)
{
    char a[CELL];
    return strcmp(cell(v, r, R_NO_SYNC, a), "off") == 0;
}

/* Row r's configuration id into id (PREDICT_ID_MAX bytes). */
static dps_status row_id(const runs_view *v, int r, char *id)
{
    char a[CELL];
    if (strlen(cell(v, r, R_ID, a)) < PREDICT_ID_MAX && a[0]) {
        memcpy(id, a, strlen(a) + 1);
        return DPS_OK;
    }
    return dps_fail(DPS_ERR_USAGE, "%s:%d: config_id empty or longer than %d characters (not "
                    "dpscale's runs.csv; run the configurations again)", v->t.path,
                    v->t.line[r + 1], PREDICT_ID_MAX - 1);
}

static int int_cell(const runs_view *v, int r, int c)
{
    char a[CELL];
    return atoi(cell(v, r, c, a));
}

/* Row r's strategy, by its word in dps_mode_names; MODE_COUNT for a word
 * of none (runs.csv's readers refuse one). */
static dps_mode mode_cell(const runs_view *v, int r)
{
    char a[CELL];
    cell(v, r, R_MODE, a);
    for (int m = 0; m < MODE_COUNT; m++)
        if (strcmp(a, dps_mode_names[m]) == 0) return (dps_mode)m;
    return MODE_COUNT;
}

/* Row r's strategy all-reduces DDP's buckets (ddp, zero1). */
static int is_bucketed(const runs_view *v, int r)
{
    dps_mode m = mode_cell(v, r);
    return m < MODE_COUNT && dps_strategy_of(m)->buckets;
}

/* An ok weak-scaling row on `one` (1) or on more devices (0). */
static int is_weak_ok(const runs_view *v, int r, int one)
{
    char a[CELL], b[CELL];
    return strcmp(cell(v, r, R_STATUS, a), "ok") == 0 && strcmp(cell(v, r, R_SCALING, b), "strong") != 0 &&
           (one ? int_cell(v, r, R_NGPUS) == 1 : int_cell(v, r, R_NGPUS) >= 2);
}

/* A weak-scaling one-device ok row: the profile of its series. */
static int is_profile(const runs_view *v, int r) { return is_weak_ok(v, r, 1); }

/* Rows r and q train the same series (model, shape, precision, optimizer,
 * batch, accumulation). */
static int same_series(const runs_view *v, int r, int q)
{
    static const int keys[] = {R_MODEL, R_LAYERS, R_WIDTH, R_TOKENS, R_CLASSES, R_PRECISION,
                               R_OPTIMIZER, R_BATCH, R_ACCUM};
    char a[CELL], b[CELL];
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (strcmp(cell(v, r, keys[k], a), cell(v, q, keys[k], b)) != 0) return 0;
    return 1;
}

/* What the rows of config id hold in column `value`, where column `match`
 * (when given) equals `want`: their sum, largest and count (an empty cell
 * counts as 0). */
typedef struct rows_total {
    double sum, max;
    int n;
} rows_total;

static dps_status total_rows(const csv_table *t, const char *id, const char *match,
                             const char *want, const char *value, rows_total *out)
{
    int ci, cm = -1, cv;
    char a[CELL], b[CELL];
    DPS_TRY(csv_table_col(t, "config_id", &ci));
    DPS_TRY(csv_table_col(t, value, &cv));
    if (match) DPS_TRY(csv_table_col(t, match, &cm));
    *out = (rows_total){0.0, 0.0, 0};
    for (int r = 0; r < t->nrows; r++) {
        if (strcmp(csv_table_cell(t, r, ci, a, CELL), id) != 0) continue;
        if (match && strcmp(csv_table_cell(t, r, cm, b, CELL), want) != 0) continue;
        double x;
        DPS_TRY(csv_table_num(t, r, cv, 1, 0.0, &x));
        out->sum += x;
        out->max = out->n++ ? fmax(out->max, x) : x;
    }
    return DPS_OK;
}

static dps_status sum_rows(const csv_table *t, const char *id, const char *match, const char *want,
                           const char *value, double *sum)
{
    rows_total x;
    DPS_TRY(total_rows(t, id, match, want, value, &x));
    *sum = x.sum;
    return DPS_OK;
}

/* Phase medians (phases.csv, a step's: its micro-steps summed) into the
 * workload's split: the rest of the step's median (time between the
 * phases) counts as forward; phases whose medians add up to more than the
 * step's are scaled down to it. */
static dps_status phase_medians(const csv_table *ph, const char *id, double step, predict_workload *w)
{
    static const char *const fwd[] = {"replicate", "scatter", "forward", "gather", "loss"};
    double x, in_bytes;
    w->forward_ms = 0;
    for (size_t k = 0; k < sizeof fwd / sizeof fwd[0]; k++) {
        DPS_TRY(sum_rows(ph, id, "phase", fwd[k], "median_ms", &x));
        w->forward_ms += x;
    }
    DPS_TRY(sum_rows(ph, id, "phase", "load", "median_ms", &w->load_ms));
    DPS_TRY(sum_rows(ph, id, "phase", "backward", "median_ms", &w->backward_ms));
    DPS_TRY(sum_rows(ph, id, "phase", "optimizer", "median_ms", &w->optimizer_ms));
    DPS_TRY(sum_rows(ph, id, "phase", "unscale", "median_ms", &w->unscale_ms)); /* 0: none */
    DPS_TRY(sum_rows(ph, id, "phase", "load", "bytes_per_step", &in_bytes));
    double sum = w->load_ms + w->forward_ms + w->backward_ms + w->optimizer_ms + w->unscale_ms;
    if (step > sum) w->forward_ms += step - sum;
    double k = step < sum && sum > 0 ? step / sum : 1.0;
    w->load_ms *= k, w->forward_ms *= k, w->backward_ms *= k, w->optimizer_ms *= k;
    w->unscale_ms *= k;
    w->step_ms_1gpu = w->load_ms + w->forward_ms + w->backward_ms + w->optimizer_ms + w->unscale_ms;
    w->input_bytes_per_sample = in_bytes / w->batch_per_gpu;
    if (w->forward_ms > 0 && w->backward_ms > 0) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "%s: configuration %s has no forward or backward time (run it "
                    "again)", ph->path, id);
}

/* Reads the model file at path into w when it holds `params` parameters;
 * 1 when it did, 0 (and why) when it cannot be read or holds another model. */
static int model_file_tensors(const char *path, double params, predict_workload *w,
                              dps_status *rc, char *why, size_t len)
{
    model_file mf;
    if (model_file_read(path, &mf) != DPS_OK) {
        snprintf(why, len, "%.600s", dps_errmsg());
        return 0;
    }
    size_t has = model_file_params(&mf);
    if ((double)has == params) *rc = predict_workload_from_model(&mf, w);
    model_file_free(&mf);
    if ((double)has == params) return w->params = params, 1;
    snprintf(why, len, "%.400s holds another model (%zu parameters)", path, has);
    return 0;
}

/* A row that ran a model file: the folder's copy of it (models/NAME.model,
 * written by the run), else a preset's of the models folder with the row's
 * parameter count (a folder from before the copies), else refused. */
static dps_status file_tensors(const char *dir, const runs_view *v, int r, double params,
                               predict_workload *w)
{
    char model[CELL], name[DPS_NAME_MAX + 8], path[DPS_PATH_MAX + DPS_NAME_MAX + 16];
    char why[DPS_ERRMSG_MAX] = "";
    dps_status rc = DPS_OK;
    cell(v, r, R_MODEL, model);
    snprintf(path, sizeof path, "%s/%s/%s", dir, MODEL_COPY_DIR,
             config_model_copy_name(model, name, sizeof name));
    if (dps_file_exists(path)) {
        if (model_file_tensors(path, params, w, &rc, why, sizeof why)) return rc;
        return dps_fail(DPS_ERR_USAGE, "%s: configuration %s ran the model file '%s' (%.0f "
                        "parameters), but the folder's copy of it does not: %s", v->t.path,
                        w->source, model, params, why);
    }
    const model_preset *p = model_find_preset(model);
    if (p && p->file &&
        model_file_tensors(model_preset_path(p, path, sizeof path), params, w, &rc, why, sizeof why))
        return rc;
    snprintf(path, sizeof path, "%s/%s/%s", dir, MODEL_COPY_DIR, name);
    return dps_fail(DPS_ERR_USAGE, "%s: configuration %s ran the model file '%s' (%.0f parameters) "
                    "and %s, the copy of it a run keeps in its folder, is not there (a folder "
                    "written before dpscale kept them)%s%s: copy the file the run was given "
                    "there (mkdir -p %s/%s && cp FILE %s), or run the configuration again",
                    v->t.path, w->source, model, params, path, why[0] ? "; its preset's: " : "",
                    why, dir, MODEL_COPY_DIR, path);
}

/* The model's tensors, as the run's DDP bucketed them (bucket_model_params),
 * or its model file's. */
static dps_status model_tensors(const char *dir, const runs_view *v, int r, predict_workload *w)
{
    model_shape s = {int_cell(v, r, R_LAYERS), int_cell(v, r, R_WIDTH), int_cell(v, r, R_TOKENS),
                     int_cell(v, r, R_CLASSES)};
    double params = 0;
    DPS_TRY(csv_table_num(&v->t, r, v->col[R_PARAMS], 0, 0, &params));
    if ((double)model_param_count(s) != params) return file_tensors(dir, v, r, params, w);
    w->tensors = malloc((2 * BUCKET_MAX_LAYERS + 2) * sizeof *w->tensors);
    w->tensor_unit = malloc((2 * BUCKET_MAX_LAYERS + 2) * sizeof *w->tensor_unit);
    if (!w->tensors || !w->tensor_unit) return dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    w->ntensors = bucket_model_params(s, w->tensors, 2 * BUCKET_MAX_LAYERS + 2);
    for (int t = 0; t < w->ntensors; t++) w->tensor_unit[t] = t / 2; /* net.c's: a layer's weight
                                                                      * and bias */
    w->params = (double)model_param_count(s);
    w->output_bytes_per_sample = 4.0 * s.tokens * s.classes; /* fp32 logits */
    return DPS_OK;
}

/* A precision's word as runs.csv writes it; fp32 for any other. */
static dps_precision precision_of(const char *word)
{
    for (int p = 0; p < PREC_COUNT; p++)
        if (strcmp(word, dps_precision_names[p]) == 0) return (dps_precision)p;
    return PREC_FP32;
}

/* What the run said of itself: its name, optimizer, precision (and so the
 * bytes of a gradient), batch and accumulation. */
static dps_status run_facts(const runs_view *v, int r, predict_workload *w)
{
    char model[CELL], prec[CELL], opt[CELL], acc[16] = "";
    cell(v, r, R_MODEL, model);
    cell(v, r, R_PRECISION, prec);
    cell(v, r, R_OPTIMIZER, opt);
    w->batch_per_gpu = int_cell(v, r, R_BATCH);
    w->accum = accum_cell(v, r);
    if (w->accum > 1) snprintf(acc, sizeof acc, "-acc%d", w->accum);
    snprintf(w->name, sizeof w->name, "%.40s-%.8s-%.8s-b%d%s", model, prec, opt, w->batch_per_gpu,
             acc);
    dps_strlcpy(w->model, model, sizeof w->model);
    DPS_TRY(row_id(v, r, w->source));
    w->optimizer = strcmp(opt, "adamw") == 0 ? OPT_ADAMW : OPT_SGD;
    w->precision = precision_of(prec);
    w->bytes_per_grad = predict_grad_bytes(w->precision);
    if (w->batch_per_gpu > 0 && int_cell(v, r, R_LAYERS) >= 0 && int_cell(v, r, R_WIDTH) > 0)
        return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "%s: configuration %s: no batch or shape (run it again)",
                    v->t.path, w->source);
}

/* The profile of row r's series: its fastest one-device row (the nearest
 * to one device without a strategy, which neither dp's threads nor ddp's
 * buckets add to). */
static int profile_row(const runs_view *v, int r)
{
    int best = r;
    double best_ms = INFINITY, x;
    for (int q = 0; q < v->t.nrows; q++)
        if (is_profile(v, q) && same_series(v, r, q) &&
            csv_table_num(&v->t, q, v->col[R_STEP], 0, 0, &x) == DPS_OK && x < best_ms)
            best = q, best_ms = x;
    return best;
}

/* Row q all-reduces DDP's buckets (ddp, zero1) overlapping backward. */
static int is_ddp_overlap(const runs_view *v, int q)
{
    char b[CELL];
    return is_bucketed(v, q) && strcmp(cell(v, q, R_OVERLAP, b), "0") != 0;
}

/* The series' one-device row with DDP's buckets that overlaps, with
 * no_sync on where there is one, or -1. */
static int ddp_row(const runs_view *v, int r)
{
    int found = -1;
    for (int q = 0; q < v->t.nrows; q++)
        if (is_profile(v, q) && same_series(v, r, q) && is_ddp_overlap(v, q)) {
            if (!is_sync_all(v, q)) return q;
            if (found < 0) found = q;
        }
    return found;
}

/* Row q's bucket cap, MiB; 25 (DDP's) when it has none (dp). */
static double bucket_cap(const runs_view *v, int q)
{
    char a[CELL];
    double mb;
    return dps_parse_f64(cell(v, q, R_BUCKET, a), &mb) == 0 && mb > 0 ? mb : 25.0;
}

/* The last micro-step of config id that all-reduced (its rows of
 * buckets.csv; 0 without the column): the one whose backward the
 * all-reduces overlap. */
static dps_status last_micro(const csv_table *bk, int cid, const char *id, int *last)
{
    int cm = optional_col(bk, "micro_step");
    char a[CELL];
    double x;
    *last = 0;
    for (int r = 0; cm >= 0 && r < bk->nrows; r++) {
        if (strcmp(csv_table_cell(bk, r, cid, a, CELL), id) != 0) continue;
        DPS_TRY(csv_table_num(bk, r, cm, 1, 0.0, &x));
        if (x > *last) *last = (int)x;
    }
    return DPS_OK;
}

/* Row r of buckets.csv is of micro-step `micro` (cm: its column; -1:
 * none, every row is). */
static int in_micro(const csv_table *bk, int r, int cm, int micro)
{
    char a[CELL];
    return cm < 0 || atoi(csv_table_cell(bk, r, cm, a, CELL)) == micro;
}

/* Row r of buckets.csv is a bucket's all-reduce (zero1's rows hold its
 * units' all-gathers too; folders before the column, only all-reduces). */
static int is_allreduce(const csv_table *bk, int r)
{
    int cc = optional_col(bk, "collective");
    char a[CELL];
    return cc < 0 || strcmp(csv_table_cell(bk, r, cc, a, CELL), dps_collective_names[0]) == 0;
}

/* Each bucket's ready time in backward (buckets.csv, rank 0 of config id,
 * its last micro-step) over a micro-step's backward (phases.csv's median of
 * the step over its accum micro-steps): w->ready, when every bucket has one. */
static dps_status bucket_ready(const predict_folder *f, const char *id, int accum,
                               predict_workload *w)
{
    const csv_table *bk = &f->bk;
    int cid, crank, cready, n = 0, micro, cm = optional_col(bk, "micro_step");
    double bwd, x;
    char a[CELL], b[CELL];
    if (!f->have_bk) return DPS_OK; /* ready times from the tensors */
    DPS_TRY(csv_table_col(bk, "config_id", &cid));
    DPS_TRY(csv_table_col(bk, "rank", &crank));
    DPS_TRY(csv_table_col(bk, "ready_ms", &cready));
    DPS_TRY(last_micro(bk, cid, id, &micro));
    DPS_TRY(sum_rows(&f->ph, id, "phase", "backward", "median_ms", &bwd));
    bwd /= accum;
    w->ready = malloc(((size_t)bk->nrows + 1) * sizeof *w->ready);
    if (!w->ready) return dps_fail(DPS_ERR_RUNTIME, "out of host memory reading buckets.csv");
    for (int r = 0; r < bk->nrows; r++) {
        if (strcmp(csv_table_cell(bk, r, cid, a, CELL), id) != 0 ||
            strcmp(csv_table_cell(bk, r, crank, b, CELL), "0") != 0 || !in_micro(bk, r, cm, micro) ||
            !is_allreduce(bk, r))
            continue;
        DPS_TRY(csv_table_num(bk, r, cready, 0, 0, &x));
        if (bwd > 0) w->ready[n++] = fmin(1.0, fmax(0.0, x / bwd));
    }
    w->nready = n;
    return DPS_OK;
}

static dps_status one_workload(const predict_folder *f, int r, predict_workload *w)
{
    const runs_view *v = &f->v;
    double step, act = 0;
    char ddp_id[CELL];
    predict_workload_defaults(w);
    DPS_TRY(run_facts(v, r, w));
    DPS_TRY(model_tensors(f->dir, v, r, w));
    DPS_TRY(csv_table_num(&v->t, r, v->col[R_STEP], 0, 0, &step));
    DPS_TRY(phase_medians(&f->ph, w->source, step, w));
    int q = ddp_row(v, r);
    w->bucket_mb = bucket_cap(v, q >= 0 ? q : r);
    w->sync_all = q >= 0 && is_sync_all(v, q);
    if (q >= 0) DPS_TRY(bucket_ready(f, cell(v, q, R_ID, ddp_id), w->accum, w));
    if (f->have_mem) DPS_TRY(sum_rows(&f->mem, w->source, "kind", "activations", "bytes_at_peak", &act));
    w->activation_bytes_per_sample = act * w->accum / w->batch_per_gpu; /* a micro-batch's */
    return DPS_OK;
}

/* No configuration twice: its detail rows would be summed. */
static dps_status each_once(const runs_view *v)
{
    char a[CELL], b[CELL];
    for (int r = 0; r < v->t.nrows; r++)
        for (int q = 0; q < r; q++)
            if (strcmp(cell(v, r, R_ID, a), cell(v, q, R_ID, b)) == 0)
                return dps_fail(DPS_ERR_USAGE, "%s:%d: configuration %s again (first at line %d): "
                                "not a folder dpscale keeps; run it into a folder of its own",
                                v->t.path, v->t.line[r + 1], a, v->t.line[q + 1]);
    return DPS_OK;
}

static dps_status open_runs(const char *dir, runs_view *v)
{
    DPS_TRY(csv_table_open(dir, "runs.csv", "not a results folder: dpscale run or sweep writes it", &v->t));
    dps_status rc = DPS_OK;
    for (int c = 0; !rc && c < R_ACCUM; c++) rc = csv_table_col(&v->t, run_cols[c], &v->col[c]);
    for (int c = R_ACCUM; c < R_NCOLS; c++) v->col[c] = optional_col(&v->t, run_cols[c]);
    if (!rc) rc = each_once(v);
    if (rc) csv_table_free(&v->t);
    return rc;
}

/* Each series once: its first weak-scaling one-device row. */
static int first_of_series(const runs_view *v, int r)
{
    for (int q = 0; q < r; q++)
        if (is_profile(v, q) && same_series(v, r, q)) return 0;
    return is_profile(v, r);
}

dps_status predict_folder_open(const char *dir, predict_folder **f)
{
    *f = calloc(1, sizeof **f);
    if (!*f) return dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    dps_strlcpy((*f)->dir, dir, sizeof (*f)->dir);
    dps_status rc = open_runs(dir, &(*f)->v);
    if (!rc) rc = csv_table_open(dir, "phases.csv", "dpscale run or sweep writes it", &(*f)->ph);
    if (!rc) rc = csv_table_open_optional(dir, "memory.csv", &(*f)->mem, &(*f)->have_mem);
    if (!rc) rc = csv_table_open_optional(dir, "buckets.csv", &(*f)->bk, &(*f)->have_bk);
    if (rc) predict_folder_close(*f), *f = NULL;
    return rc;
}

void predict_folder_close(predict_folder *f)
{
    if (!f) return;
    csv_table_free(&f->v.t); /* each free of a table never loaded frees nothing */
    csv_table_free(&f->ph);
    csv_table_free(&f->mem);
    csv_table_free(&f->bk);
    free(f);
}

const char *predict_folder_dir(const predict_folder *f) { return f->dir; }

dps_status predict_from_workloads(const predict_folder *f, predict_workload **w, int *nw)
{
    const runs_view *vp = &f->v;
    *w = calloc((size_t)vp->t.nrows + 1, sizeof **w);
    *nw = 0;
    dps_status rc = *w ? DPS_OK : dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    for (int r = 0; !rc && r < vp->t.nrows; r++)
        if (first_of_series(vp, r)) rc = one_workload(f, profile_row(vp, r), &(*w)[(*nw)++]);
    if (!rc && !*nw)
        rc = dps_fail(DPS_ERR_USAGE, "%s: no weak-scaling one-device configuration with status ok "
                      "(run `dpscale run --gpus 1 --out PARENT --name FOLDER` into it first)",
                      vp->t.path);
    if (rc) predict_from_free(*w, *nw), *w = NULL, *nw = 0;
    return rc;
}

void predict_from_free(predict_workload *w, int nw)
{
    for (int i = 0; w && i < nw; i++) predict_workload_free(&w[i]);
    free(w);
}

/* id's rows in buckets.csv (bk, present) of its last micro-step that
 * all-reduced (the one beside whose backward they ran): each bucket's
 * size, and of the rank whose all-reduce began last (the one the others
 * waited for, so its time is the collective's own) its ready time, begin
 * and time. */
static dps_status measured_buckets(const csv_table *bk, const char *id, predict_measured *m)
{
    static const char *const names[] = {"config_id", "bucket", "bytes", "ready_ms",
                                        "allreduce_begin_ms", "allreduce_ms"};
    int col[6], micro, cm = optional_col(bk, "micro_step");
    char a[CELL];
    double x[5];
    for (int i = 0; i < 6; i++) DPS_TRY(csv_table_col(bk, names[i], &col[i]));
    DPS_TRY(last_micro(bk, col[0], id, &micro));
    for (int r = 0; r < bk->nrows; r++) {
        if (strcmp(csv_table_cell(bk, r, col[0], a, CELL), id) != 0 || !in_micro(bk, r, cm, micro) ||
            !is_allreduce(bk, r))
            continue;
        for (int i = 0; i < 5; i++) DPS_TRY(csv_table_num(bk, r, col[i + 1], i >= 3, NAN, &x[i]));
        int b = (int)x[0];
        if (b < 0 || b >= PREDICT_MEASURED_BUCKETS) continue;
        if (b >= m->nbk) { /* first row of this bucket (and of any skipped before it) */
            for (int k = m->nbk; k <= b; k++) m->bk_begin[k] = NAN, m->bk_ms[k] = 0;
            m->nbk = b + 1;
        } else if (!(x[3] > m->bk_begin[b])) {
            continue; /* a rank that began earlier */
        }
        m->bk_bytes[b] = x[1], m->bk_ready[b] = x[2], m->bk_begin[b] = x[3];
        m->bk_ms[b] = isnan(x[4]) ? 0.0 : x[4];
    }
    return DPS_OK;
}

/* ddp row r overlaps and has w's no_sync and (unless any_cap) its bucket cap. */
static int ddp_matches(const runs_view *v, int r, const predict_workload *w, int any_cap)
{
    return is_ddp_overlap(v, r) && (any_cap || fabs(bucket_cap(v, r) - w->bucket_mb) < 1e-9) &&
           is_sync_all(v, r) == w->sync_all;
}

/* The workload row r is measured against: its series', and for DDP's
 * buckets (ddp, zero1) only an overlapping run with the workload's no_sync
 * and (unless any_cap) its bucket cap; -1 when none. */
static int workload_of(const runs_view *v, int r, const predict_workload *w, int nw, int any_cap)
{
    char a[CELL];
    int q = 0;
    while (q < v->t.nrows && !(is_profile(v, q) && same_series(v, r, q))) q++;
    if (q == v->t.nrows) return -1;
    cell(v, profile_row(v, q), R_ID, a);
    int ddp = is_bucketed(v, r);
    for (int k = 0; k < nw; k++)
        if (strcmp(w[k].source, a) == 0) return !ddp || ddp_matches(v, r, &w[k], any_cap) ? k : -1;
    return -1;
}

/* Row r's step time spread: its p10 and p90 (NAN in a folder without them). */
static void step_spread(const runs_view *v, int r, predict_measured *m)
{
    char a[CELL], b[CELL];
    if (dps_parse_f64(cell(v, r, R_P10, a), &m->p10_ms) != 0) m->p10_ms = NAN;
    if (dps_parse_f64(cell(v, r, R_P90, b), &m->p90_ms) != 0) m->p90_ms = NAN;
}

static dps_status measured_row(const runs_view *v, const csv_table *ph, const csv_table *bk, int r,
                               const predict_workload *w, int nw, int any_cap, predict_measured *m)
{
    m->mode = mode_cell(v, r);
    m->workload = m->mode < MODE_COUNT ? workload_of(v, r, w, nw, any_cap) : -1;
    if (m->workload < 0 || (any_cap && !is_bucketed(v, r))) return m->workload = -1, DPS_OK;
    DPS_TRY(row_id(v, r, m->id));
    m->ngpus = int_cell(v, r, R_NGPUS);
    m->bucket_mb = bucket_cap(v, r);
    step_spread(v, r, m);
    DPS_TRY(csv_table_num(&v->t, r, v->col[R_STEP], 0, 0, &m->step_ms));
    DPS_TRY(csv_table_num(&v->t, r, v->col[R_BUSBW], 1, 0.0, &m->busbw_gbps));
    rows_total fwd, bwd;
    DPS_TRY(total_rows(ph, m->id, "phase", "forward", "median_ms", &fwd));
    DPS_TRY(total_rows(ph, m->id, "phase", "backward", "median_ms", &bwd));
    m->forward_ms = fwd.n ? fwd.sum / fwd.n : 0.0; /* the devices' mean */
    m->backward_ms = bwd.max / predict_accum(&w[m->workload]); /* the slowest device's, a
                                                                 * micro-step's */
    if (bk && dps_strategy_of(m->mode)->buckets) DPS_TRY(measured_buckets(bk, m->id, m));
    return sum_rows(ph, w[m->workload].source, "phase", "forward", "median_ms", &m->forward_1);
}

static dps_status measured_rows(const predict_folder *f, const predict_workload *w, int nw,
                                int any_cap, predict_measured **m, int *n)
{
    const runs_view *vp = &f->v;
    *m = calloc((size_t)vp->t.nrows + 1, sizeof **m);
    dps_status rc = *m ? DPS_OK : dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    *n = 0;
    for (int r = 0; !rc && r < vp->t.nrows; r++) {
        if (!is_weak_ok(vp, r, 0)) continue;
        rc = measured_row(vp, &f->ph, f->have_bk ? &f->bk : NULL, r, w, nw, any_cap, &(*m)[*n]);
        if (!rc && (*m)[*n].workload >= 0) (*n)++;
    }
    if (rc) free(*m), *m = NULL, *n = 0;
    return rc;
}

dps_status predict_from_measured(const predict_folder *f, const predict_workload *w, int nw,
                                 predict_measured **m, int *n)
{
    return measured_rows(f, w, nw, 0, m, n);
}

dps_status predict_from_bucketed(const predict_folder *f, const predict_workload *w, int nw,
                                 predict_measured **m, int *n)
{
    return measured_rows(f, w, nw, 1, m, n);
}
