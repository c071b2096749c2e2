/* The commands behind main(): run and sweep (one configuration in-process,
 * or a list of them each in its own process), info, links and comm-bench.
 * Each returns the exit status. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "build_config.h"
#include "version.h"
#include "cli/commands.h"
#include "core/strategy.h"
#include "cli/world_join.h"
#include "backend/host_gemm.h"
#include "comm/comm.h"
#include "microbench/commbench.h"
#include "launch/ranks.h"
#include "microbench/links.h"
#include "model/net.h"
#include "results/model_copy.h"
#include "results/results.h"
#include "results/results_ids.h"
#include "results/results_plan.h"
#include "results/results_txn.h"
#include "run/run.h"
#include "run/suite.h"
#include "run/sweep.h"
#include "strategies/ddp.h"
#include "strategies/footprint.h"
#include "core/util.h"

/* This host's name up to its first dot, as --name accepts it: a byte other
 * than a letter, a digit, '-' or '_' (a '/', a byte that is not UTF-8)
 * becomes '-'; "host" when there is none. */
static void host_for_name(char *host, size_t len)
{
    memset(host, 0, len);
    if (gethostname(host, len - 1) != 0) host[0] = '\0';
    host[strcspn(host, ".")] = '\0';
    for (char *p = host; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            *p = '-';
    }
    if (!host[0]) dps_strlcpy(host, "host", len);
}

/* DATE-TIME-HOST, with -2, -3, ... when a folder of that name is in
 * out_dir already (two runs started within one second). */
static void default_name(const char *out_dir, char *buf, size_t len)
{
    char host[64];
    host_for_name(host, sizeof host);
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char stamp[32], path[DPS_PATH_MAX];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, len, "%s-%s", stamp, host);
    for (int k = 2; k < 1000; k++) {
        snprintf(path, sizeof path, "%s/%s", out_dir, buf);
        if (access(path, F_OK) != 0) return;
        snprintf(buf, len, "%s-%s-%d", stamp, host, k);
    }
}

int cmd_usage_error(void)
{
    fprintf(stderr, "dpscale: %s\n", dps_errmsg());
    return 2;
}

static void print_versions(const backend *be)
{
    be_version_info v;
    be_versions(be, &v);
    be_version_field fields[BE_VERSION_NFIELDS];
    be_version_fields(&v, fields);
    printf("versions:\n");
    for (int i = 0; i < BE_VERSION_NFIELDS; i++)
        if (fields[i].value[0]) printf("  %-13s %s\n", fields[i].label, fields[i].value);
}

/* The presets that are model files, read from the models folder. */
static void print_file_presets(void)
{
    printf("\npresets, model files (docs/model-file.md; any other: --model FILE):\n  %-14s %4s "
           "%9s %7s %12s %14s  %s\n", "name", "", "batch/gpu", "tensors", "params",
           "fwd GFLOP/smp", "file");
    for (int i = 0; i < model_npresets; i++) {
        const model_preset *p = &model_presets[i];
        char path[DPS_PATH_MAX];
        const net *n = NULL;
        if (!p->file) continue;
        model_preset_path(p, path, sizeof path);
        if (net_load(path, &n) != DPS_OK) {
            printf("  %-14s %4s  cannot be read: %s\n", p->name, "file", dps_errmsg());
            continue;
        }
        printf("  %-14s %4s %9d %7d %12zu %14.3f  %s\n", p->name, "file", p->batch_per_gpu,
               n->ntensors, n->params, n->fwd_flops / 1e9, path);
    }
}

/* The strategy table: each --mode, what it is, how it runs and what it shards. */
static void print_strategies(void)
{
    static const char *const sharded[] = {"nothing", "the optimizer state",
                                          "optimizer state and gradients",
                                          "optimizer state, gradients and parameters"};
    printf("\nstrategies (--mode):\n");
    for (int m = 0; m < MODE_COUNT; m++) {
        const dps_strategy *st = dps_strategy_of((dps_mode)m);
        printf("  %-6s %-46s %-22s shards %s\n", st->name, st->like,
               st->per_rank ? "a process a device" : "one process", sharded[st->shard]);
    }
}

static void print_info(const backend *be)
{
    printf("dpscale %s (%s)\n", DPS_VERSION, DPS_GIT_DESCRIBE);
#if defined(DPS_HAVE_CUDA) && defined(DPS_HAVE_NVTX)
    const char *built = "CUDA kernels, NVTX";
#elif defined(DPS_HAVE_CUDA)
    const char *built = "CUDA kernels";
#else
    const char *built = "host backend only (no CUDA)";
#endif
    printf("built with: %s; ddp collectives: shm%s%s\n", built, comm_have("gloo") ? ", gloo" : "",
           comm_have("nccl") ? ", nccl" : "");
    print_versions(be);
    printf("backend: %s%s\n", be->ops->name,
           be->emulated ? ", emulated devices: timings describe the CPU, not a GPU" : "");
    for (int d = 0; d < be->ndev; d++) {
        char cap[32] = "unlimited";
        if (be->info[d].total_bytes) dps_fmt_bytes(be->info[d].total_bytes, cap, sizeof cap);
        printf("  device %d: %s, memory %s, bus %s\n", d, be->info[d].name, cap,
               be->info[d].bus_id);
    }
    print_strategies();
    printf("\npresets, MLPs:\n  %-14s %6s %6s %6s %7s %9s %12s %14s  %s\n", "name", "layers",
           "width", "tokens", "classes", "batch/gpu", "params", "fwd GFLOP/smp", "shaped after");
    for (int i = 0; i < model_npresets; i++) {
        const model_preset *p = &model_presets[i];
        if (p->file) continue;
        printf("  %-14s %6d %6d %6d %7d %9d %12zu %14.3f  %s\n", p->name, p->shape.layers,
               p->shape.width, p->shape.tokens, p->shape.classes, p->batch_per_gpu,
               model_param_count(p->shape), model_fwd_flops_per_sample(p->shape) / 1e9, p->like);
    }
    printf("  (forward GFLOP per sample = 2 x matmul params x tokens; a training step is 3x that)\n");
    print_file_presets();
}

