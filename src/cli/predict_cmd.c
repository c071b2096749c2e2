/* `dpscale predict`: the workloads (a WORKLOAD file, or --from a
 * results folder) on a machine (a MACHINE file, or the folder's), every
 * --modes x --gpus configuration, the tables and, with --out or --name,
 * predictions.csv in OUT/NAME; --from DIR --bucket-mb LIST, the bucket
 * size to use; or --calibrate DIR, which fits the model's constants and
 * writes OUT/NAME/calibration.txt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/strategy.h"
#include "predict/predict_bucket.h"
#include "predict/predict_calib.h"
#include "predict/predict_out.h"
#include "core/util.h"

/* What one prediction reads: the machine, the workloads, the constants. */
typedef struct predict_inputs {
    predict_folder *folder;   /* --from or --calibrate: the results folder, read once */
    predict_machine m;
    predict_workload *w;
    int nw;
    predict_consts c;
} predict_inputs;

/* The options of predict --measure alone: the runs it takes. */
static const settings_id measure_only[] = {SET_MODEL, SET_LAYERS, SET_WIDTH, SET_TOKENS, SET_CLASSES,
                                           SET_PRECISION, SET_OPTIMIZER, SET_BATCH_PER_GPU,
                                           SET_STEPS, SET_WARMUP};

static dps_status check_measure_only(const cli_args *a)
{
    return cli_refuse_given(a, measure_only, sizeof measure_only / sizeof *measure_only,
                            "predict reads it only with --measure, which runs the model first "
                            "(dpscale predict --measure --model M --gpus LIST)");
}

static dps_status check_args(const cli_args *a)
{
    DPS_TRY(check_measure_only(a));
    const char *lack = a->calibrate_dir[0] ? NULL
                       : !a->workload_path[0] && !a->from_dir[0] ? "--workload FILE or --from DIR"
                       : !a->machine_path[0] && !a->from_dir[0] ? "--machine FILE"
                       : !a->gpus_set && !a->bucket_mbs_n ? "--gpus LIST" : NULL;
    if (a->bucket_mbs_n && (!a->from_dir[0] || a->calibrate_dir[0]))
        return dps_fail(DPS_ERR_USAGE, "--bucket-mb LIST advises on a results folder's runs: give "
                        "--from DIR (dpscale predict --from DIR --bucket-mb 1,5,25,100,250)");
    if (a->workload_path[0] && a->from_dir[0])
        return dps_fail(DPS_ERR_USAGE, "predict takes --workload FILE or --from DIR, not both");
    if (a->calibrate_dir[0] && (a->from_dir[0] || a->workload_path[0] || a->gpus_set ||
                                a->calibration_path[0] || a->sweep_modes_n))
        return dps_fail(DPS_ERR_USAGE, "--calibrate DIR fits constants only (with --machine, "
                        "--out, --name; not --from, --workload, --gpus, --modes, --calibration); "
                        "predict with --calibration FILE afterwards");
    if (!lack) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "predict needs %s (dpscale predict --machine FILE --workload FILE "
                    "--gpus LIST, or --from RESULTS_DIR --gpus LIST; bench/predict/ has examples)",
                    lack);
}

/* OUT/NAME, made; NAME defaults to `name`. */
static dps_status out_folder(cli_args *a, const char *name, char *dir, size_t len)
{
    char safe[DPS_NAME_MAX];
    cli_folder_name(name, safe, sizeof safe);
    if (!a->name_set) dps_strlcpy(a->cfg.name, safe, sizeof a->cfg.name);
    snprintf(dir, len, "%s/%s", a->cfg.out_dir, a->cfg.name);
    return dps_mkdirs(dir, "--out");
}

/* A results folder's workloads (read once) and machine: --machine FILE's,
 * else the folder's own at the first workload's bucket size. */
static dps_status load_folder(const char *dir, const char *machine_path, predict_inputs *in)
{
    DPS_TRY(predict_folder_open(dir, &in->folder));
    DPS_TRY(predict_from_workloads(in->folder, &in->w, &in->nw));
    if (machine_path[0]) return predict_machine_load(machine_path, &in->m);
    return predict_from_machine(dir, in->w[0].bucket_mb, &in->m);
}

static dps_status load_inputs(const cli_args *a, predict_inputs *in)
{
    predict_consts_default(&in->c);
    if (a->calibration_path[0]) DPS_TRY(predict_consts_load(a->calibration_path, &in->c));
    if (a->from_dir[0]) return load_folder(a->from_dir, a->machine_path, in);
    in->w = calloc(1, sizeof *in->w);
    if (!in->w) return dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    in->nw = 1;
    DPS_TRY(predict_workload_load(a->workload_path, in->w));
    return predict_machine_load(a->machine_path, &in->m);
}

/* --accum and --no-sync, where given, for every workload (a file's or a
 * folder's own otherwise); each batch must split into the micro-batches. */