/* A configuration's model, as a refusal names it: its file, or its preset. */
static const char *model_source(const dps_config *c)
{
    return c->net_file ? c->net_file->path : c->model;
}

/* Two configurations of one plan with the same id would share their rows
 * (two model files with the same `name`): refused, naming both. */
static dps_status distinct_ids(const sweep_item *items, int n)
{
    for (int i = 0; i < n; i++) {
        char id[192], other[192];
        config_id(&items[i].cfg, id, sizeof id);
        for (int j = 0; j < i; j++) {
            config_id(&items[j].cfg, other, sizeof other);
            if (strcmp(id, other) == 0)
                return dps_fail(DPS_ERR_USAGE, "%s and %s are both configuration %s (two model "
                                "files named '%s'?): give one of them another `name` line",
                                model_source(&items[j].cfg), model_source(&items[i].cfg), id,
                                items[i].cfg.model);
        }
    }
    return DPS_OK;
}

/* One configuration of model, mode and ngpus into items[*n], and for a
 * strategy with DDP's buckets one a cap of --bucket-mb's list. */
static dps_status each_bucket_cap(cli_args *a, const char *model, dps_mode mode, int ngpus,
                                  const backend *be, sweep_item *items, int *n)
{
    int caps = dps_strategy_of(mode)->buckets && a->bucket_mbs_n > 1 ? a->bucket_mbs_n : 1;
    for (int b = 0; b < caps; b++) {
        if (caps > 1) a->cfg.bucket_mb = a->bucket_mbs[b];
        DPS_TRY(cli_finish_config(a, model, mode, ngpus, be, &items[(*n)++].cfg));
    }
    if (caps > 1) a->cfg.bucket_mb = a->bucket_mbs[0];
    return DPS_OK;
}

/* The configurations of --mode, --gpus and --model lists, every one
 * validated before anything runs (a bad one is a usage error). */
static dps_status build_from_lists(cli_args *a, const backend *be, sweep_item **out, int *n)
{
    int ng[CLI_MAX_LIST], nng = a->sweep_ngpus_n;
    memcpy(ng, a->sweep_ngpus, sizeof ng);
    if (a->cmd == CMD_SWEEP && !a->gpus_set && !a->devices_set) {
        nng = 0;
        for (int g = 1; g <= be->ndev && g <= (be->emulated ? 4 : 8); g *= 2) ng[nng++] = g;
    } else if (!a->gpus_set) {
        ng[0] = a->cfg.ngpus;
        nng = 1;
    }
    if (a->sweep_models_n == 0) {
        dps_strlcpy(a->sweep_models[0], a->cfg.model, DPS_PATH_MAX);
        a->sweep_models_n = 1;
    }
    dps_mode modes[MODE_COUNT] = {a->cfg.mode};
    int nmodes = 1;
    if (a->sweep_modes_n) {
        memcpy(modes, a->sweep_modes, sizeof modes);
        nmodes = a->sweep_modes_n;
    } else if (a->cmd == CMD_SWEEP) {
        nmodes = dps_strategies_compared(modes); /* a sweep compares dp and ddp */
    }
    int nbk = a->bucket_mbs_n ? a->bucket_mbs_n : 1;
    *out = calloc((size_t)(nng * a->sweep_models_n * nmodes * nbk), sizeof **out);
    if (!*out) return dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    *n = 0;
    for (int m = 0; m < a->sweep_models_n; m++)
        for (int g = 0; g < nng; g++)
            for (int k = 0; k < nmodes; k++)
                DPS_TRY(each_bucket_cap(a, a->sweep_models[m], modes[k], ng[g], be, *out, n));
    return DPS_OK;
}

/* A suite file's configurations; explicit --steps/--warmup win over the file's. */
static dps_status build_from_suite(cli_args *a, const backend *be, sweep_item **out, int *n)
{
    suite s;
    DPS_TRY(suite_load(a->suite_path, be->kind, &s));
    dps_status rc = suite_expand(&s, &a->cfg, be, a->lr_set ? a->cfg.hp.lr : 0.0, out, n);
    suite_free(&s);
    DPS_TRY(rc);
    for (int i = 0; i < *n; i++) {
        if (a->steps_set) (*out)[i].cfg.steps = a->cfg.steps;
        if (a->warmup_set) (*out)[i].cfg.warmup = a->cfg.warmup;
    }
    return DPS_OK;
}

/* A step's compute at `gflops` per device thread (the host backend: no
 * more devices at once than cores), in seconds; 0 when unknown. */
static double compute_seconds(const dps_config *c, const backend *be, double gflops)
{
    if (gflops <= 0) return 0;
    int lanes = be->host_cores > 0 && be->host_cores < c->ngpus ? be->host_cores : c->ngpus;
    double flops = 3 * config_fwd_flops(c) * c->global_batch;
    return flops / (gflops * 1e9 * lanes) * (c->warmup + c->steps);
}

/* A line of --dry-run: configuration k, id, its memory and, at gflops > 0,
 * its compute time; a twin (sweep_pair) names the run it is written from. */
static void dry_run_line(const backend *be, const sweep_item *items, int i, int k, double gflops)
{
    char id[192], mem[24], devs[24];
    config_id(&items[i].cfg, id, sizeof id);
    if (items[i].same_as >= 0) {
        char first[192];
        config_id(&items[items[i].same_as].cfg, first, sizeof first);
        printf("%4d  %-44s  same run as %s (its rows, under this id)\n", k, id, first);
        return;
    }
    footprint fp;
    footprint_of(&items[i].cfg, be, &fp);
    dps_fmt_bytes(fp.total, mem, sizeof mem);
    dps_fmt_bytes(fp.devices, devs, sizeof devs);
    printf("%4d  %-44s  host %10s (devices %s)", k, id, mem, devs);
    double sec = compute_seconds(&items[i].cfg, be, gflops);
    if (sec >= 60) printf("  compute %.1f min", sec / 60);
    else if (sec > 0) printf("  compute %.2g s", sec);
    if (items[i].skip[0]) printf("  [skipped: %s]", items[i].skip);
    putchar('\n');
}

/* The configurations that would run (--resume: not those the folder holds),
 * each with the memory it needs and, on the host backend, its compute time;
 * one that is another's run (sweep_pair) says so. */
static dps_status print_dry_run(const cli_args *a, const backend *be, sweep_item *items, int n)
{
    results_ids done = {0};
    char dir[DPS_PATH_MAX + DPS_NAME_MAX + 2];
    snprintf(dir, sizeof dir, "%s/%s", a->cfg.out_dir, a->cfg.name);
    if (a->resume) DPS_TRY(results_ids_finished(dir, &done));
    sweep_pair(items, n, &done);
    double gflops = be->kind == BE_HOST ? host_gemm_gflops() : 0;
    int k = 0, held = 0, twins = 0;
    for (int i = 0; i < n; i++) {
        char id[192];
        if (strcmp(items[i].skip, "-") == 0) continue;
        config_id(&items[i].cfg, id, sizeof id);
        if (results_ids_has(&done, id)) { held++; continue; }
        twins += items[i].same_as >= 0;
        dry_run_line(be, items, i, ++k, gflops);
    }
    printf("# %d configuration%s", k, k == 1 ? "" : "s");
    if (twins) printf(" in %d run%s (%d the same run as another)", k - twins,
                      k - twins == 1 ? "" : "s", twins);
    if (a->resume) printf(" to run; %d already in %s", held, dir);
    if (gflops > 0) printf("; compute at %.1f GFLOP/s a device (a GEMM measured now), copies "
                           "and set-up not counted", gflops);
    printf("\n");
    results_ids_free(&done);
    return DPS_OK;
}

/* OUT/latest's path in link, and the folder it points at in target: 1
 * when that is a folder name directly under OUT, else 0. */
static int latest_target(const char *out_dir, char *link, size_t llen, char *target, size_t tlen)
{
    snprintf(link, llen, "%s/latest", out_dir);
    ssize_t got = readlink(link, target, tlen - 1);
    target[got > 0 ? got : 0] = '\0';
    return got > 0 && !strchr(target, '/') && strcmp(target, ".") != 0 &&
           strcmp(target, "..") != 0;
}

/* "2.5 min" or "40 s": a duration for a line. */
static void fmt_duration(double sec, char *buf, size_t len)
{
    if (sec >= 60) snprintf(buf, len, "%.1f min", sec / 60);
    else snprintf(buf, len, "%.0f s", sec < 1 ? 1 : sec);
}

/* How long the last run of this sweep's suite in its results folder (the
 * folder's latest) took, when that run finished every one of the k
 * configurations this one plans and no other; its folder's name in `name`.
 * 0 when there is no such run. */
static double last_run_s(const cli_args *a, const sweep_item *items, int n, int k, char *name,
                         size_t len)
{
    char dir[DPS_PATH_MAX + 16];
    results_plan plan;
    if (!a->suite_path[0] || !latest_target(a->cfg.out_dir, dir, sizeof dir, name, len) ||
        results_plan_read(dir, &plan) != DPS_OK)
        return 0;
    double sec = 0;
    for (int i = 0; i < plan.argc; i++)
        if (strcmp(plan.argv[i], a->suite_path) == 0) sec = plan.duration_s;
    results_plan_free(&plan);
    results_ids done = {0};
    if (sec > 0 && results_ids_finished(dir, &done) != DPS_OK) sec = 0;
    if (done.n != k) sec = 0; /* that run had others too (--filter), or this one has more */
    for (int i = 0; i < n && sec > 0; i++) {
        char id[192];
        config_id(&items[i].cfg, id, sizeof id);
        if (!items[i].skip[0] && !results_ids_has(&done, id)) sec = 0;
    }
    results_ids_free(&done);
    return sec;
}

/* What a sweep on the host backend will take, for the end of the line that
 * says the host backend was taken: as long as the last run of its suite here
 * took (last_run_s), or, without one, its GEMMs' time at a rate measured now
 * (--dry-run's figure: set-up, the other ops and the copies are not counted,
 * and the rate of a 50 ms GEMM on a busy machine varies, so the sweep may
 * take more or less); and where scripts/bench.sh draws the charts
 * (DPSCALE_CHARTS, which it sets). Empty when there is nothing to say. */