static dps_status accumulation(const cli_args *a, predict_inputs *in)
{
    for (int k = 0; k < in->nw; k++) {
        if (a->given[SET_ACCUM]) in->w[k].accum = a->cfg.accum;
        if (a->given[SET_NO_SYNC]) in->w[k].sync_all = !a->cfg.no_sync;
        DPS_TRY(predict_check_accum(&in->w[k], a->given[SET_ACCUM] ? "--accum" : in->w[k].name));
    }
    return DPS_OK;
}

/* Every workload x --gpus x --modes configuration (--modes: dp and ddp
 * unless given; zero1, zero2 and fsdp when asked), and each workload's table. */
static dps_status predict_all(cli_args *a, const predict_inputs *in, predict_row *rows, int *n)
{
    dps_mode modes[MODE_COUNT];
    int nmodes = a->sweep_modes_n ? a->sweep_modes_n : dps_strategies_compared(modes);
    if (a->sweep_modes_n) memcpy(modes, a->sweep_modes, sizeof modes);
    *n = 0;
    for (int k = 0; k < in->nw; k++) {
        predict_split s;
        DPS_TRY(predict_split_step(&in->m, &in->w[k], &s));
        int first = *n;
        for (int g = 0; g < a->sweep_ngpus_n; g++)
            for (int i = 0; i < nmodes; i++)
                predict_config(&in->m, &in->w[k], &s, &in->c, modes[i], a->sweep_ngpus[g], &rows[(*n)++]);
        predict_print(stdout, &in->m, &in->w[k], rows + first, *n - first);
    }
    return DPS_OK;
}

static dps_status run_predict(cli_args *a, predict_inputs *in)
{
    DPS_TRY(load_inputs(a, in));
    DPS_TRY(accumulation(a, in));
    predict_row *rows = calloc((size_t)(in->nw * MODE_COUNT * a->sweep_ngpus_n), sizeof *rows);
    if (!rows) return dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    int n = 0;
    char dir[2 * DPS_PATH_MAX], name[2 * DPS_NAME_MAX + 8];
    dps_status rc = predict_all(a, in, rows, &n);
    snprintf(name, sizeof name, "%s-on-%s", in->nw == 1 ? in->w[0].name : "measured", in->m.name);
    if (!rc && (a->out_set || a->name_set)) {
        rc = out_folder(a, name, dir, sizeof dir);
        if (!rc) rc = predict_write_csv(dir, &in->m, &in->c, rows, n);
        if (!rc) printf("# predictions.csv in %s\n", dir);
    }
    free(rows);
    return rc;
}

/* --from DIR --bucket-mb LIST: each bucketed family's sizes, the size to
 * use, and with --out or --name their rows in predictions.csv. */
static dps_status run_buckets(cli_args *a, predict_inputs *in)
{
    bucket_ask ask = {a->bucket_mbs, a->bucket_mbs_n, a->sweep_ngpus, a->gpus_set ? a->sweep_ngpus_n : 0,
                      a->sweep_modes, a->sweep_modes_n, a->machine_path};
    bucket_run run;
    char dir[2 * DPS_PATH_MAX], name[DPS_NAME_MAX];
    DPS_TRY(load_inputs(a, in));
    DPS_TRY(accumulation(a, in));
    DPS_TRY(predict_bucket_sizes(in->folder, in->w, in->nw, &in->m, &in->c, &ask, stdout, &run));
    snprintf(name, sizeof name, "buckets-%.100s", dps_path_base(a->from_dir));
    dps_status rc = DPS_OK;
    if (a->out_set || a->name_set) {
        rc = out_folder(a, name, dir, sizeof dir);
        if (!rc) rc = predict_write_csv(dir, &in->m, &in->c, run.rows, run.nrows);
        if (!rc) printf("# predictions.csv in %s\n", dir);
    }
    predict_bucket_free(&run);
    return rc;
}

static dps_status run_calibrate(cli_args *a, predict_inputs *in)
{
    char dir[2 * DPS_PATH_MAX], name[DPS_NAME_MAX], path[2 * DPS_PATH_MAX + 32];
    snprintf(name, sizeof name, "calibration-%.100s", dps_path_base(a->calibrate_dir));
    DPS_TRY(load_folder(a->calibrate_dir, a->machine_path, in));
    DPS_TRY(out_folder(a, name, dir, sizeof dir));
    snprintf(path, sizeof path, "%s/calibration.txt", dir);
    printf("# dpscale predict --calibrate %s: constants fitted on machine %s\n", a->calibrate_dir,
           in->m.name);
    DPS_TRY(predict_calibrate(in->folder, &in->m, in->w, in->nw, path, stdout, stderr,
                              &in->c));
    printf("# calibration in %s (use: dpscale predict --calibration %s ...)\n", path, path);
    return DPS_OK;
}

int cmd_predict(cli_args *a)
{
    predict_inputs in = {0};
    dps_status rc = check_args(a);
    if (!rc) rc = a->calibrate_dir[0] ? run_calibrate(a, &in)
                  : a->bucket_mbs_n ? run_buckets(a, &in) : run_predict(a, &in);
    predict_from_free(in.w, in.nw);
    predict_folder_close(in.folder);
    if (rc) fprintf(stderr, "dpscale: %s\n", dps_errmsg());
    return rc == DPS_ERR_USAGE ? 2 : rc ? 1 : 0;
}