static void sweep_outlook(const cli_args *a, const backend *be, const sweep_item *items, int n,
                          char *buf, size_t len)
{
    buf[0] = '\0';
    if (a->cmd != CMD_SWEEP || a->dry_run || a->resume || be->kind != BE_HOST) return;
    int k = 0;
    for (int i = 0; i < n; i++) k += !items[i].skip[0];
    if (k == 0) return;
    char name[DPS_NAME_MAX], took[24];
    double last = last_run_s(a, items, n, k, name, sizeof name), gflops = 0, sec = 0;
    int at = 0;
    if (last > 0) {
        fmt_duration(last, took, sizeof took);
        at = snprintf(buf, len, "; this sweep: %d configuration%s, about %s here (its last run, "
                      "%s, took that)", k, k == 1 ? "" : "s", took, name);
    } else {
        gflops = host_gemm_gflops();
        for (int i = 0; i < n; i++) /* a twin is its earlier's run (sweep_pair) */
            if (!items[i].skip[0] && items[i].same_as < 0)
                sec += compute_seconds(&items[i].cfg, be, gflops);
        fmt_duration(sec, took, sizeof took);
        if (sec > 0)
            at = snprintf(buf, len, "; this sweep: %d configuration%s, their GEMMs alone about %s "
                          "here (at %.0f GFLOP/s a device, measured now; set-up, the other ops and "
                          "copies not counted)", k, k == 1 ? "" : "s", took, gflops);
    }
    const char *charts = getenv("DPSCALE_CHARTS");
    if (charts && *charts && at >= 0 && (size_t)at < len)
        snprintf(buf + at, len - (size_t)at, "%scharts in %s/ at its end", at ? ", " : "; ", charts);
}

/* The options that choose a sweep's configurations (their ids). */
static const settings_id plan_options[] = {
    SET_MODE, SET_GPUS, SET_DEVICES, SET_MODEL, SET_LAYERS, SET_WIDTH, SET_TOKENS, SET_CLASSES,
    SET_BATCH, SET_BATCH_PER_GPU, SET_PRECISION, SET_TF32, SET_OPTIMIZER, SET_DP_IMPL, SET_DP_COMM,
    SET_BUCKET_MB, SET_FIRST_BUCKET_MB, SET_NO_OVERLAP, SET_GRAD_VIEW, SET_DDP_IMPL, SET_ACCUM,
    SET_NO_SYNC,
};

/* sweep --resume with neither a suite file nor an option of plan_options
 * continues the folder's own set: its plan, with this command's options
 * after it (the later wins). The plan is kept in *plan for meta.json. */
static dps_status resume_plan(cli_args *a, int argc, char **argv, results_plan *plan)
{
    if (a->cmd != CMD_SWEEP || !a->resume || a->suite_path[0]) return DPS_OK;
    for (size_t i = 0; i < sizeof plan_options / sizeof plan_options[0]; i++)
        if (a->given[plan_options[i]]) return DPS_OK;
    char dir[DPS_PATH_MAX + DPS_NAME_MAX + 2];
    snprintf(dir, sizeof dir, "%s/%s", a->cfg.out_dir, a->cfg.name);
    DPS_TRY(results_plan_read(dir, plan));
    int n = 0;
    char **args = calloc((size_t)(plan->argc + argc + 1), sizeof *args);
    if (!args) return dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    for (int i = 0; i < plan->argc; i++) args[n++] = plan->argv[i];
    for (int i = 2; i < argc; i++) args[n++] = argv[i]; /* past "dpscale sweep" */
    char name[DPS_NAME_MAX], out[DPS_PATH_MAX];
    dps_strlcpy(name, a->cfg.name, sizeof name);
    dps_strlcpy(out, a->cfg.out_dir, sizeof out);
    dps_status rc = cli_parse(n, args, a);
    free(args);
    if (rc)
        return dps_fail(rc, "--resume: the plan in %s/meta.json: %s", dir, dps_errmsg());
    if (a->cmd != CMD_SWEEP)
        return dps_fail(DPS_ERR_USAGE, "--resume: %s/meta.json was written by `dpscale %s`, not "
                        "by a sweep; give the configurations to run", dir, plan->argv[1]);
    dps_strlcpy(a->cfg.name, name, sizeof a->cfg.name); /* the folder found above */
    dps_strlcpy(a->cfg.out_dir, out, sizeof a->cfg.out_dir);
    a->name_set = a->out_set = a->resume = 1;
    a->plan_argc = plan->argc;
    a->plan_argv = plan->argv;
    return DPS_OK;
}

/* --resume without --name continues the folder OUT/latest points at, which
 * must be a link to a folder directly under OUT. */
static dps_status resume_name(cli_args *a)
{
    char link[DPS_PATH_MAX + 16], target[DPS_NAME_MAX];
    int under_out = latest_target(a->cfg.out_dir, link, sizeof link, target, sizeof target);
    if (!target[0])
        return dps_fail(DPS_ERR_USAGE, "--resume: %s is missing or not a link to a results folder; "
                        "name the folder to resume with --name", link);
    if (!under_out)
        return dps_fail(DPS_ERR_USAGE, "--resume: %s points at '%s', not at a folder directly under "
                        "%s; name the folder to resume with --name", link, target, a->cfg.out_dir);
    dps_strlcpy(a->cfg.name, target, sizeof a->cfg.name);
    a->name_set = 1;
    return DPS_OK;
}

/* The link matrix of ndev devices into the folder; a failure is reported, not fatal. */
static dps_status measure_links(backend *be, const results_dir *rd, int ndev,
                                const links_sizes *sizes, int samples, int print)
{
    link_row *rows = calloc((size_t)links_max_rows(ndev, sizes), sizeof *rows);
    int n = 0;
    if (!rows) return dps_fail(DPS_ERR_RUNTIME, "out of host memory");
    dps_status rc = links_measure(be, ndev, sizes, samples, rows, &n);
    if (!rc) rc = links_write(rd, be, rows, n);
    if (!rc && print) links_print(stdout, be, ndev, rows, n);
    free(rows);
    return rc;
}

#define LINKS_DEFAULT_MAX ((uint64_t)64 << 20)     /* dpscale links; the host backend 16M */
#define LINKS_SWEEP_MAX_CAP ((uint64_t)256 << 20)  /* a sweep's largest copy, at most */

/* The largest copy a phase of the sweep's configurations moves, within
 * [--link-min-bytes, 256M], a multiple of 4. */
static uint64_t sweep_copy_max(const cli_args *a, const sweep_item *items, int n)
{
    uint64_t most = a->link_min;
    for (int i = 0; i < n; i++) {
        uint64_t b = items[i].skip[0] ? 0 : links_config_copy_bytes(&items[i].cfg);
        if (b > most) most = b;
    }
    most = most > LINKS_SWEEP_MAX_CAP ? LINKS_SWEEP_MAX_CAP : most;
    return (most + 3) / 4 * 4;
}

/* The copy sizes: --sizes alone, else --link-min-bytes to --link-max-bytes
 * (or `dflt`) by --link-factor. */
static dps_status links_range(const cli_args *a, uint64_t dflt, links_sizes *out)
{
    char lo[32], hi[32];
    *out = (links_sizes){a->link_min, a->link_max ? a->link_max : dflt, a->link_factor};
    if (a->nsizes) {
        out->min = out->max = a->sizes[0];
        return DPS_OK;
    }
    if (out->min <= out->max) return DPS_OK;
    if (!a->link_max) {
        out->max = out->min;
        return DPS_OK;
    }
    return dps_fail(DPS_ERR_USAGE, "--link-min-bytes %s is above --link-max-bytes %s: give a "
                    "smaller minimum or a larger maximum",
                    dps_fmt_bytes_suffix(out->min, lo, sizeof lo),
                    dps_fmt_bytes_suffix(out->max, hi, sizeof hi));
}

typedef struct links_job {
    backend *be;
    const results_dir *rd;
    int ndev;
    links_sizes sizes;
} links_job;

static int links_child(void *ctx, int rank, rank_beat *beat)
{
    (void)rank;
    links_job *j = ctx;
    ranks_beat_step(beat, 0);
    if (measure_links(j->be, j->rd, j->ndev, &j->sizes, 5, 0))
        dps_warn("link matrix not measured: %s", dps_errmsg());
    return 0; /* not fatal to the sweep; the parent hears only of a crash or a timeout */
}

/* A sweep measures the links of the devices it uses once per folder, in a
 * child process: the sweep's parent stays free of CUDA, so that the
 * configurations it forks can use the GPUs. */
static void sweep_links(cli_args *a, backend *be, const results_dir *rd, sweep_item *items, int n)
{
    struct stat st;
    int most = 1;
    for (int i = 0; i < n; i++)
        if (!items[i].skip[0] && items[i].cfg.ngpus > most) most = items[i].cfg.ngpus;
    if (a->no_links || fstatat(rd->dir_fd, "links.csv", &st, AT_SYMLINK_NOFOLLOW) == 0) return;
    links_job job = {be, rd, most > be->ndev ? be->ndev : most, {0}};
    if (links_range(a, sweep_copy_max(a, items, n), &job.sizes)) {
        dps_warn("link matrix not measured: %s", dps_errmsg());
        return;
    }
    ranks_spec spec = {.nranks = 1, .rank_main = links_child, .ctx = &job,
                       .timeout_s = a->config_timeout_s};
    if (ranks_run(&spec) && !dps_interrupted())
        dps_warn("link matrix not measured: %s", dps_errmsg());
    int rolled; /* a links process killed mid-write leaves its journal */
    if (results_settle(rd, 0, &rolled, NULL, 0)) dps_log("%s", dps_errmsg());
    else if (rolled) dps_warn("link matrix not measured: its process ended while writing links.csv, "
                              "whose rows were taken back out");
}

int cmd_links(cli_args *a)
{
    backend *be = NULL;
    if (be_open(&a->cfg.be, &be)) {
        fprintf(stderr, "dpscale: %s\n", dps_errmsg());
        return 1;
    }
    int ndev = a->gpus_set ? a->cfg.ngpus : be->emulated && be->ndev > 4 ? 4 : be->ndev;
    results_dir rd = {.dir_fd = -1, .lock_fd = -1};
    links_sizes sizes;
    int status = 0;
    if (!a->name_set) default_name(a->cfg.out_dir, a->cfg.name, sizeof a->cfg.name);
    if (links_range(a, be->emulated ? LINKS_DEFAULT_MAX / 4 : LINKS_DEFAULT_MAX, &sizes)) {
        status = cmd_usage_error();
    } else if (ndev > be->ndev) {
        status = (dps_fail(DPS_ERR_USAGE, "--gpus %d: the %s backend has %d devices", ndev,
                           be->ops->name, be->ndev), cmd_usage_error());
    } else if (results_open(&rd, a->cfg.out_dir, a->cfg.name) || links_check_header(&rd)) {
        status = cmd_usage_error();
    } else if (measure_links(be, &rd, ndev, &sizes, a->steps_set ? a->cfg.steps : 10, 1)) {
        dps_log("%s", dps_errmsg());
        status = 1;
    } else {
        printf("# links.csv in %s\n", rd.dir);
    }
    results_close(&rd);
    be_close(be);
    return status;
}

/* Every results file the folder may hold, the link matrix's and the
 * all-reduce timings' too, has this version's header (or is absent). */
static dps_status check_all_headers(const results_dir *rd)
{
    DPS_TRY(results_check_headers(rd));
    DPS_TRY(links_check_header(rd));
    return commbench_check_header(rd);
}

/* Each model file the configurations train, kept in the folder's models/
 * (model_copy.h) before any of them runs. */
static dps_status keep_model_files(const results_dir *rd, const sweep_item *items, int n)
{
    for (int i = 0; i < n; i++) {
        const net *f = items[i].cfg.net_file;
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = items[k].cfg.net_file == f;
        if (f && !seen) DPS_TRY(model_copy_keep(rd, items[i].cfg.model, f->path));
    }
    return DPS_OK;
}

/* Before anything is written: every file of the folder has this version's
 * header; rows cut short or stray are taken out, and with --resume what did
 * not finish, to run it again; without it, no configuration to run may be
 * in the folder already. Then the model files are kept in it. */
static dps_status prepare_folder(const cli_args *a, const results_dir *rd, const sweep_item *items,
                                 int n, results_ids *done)
{
    DPS_TRY(check_all_headers(rd));
    int rerun;
    DPS_TRY(results_tidy(rd, a->resume, done, &rerun));
    if (rerun)
        dps_log("--resume: %d configuration%s that did not finish (error, timeout, "
                "interrupted) taken out of %s, to run again", rerun, rerun == 1 ? "" : "s",
                rd->dir);
    if (a->resume) return keep_model_files(rd, items, n);
    dps_status rc = DPS_OK;
    for (int i = 0; i < n && !rc; i++) {
        char id[192];
        config_id(&items[i].cfg, id, sizeof id);
        if (strcmp(items[i].skip, "-") != 0 && results_ids_has(done, id))
            rc = dps_fail(DPS_ERR_USAGE, "%s/runs.csv already holds %s: continue that folder "
                          "with --resume, or write to another with --name", rd->dir, id);
    }
    results_ids_free(done);
    return rc ? rc : keep_model_files(rd, items, n);
}

/* The sweep's configurations; returns how many failed. *nothing says that
 * none ran because every one was skipped (a sweep that measured nothing). */
static int run_sweep(cli_args *a, backend *be, const results_dir *rd, sweep_item *items, int n,
                     const results_ids *done, int *interrupted, int *nothing)
{
    sweep_opts o = {.done = a->resume ? done : NULL, .filter = a->filter[0] ? a->filter : NULL,
                    .config_timeout_s = a->config_timeout_s};
    sweep_tally t;
    sweep_run(items, n, be, rd, &o, &t);
    *interrupted = t.interrupted;
    *nothing = !t.ran && t.skipped && !t.done_before && !t.interrupted && !t.failed;
    if (!*nothing) return t.failed;
    char id[192], kept[SETTINGS_PATTERN_MAX + 32] = "";
    const sweep_item *first = &items[t.first_skipped];
    config_id(&first->cfg, id, sizeof id);
    if (a->filter[0]) snprintf(kept, sizeof kept, " --filter %s kept", a->filter);
    if (t.skipped == 1) dps_log("nothing ran: the one configuration%s was skipped, as this machine "
                                "cannot run it (%s: %s)", kept, id, first->skip);
    else dps_log("nothing ran: all %d configurations%s were skipped, as this machine cannot run "
                 "them (the first, %s: %s)", t.skipped, kept, id, first->skip);
    return 0;
}

/* One configuration in this process (under a launcher in dw, the joined
 * ranks); a failure that left no row gets one. */
static int run_one(const dps_config *cfg, ddp_world *dw, backend *be, const results_dir *rd)
{
    int written = 0;
    dps_status rc = run_config(cfg, NULL, dw, be, rd, &written);
    if (!rc || written) return rc != DPS_OK;
    char why[DPS_ERRMSG_MAX];
    dps_strlcpy(why, dps_errmsg(), sizeof why);
    dps_log("%s", why);
    if (run_record(cfg, NULL, be, rd, rc, why)) dps_log("%s", dps_errmsg());
    return 1;
}

/* meta.json's command line and plan: this one, or --resume's from the folder. */
static results_cmd meta_cmd(const cli_args *a, int argc, char **argv)
{
    return (results_cmd){argc, a->plan_argv ? a->plan_argc : argc, argv,
                         a->plan_argv ? a->plan_argv : argv};
}

/* Where the ranks a launcher started have joined (into *buf); NULL: they
 * have not (yet), or dpscale forks them. */
static const world_nodes *joined_nodes(const cli_args *a, world_nodes *buf)
{
    return ddp_world_nodes(a->dw, buf) ? buf : NULL;
}

static int finish(backend *be, const cli_args *a, int most, const results_dir *rd, int argc,
                  char **argv, const char *start, int failed, int interrupted, int nothing)
{
    char end[32];
    dps_utc_iso8601(end, sizeof end);
    results_cmd cmd = meta_cmd(a, argc, argv);
    world_nodes nodes;
    if (results_write_meta(rd, be, &a->cfg, joined_nodes(a, &nodes), most, &cmd, start, end))
        dps_log("%s", dps_errmsg());
    printf("# %d failed%s; results in %s\n", failed, nothing ? ", nothing ran" : "", rd->dir);
    if (interrupted) {
        dps_log("interrupted by %s%s", dps_signal_name(dps_interrupted()),
                !dps_escalated() ? "" : dps_escalated_by_grace()
                ? ", the step that ran cut short after the grace" : " twice");
        return 128 + (dps_interrupted() ? dps_interrupted() : SIGINT);
    }
    return failed || nothing ? 1 : 0;
}

static int execute_in(cli_args *a, backend *be, const results_dir *rd, sweep_item *items, int n,
                      int argc, char **argv)
{
    results_ids done = {0};
    char start[32];
    /* before anything long (the folder's tidying, the link matrix): a
     * SIGINT from here on ends with meta.json's end time and exit 128 + it */
    dps_install_interrupt_handlers();
    dps_utc_iso8601(start, sizeof start);
    dps_status rc = prepare_folder(a, rd, items, n, &done);
    int most = 0; /* devices of the largest configuration */
    for (int i = 0; i < n; i++) most = items[i].cfg.ngpus > most ? items[i].cfg.ngpus : most;
    results_cmd cmd = meta_cmd(a, argc, argv);
    world_nodes nodes;
    if (!rc)
        rc = results_write_meta(rd, be, &a->cfg, joined_nodes(a, &nodes), most, &cmd, start, NULL);
    if (rc) return rc == DPS_ERR_USAGE ? cmd_usage_error() : (dps_log("%s", dps_errmsg()), 1);
    printf("# results: %s\n", rd->dir);
    if (n && items[0].cfg.inject_slowdown_pct > 0)
        dps_warn("--inject-slowdown: every compute phase %s is stretched by %g %%, so these "
                 "timings are not the code's (meta.json's command line says so too)",
                 items[0].cfg.slowdown_rank < 0 ? "of every device" : "of one rank",
                 items[0].cfg.inject_slowdown_pct);
    /* latest points at this sweep from its start, so --resume after a crash continues it */
    if (a->cmd == CMD_SWEEP && sweep_link_latest(a->cfg.out_dir, a->cfg.name))
        dps_log("%s", dps_errmsg());
    if (a->cmd == CMD_SWEEP) sweep_links(a, be, rd, items, n);
    results_table_header(stdout, be, most);
    int failed = 0, interrupted = 0, nothing = 0;
    if (a->cmd == CMD_RUN) {
        failed = run_one(&items[0].cfg, a->dw, be, rd);
        interrupted = dps_interrupted() != 0;
    } else {
        failed = run_sweep(a, be, rd, items, n, &done, &interrupted, &nothing);
    }
    results_ids_free(&done);
    return finish(be, a, most, rd, argc, argv, start, failed, interrupted, nothing);
}

/* The folder is locked from before its files are read until the end. */
static int execute(cli_args *a, backend *be, sweep_item *items, int n, int argc, char **argv)
{
    results_dir rd;
    if (results_open(&rd, a->cfg.out_dir, a->cfg.name)) return cmd_usage_error();
    int status = execute_in(a, be, &rd, items, n, argc, argv);
    results_close(&rd);
    return status;
}

/* A rank other than global rank 0: trains; rank 0 writes the results. A
 * SIGINT or SIGTERM (its launcher's) tells the group and ends this rank by
 * the two-signal rule, exit 128 + it. */
static int run_rank_only(const dps_config *cfg, ddp_world *dw)
{
    dps_install_interrupt_handlers();
    if (!ddp_launched_rank(cfg, dw)) return 0;
    fprintf(stderr, "dpscale: %s\n", dps_errmsg());
    return dps_interrupted() ? 128 + dps_interrupted() : 1;
}

int cmd_run(cli_args *a, int argc, char **argv)
{
    backend *be = NULL;
    /* a sweep's "took the host backend" line waits for its plan, which it then outlines */
    char notice[DPS_ERRMSG_MAX] = "", outlook[512] = "";
    be_options bo = a->cfg.be;
    if (a->cmd == CMD_SWEEP) bo.notice = notice, bo.notice_len = sizeof notice;
    dps_status rc = be_open(&bo, &be);
    if (rc) {
        fprintf(stderr, "dpscale: %s\n", dps_errmsg());
        return rc == DPS_ERR_USAGE ? 2 : 1;
    }
    sweep_item *items = NULL;
    int n = 0, status = 0;
    if (a->cmd == CMD_RUN) rc = cli_join_world(a, be);
    if (!rc && a->resume && !a->name_set) rc = resume_name(a);
    results_plan plan = {0};
    if (!rc) rc = resume_plan(a, argc, argv, &plan);
    if (!a->name_set) default_name(a->cfg.out_dir, a->cfg.name, sizeof a->cfg.name);
    if (!rc && strcmp(a->cfg.name, "latest") == 0)
        rc = dps_fail(DPS_ERR_USAGE, "--name latest: that is the link to the newest folder; "
                      "choose another name");
    if (!rc)
        rc = a->suite_path[0] ? build_from_suite(a, be, &items, &n)
                              : build_from_lists(a, be, &items, &n);
    if (!rc) rc = distinct_ids(items, n);
    if (!rc && a->cmd == CMD_SWEEP && sweep_filter(items, n, a->filter[0] ? a->filter : NULL) == 0)
        rc = dps_fail(DPS_ERR_USAGE, "--filter %s: no configuration matches", a->filter);
    if (!rc && a->cmd == CMD_SWEEP) /* for the outlook; sweep_run pairs again, past --resume's */
        sweep_pair(items, n, NULL);
    if (!rc && notice[0]) sweep_outlook(a, be, items, n, outlook, sizeof outlook);
    if (notice[0]) dps_log("%s%s", notice, outlook);
    if (rc) status = rc == DPS_ERR_USAGE ? cmd_usage_error() : (dps_log("%s", dps_errmsg()), 1);
    else if (a->dry_run) status = print_dry_run(a, be, items, n) ? (dps_log("%s", dps_errmsg()), 1) : 0;
    else if (a->cfg.world.launcher != WORLD_NONE && a->cfg.world.rank != 0)
        status = run_rank_only(&items[0].cfg, a->dw);
    else status = execute(a, be, items, n, argc, argv);
    free(items);
    results_plan_free(&plan);
    cli_leave_world(a);
    be_close(be);
    return status;
}

/* --inject-fault for comm-bench: a rank of the largest group, a step of a run of the sizes. */
static dps_status check_bench_fault(const cli_args *a, const int *ng, int nng,
                                    const commbench_spec *spec)
{
    const dps_config *c = &a->cfg;
    int most = 0, steps = commbench_steps(spec);
    for (int g = 0; g < nng; g++)
        if (ng[g] > most) most = ng[g];
    if (c->fault_rank >= most)
        return dps_fail(DPS_ERR_USAGE, "--inject-fault %d:%d:%s: comm-bench has ranks 0..%d",
                        c->fault_rank, c->fault_step, dps_fault_names[c->fault_kind], most - 1);
    if (c->fault_step >= steps)
        return dps_fail(DPS_ERR_USAGE, "--inject-fault %d:%d:%s: comm-bench has steps 0..%d (each "
                        "size's warm-up and timed collectives, one size after another)",
                        c->fault_rank, c->fault_step, dps_fault_names[c->fault_kind], steps - 1);
    return DPS_OK;
}

/* One rank count: its table rows and allreduce.csv rows. 0 ok, 1 failed; *written set when
 * the rows are in the file. */
static int bench_group(const commbench_spec *spec, const results_dir *rd, int *written)
{
    commbench_row rows[COMMBENCH_MAX_OPS * COMMBENCH_MAX_SIZES];
    int status = 0, n = spec->nops * spec->nsizes;
    if (commbench_run(spec, rows)) {
        dps_log("%s", dps_errmsg());
        return 1;
    }
    for (int k = 0; k < n; k++) {
        printf("  %-14s %6d %12llu %12.1f %11.3f %11.3f %6s\n", comm_op_names[rows[k].op],
               rows[k].nranks, (unsigned long long)rows[k].bytes, rows[k].time_us,
               rows[k].algbw_gbps, rows[k].busbw_gbps, rows[k].check_ok ? "pass" : "FAIL");
        if (!rows[k].check_ok) status = 1;
    }
    if (commbench_write(rd, rows, n)) {
        dps_log("%s", dps_errmsg());
        return 1;
    }
    *written = 1;
    return status;
}

/* comm-bench's --op and --comm into spec (ops: the list's storage). */
static void bench_ops(const cli_args *a, comm_op *ops, commbench_spec *spec)
{
    spec->nops = a->nbench_ops ? a->nbench_ops : 1;
    for (int o = 0; o < spec->nops; o++) ops[o] = a->nbench_ops ? (comm_op)a->bench_ops[o] : COMM_ALLREDUCE;
    spec->ops = ops;
    spec->impl = a->bench_comm ? "gloo" : "shm";
}

/* comm-bench: every --gpus count over every --op and --sizes, a table and allreduce.csv. */
int cmd_comm_bench(cli_args *a)
{
    static const uint64_t default_sizes[] = {1 << 20, 16 << 20, 64 << 20};
    int ng[CLI_MAX_LIST] = {2, 4}, nng = a->gpus_set ? a->sweep_ngpus_n : 2;
    if (a->gpus_set) memcpy(ng, a->sweep_ngpus, sizeof ng);
    const dps_config *c = &a->cfg;
    rank_fault fault = {c->fault_rank, c->fault_step, c->fault_kind};
    commbench_spec spec = {.sizes = a->nsizes ? a->sizes : default_sizes,
                           .nsizes = a->nsizes ? a->nsizes : 3, .warmup = c->warmup,
                           .iters = c->steps, .timeout_s = c->timeout_s,
                           .fault = c->fault_rank >= 0 ? &fault : NULL};
    comm_op ops[COMMBENCH_MAX_OPS];
    bench_ops(a, ops, &spec);
    if (!comm_have(spec.impl)) {
        dps_fail(DPS_ERR_USAGE, "comm-bench --comm %s: this build has no %s (rebuild with it "
                 "found: `scripts/setup.sh` installs it)", spec.impl, spec.impl);
        return cmd_usage_error();
    }
    results_dir rd;
    if (!a->name_set) default_name(a->cfg.out_dir, a->cfg.name, sizeof a->cfg.name);
    if ((spec.fault && check_bench_fault(a, ng, nng, &spec)) ||
        results_open(&rd, a->cfg.out_dir, a->cfg.name))
        return cmd_usage_error();
    if (commbench_check_header(&rd)) {
        results_close(&rd);
        return cmd_usage_error();
    }
    printf("# dpscale comm-bench: host collectives over %s, fp32 (sum) in place; bytes: the "
           "whole buffer\n# %-14s %6s %12s %12s %11s %11s %6s\n",
           strcmp(spec.impl, "gloo") ? "shared memory (NCCL's ring)" : "Gloo's TCP on loopback",
           "op", "ranks", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "check");
    int status = 0, written = 0;
    for (int g = 0; g < nng; g++) {
        spec.nranks = ng[g];
        /* the fault applies where its rank exists */
        spec.fault = c->fault_rank >= 0 && c->fault_rank < ng[g] ? &fault : NULL;
        if (bench_group(&spec, &rd, &written)) status = 1;
    }
    if (written) printf("# results in %s/allreduce.csv\n", rd.dir);
    results_close(&rd);
    return status;
}

int cmd_info(cli_args *a)
{
    if (a->model_file[0]) return cmd_model_info(a);
    if (a->given[SET_BUCKET_MB] || a->given[SET_FIRST_BUCKET_MB]) {
        dps_fail(DPS_ERR_USAGE, "info: --bucket-mb and --first-bucket-mb are for a model file's "
                 "buckets: add --model FILE");
        return cmd_usage_error();
    }
    backend *be = NULL;
    if (be_open(&a->cfg.be, &be) != DPS_OK) {
        fprintf(stderr, "dpscale: %s\n", dps_errmsg());
        return 1;
    }
    print_info(be);
    be_close(be);
    return 0;
}
