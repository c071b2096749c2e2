/* Writers of the results folder and the stdout table (see results.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "build_config.h"
#include "version.h"
#include "core/csv.h"
#include "backend/nvml.h"
#include "results/results.h"
#include "core/strategy.h"
#include "results/results_txn.h"
#include "results/step_parts.h"
#include "core/util.h"

const char *const results_runs_cols[] = {
    "config_id", "status", "error", "backend", "emulated", "mode", "ngpus", "devices",
    "model", "layers", "width", "tokens", "classes", "params", "precision", "optimizer", "lr",
    "global_batch", "batch_per_gpu", "scaling", "bucket_mb", "overlap", "accum", "no_sync",
    "skipped_steps", "seed", "warmup", "steps",
    "steps_done", "step_ms_median", "step_ms_p10", "step_ms_p90", "step_ms_mean",
    "step_ms_stdev", "samples_per_s", "tokens_per_s", "model_tflops", "gemm_ref_tflops",
    "loss_first", "loss_last", "check", "check_max_rel_diff", "gpu0_alloc_peak_bytes",
    "max_other_alloc_peak_bytes", "comm_bytes_per_step", "algbw_gbps", "busbw_gbps",
    "start_time", "end_time",
};
const int results_runs_ncols = (int)(sizeof results_runs_cols / sizeof results_runs_cols[0]);

static const char *const devices_cols[] = {
    "config_id", "device", "device_index", "name", "alloc_peak_bytes", "device_peak_bytes",
    "capacity_bytes", "h2d_bytes_per_step", "d2h_bytes_per_step", "p2p_sent_bytes_per_step",
    "p2p_recv_bytes_per_step", "nvml_pcie_tx_bytes", "nvml_pcie_rx_bytes",
    "nvml_nvlink_tx_bytes", "nvml_nvlink_rx_bytes", "sm_clock_min_mhz", "sm_clock_max_mhz",
    "throttle_reasons", "device_base_bytes", "device_peak_over_base_bytes",
};

static const char *const memory_cols[] = {
    "config_id", "device", "device_index", "category", "kind", "bytes_at_peak", "peak_phase",
};

static const char *const phases_cols[] = {
    "config_id", "device", "phase", "median_ms", "mean_ms", "share_of_step", "bytes_per_step",
    "achieved_gbps",
};

static void path_of(const results_dir *r, const char *file, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", r->dir, file);
}

/* The pid written in a held lock file, or 0. */
static long lock_holder(int fd)
{
    char text[32] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n > 0) text[n] = '\0';
    return strtol(text, NULL, 10);
}

/* The lock file, opened in the folder: never through a symbolic link, and
 * only a file of its own (the pid is written into it). */
static dps_status open_lock(const results_dir *r, const char *path, int flags, int *fd)
{
    *fd = dps_openat_file(r->dir_fd, RESULTS_LOCK_FILE, flags, 0666);
    if (*fd < 0)
        return dps_fail(DPS_ERR_USAGE, "%s: cannot open the folder's lock: %s", path,
                        dps_open_strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) == 0 && st.st_nlink == 1) return DPS_OK;
    close(*fd);
    *fd = -1;
    return dps_fail(DPS_ERR_USAGE, "%s: the folder's lock has other names (hard links), so "
                    "writing the pid into it would change another file; remove it", path);
}

/* This process's pid into the lock file held open at lock_fd. */
static void write_pid(const results_dir *r, const char *path, int lock_fd)
{
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid()), fd;
    if (open_lock(r, path, O_WRONLY, &fd)) {
        dps_warn("cannot write this process's pid into the lock: %s", dps_errmsg());
        return;
    }
    struct stat a, b;
    int same = fstat(fd, &a) == 0 && fstat(lock_fd, &b) == 0 && a.st_dev == b.st_dev &&
               a.st_ino == b.st_ino;
    if (!same || ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n)
        dps_warn("%s: cannot write this process's pid into it: %s", path,
                 same ? strerror(errno) : "another file took its name");
    close(fd);
}

/* One writer a folder: an exclusive flock(2) on its lock file, held until
 * the process and its children end; the file holds the holder's pid. It is
 * held open for reading only, so that no file of the folder stays open for
 * writing while a sweep runs (its file system can still be made read-only). */
static dps_status take_lock(results_dir *r)
{
    char path[DPS_PATH_MAX + 32];
    path_of(r, RESULTS_LOCK_FILE, path, sizeof path);
    int fd;
    DPS_TRY(open_lock(r, path, O_RDONLY | O_CREAT, &fd));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        long pid = lock_holder(fd);
        close(fd);
        char who[48] = "another dpscale process";
        if (pid > 0) snprintf(who, sizeof who, "dpscale process %ld", pid);
        if (err == EWOULDBLOCK)
            return dps_fail(DPS_ERR_USAGE, "%s is in use by %s (lock %s): wait for it to end, "
                            "or write to another folder with --name", r->dir, who, path);
        return dps_fail(DPS_ERR_USAGE, "%s: cannot lock: %s", path, strerror(err));
    }
    write_pid(r, path, fd);
    r->lock_fd = fd;
    return DPS_OK;
}

/* Under the lock: the rows a writer left half-written when it died taken out. */
static dps_status settle_previous(const results_dir *r)
{
    int rolled = 0;
    char what[256] = "";
    if (results_settle(r, 0, &rolled, what, sizeof what))
        return dps_fail(DPS_ERR_USAGE, "%s", dps_errmsg());
    if (rolled)
        dps_log("%s: the rows of %s were left half-written by a dpscale that ended mid-write; "
                "they were taken out (%s), and --resume runs it again", r->dir, what,
                RESULTS_JOURNAL_FILE);
    return DPS_OK;
}

static dps_status open_folder(results_dir *r)
{
    DPS_TRY(dps_mkdirs(r->dir, "--out"));
    r->dir_fd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (r->dir_fd < 0)
        return dps_fail(DPS_ERR_USAGE, "%s: cannot open the results folder: %s", r->dir,
                        strerror(errno));
    DPS_TRY(take_lock(r));
    return settle_previous(r);
}

dps_status results_open(results_dir *r, const char *out_dir, const char *name)
{
    r->lock_fd = r->dir_fd = -1;
    r->committed = NULL;
    int n = snprintf(r->dir, sizeof r->dir, "%s/%s", out_dir, name);
    if (n < 0 || (size_t)n >= sizeof r->dir)
        return dps_fail(DPS_ERR_USAGE, "--out/--name: results path too long");
    dps_status rc = open_folder(r);
    if (rc) results_close(r);
    return rc;
}

/* The lock file stays: removing it could let a third writer lock a new file
 * while a second still waits on the old one. */
void results_close(results_dir *r)
{
    if (r->lock_fd >= 0) close(r->lock_fd);
    if (r->dir_fd >= 0) close(r->dir_fd);
    r->lock_fd = r->dir_fd = -1;
}

static void meta_devices(FILE *f, const backend *be)
{
    fputs("  \"devices\": [\n", f);
    for (int d = 0; d < be->ndev; d++) {
        fprintf(f, "    {\"index\": %d, \"name\": ", d);
        dps_json_str(f, be->info[d].name);
        fputs(", \"bus_id\": ", f);
        dps_json_str(f, be->info[d].bus_id);
        fprintf(f, ", \"memory_bytes\": %zu}%s\n", be->info[d].total_bytes,
                d + 1 < be->ndev ? "," : "");
    }
    fputs("  ],\n", f);
}

/* "versions": one field per library (be_version_fields). */
static void meta_versions(FILE *f, const backend *be)
{
    be_version_info v;
    be_versions(be, &v);
    be_version_field fields[BE_VERSION_NFIELDS];
    be_version_fields(&v, fields);
    fputs("  \"versions\": {", f);
    for (int i = 0; i < BE_VERSION_NFIELDS; i++) {
        fprintf(f, "%s\"%s\": ", i ? ", " : "", fields[i].key);
        dps_json_str(f, fields[i].value);
    }
    fputs("}\n", f);
}

/* The hosts of the joined ranks (name, the address rank 0 saw, ranks) and
 * the collectives between them. */
static void meta_nodes(FILE *f, const world_nodes *wn)
{
    fprintf(f, ", \"nodes\": [");
    for (int n = 0; n < wn->nnodes; n++) {
        int first = -1;
        for (int r = 0; r < wn->nranks; r++)
            if (wn->rank[r].node == n && first < 0) first = r;
        const world_place *p = &wn->rank[first];
        fputs(n ? ", {\"host\": " : "{\"host\": ", f);
        dps_json_str(f, p->host);
        fputs(", \"address\": ", f);
        dps_json_str(f, p->addr);
        fputs(", \"nic\": ", f);
        dps_json_str(f, p->nic);
        fputs(", \"devices\": [", f);
        for (int r = 0, k = 0; r < wn->nranks; r++)
            if (wn->rank[r].node == n) {
                fputs(k++ ? ", " : "", f);
                dps_json_str(f, wn->rank[r].device[0] ? wn->rank[r].device : "unknown");
            }
        fputs("]", f);
        fputs(", \"ranks\": [", f);
        for (int r = 0, k = 0; r < wn->nranks; r++)
            if (wn->rank[r].node == n) fprintf(f, "%s%d", k++ ? ", " : "", r);
        fputs("]}", f);
    }
    fputs("], \"collectives\": ", f);
    dps_json_str(f, wn->collectives[0] ? wn->collectives : "none ran");
}

/* Who started the ranks: dpscale itself, or a launcher and where this
 * rank 0 stood in its world. */
static void meta_launch(FILE *f, const dps_config *cfg, const world_nodes *nodes)
{
    const world *w = cfg ? &cfg->world : NULL;
    fputs("  \"launch\": {\"launcher\": ", f);
    if (!w || w->launcher == WORLD_NONE) {
        dps_json_str(f, "fork");
        fputs("},\n", f);
        return;
    }
    dps_json_str(f, world_launcher_name(w->launcher));
    fprintf(f, ", \"ranks\": %d, \"ranks_on_this_host\": %d, \"master_addr\": ", w->size,
            w->local_size > 0 ? w->local_size : w->size);
    dps_json_str(f, w->addr);
    fprintf(f, ", \"port\": %d", w->port);
    if (nodes) meta_nodes(f, nodes);
    fputs("},\n", f);
}

/* ,\n  "key": [strings] */
static void json_args(FILE *f, const char *key, int argc, char **argv)
{
    fprintf(f, ",\n  \"%s\": [", key);
    for (int i = 0; i < argc; i++) {
        if (i) fputs(", ", f);
        dps_json_str(f, argv[i]);
    }
    fputs("]", f);
}

/* --tf32 and the two PyTorch flags it stands for (every configuration of
 * the folder runs under them; an fp32 one's id ends in -tf32on or -tf32off
 * when not default). */
static void meta_tf32(FILE *f, dps_tf32 mode)
{
    fputs("  \"tf32\": {\"mode\": ", f);
    dps_json_str(f, dps_tf32_names[mode]);
    fprintf(f, ", \"cudnn_allow_tf32\": %s, \"cuda_matmul_allow_tf32\": %s, \"applies_to\": "
            "\"fp32 GEMMs; bf16 and fp16 ones are not affected\"},\n",
            dps_tf32_for(mode, 1) ? "true" : "false", dps_tf32_for(mode, 0) ? "true" : "false");
}

/* meta.json's writer's arguments, for dps_replace_file. */
typedef struct meta_args {
    const backend *be;
    const dps_config *cfg;
    const world_nodes *nodes;
    int most_devices;
    const results_cmd *cmd;
    const char *start, *end;
} meta_args;

static void meta_body(FILE *f, const meta_args *a)
{
    const backend *be = a->be;
    const results_cmd *cmd = a->cmd;
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    struct utsname u;
    uname(&u);
    fputs("{\n  \"dpscale_version\": ", f);
    dps_json_str(f, DPS_VERSION);
    fputs(",\n  \"git_describe\": ", f);
    dps_json_str(f, DPS_GIT_DESCRIBE);
    json_args(f, "command_line", cmd->argc, cmd->argv);
    json_args(f, "plan", cmd->plan_argc, cmd->plan_argv);
    fputs(",\n  \"start_time\": ", f);
    dps_json_str(f, a->start);
    fputs(",\n  \"end_time\": ", f);
    dps_json_str(f, a->end ? a->end : "");
    fputs(",\n  \"host\": ", f);
    dps_json_str(f, host);
    fprintf(f, ",\n  \"os\": \"%s %s %s\",\n  \"backend\": ", u.sysname, u.release, u.machine);
    dps_json_str(f, be->ops->name);
    fprintf(f, ",\n  \"emulated\": %s,\n", be->emulated ? "true" : "false");
    fprintf(f, "  \"strict\": %s,\n", be_strict_on(be) ? "true" : "false");
    if (be->emulated) {
        char note[160];
        fprintf(f, "  \"host_cores\": %d,\n  \"oversubscribed\": ", be->host_cores);
        if (be_oversubscribed(be, a->most_devices, note, sizeof note)) dps_json_str(f, note);
        else fputs("null", f);
        fputs(",\n", f);
    }
    fprintf(f, "  \"note\": \"%s\",\n", be->emulated
            ? "host backend: devices are emulated on the CPU; timings describe the CPU, not a GPU"
            : "");
    fputs("  \"memory\": {\"alloc_peak_bytes\": \"the harness's own allocations, exact\", "
          "\"device_peak_bytes\": \"the device's used memory (cudaMemGetInfo): context, library "
          "workspaces (cuBLAS, NCCL) and other processes included\", \"device_base_bytes\": "
          "\"the device's used memory once ready, before the run allocated\", "
          "\"device_peak_over_base_bytes\": \"device_peak_bytes - device_base_bytes\", "
          "\"regressions_judged_on\": \"alloc_peak_bytes\"},\n", f);
    meta_tf32(f, a->cfg->tf32);
    meta_devices(f, be);
    meta_launch(f, a->cfg, a->nodes);
    fputs("  \"topology\": ", f);
    if (be->emulated) {
        dps_json_str(f, "emulated devices in host memory (copies are memcpy)");
    } else {
        fputs("{\"peer_access\": [", f);
        for (int i = 0; i < be->ndev; i++) {
            fputs(i ? ", [" : "[", f);
            for (int j = 0; j < be->ndev; j++) fprintf(f, "%s%d", j ? ", " : "", be->peer[i][j]);
            fputs("]", f);
        }
        fputs("]", f);
        nvml_topology_json(be, f);
        fputs("}", f);
    }
    fputs(",\n", f);
    meta_versions(f, be);
    fputs("}\n", f);
}

static void write_meta(FILE *f, void *ctx) { meta_body(f, ctx); }

dps_status results_write_meta(const results_dir *r, const backend *be, const dps_config *cfg,
                              const world_nodes *nodes, int most_devices, const results_cmd *cmd,
                              const char *start_time, const char *end_time)
{
    char path[DPS_PATH_MAX + 32];
    path_of(r, "meta.json", path, sizeof path);
    meta_args a = {be, cfg, nodes, most_devices, cmd, start_time, end_time};
    DPS_TRY(results_check_folder(r));
    return dps_replace_file_at(r->dir_fd, "meta.json", path, write_meta, &a);
}

static void runs_identity(csv_buf *b, const dps_config *c, const backend *be,
                          const train_result *res, const run_summary *s)
{
    char devs[DPS_MAX_DEVICES * 4] = "";
    for (int i = 0; i < c->ngpus; i++) {
        size_t n = strlen(devs);
        snprintf(devs + n, sizeof devs - n, "%s%d", i ? " " : "", c->devices[i]);
    }
    csv_str(b, s->config_id);
    csv_str(b, dps_status_name(res->status));
    csv_str(b, res->status ? res->error : "");
    csv_str(b, be->ops->name);
    csv_int(b, be->emulated);
    csv_str(b, dps_mode_name(c->mode));
    csv_int(b, c->ngpus);
    csv_str(b, devs);
    csv_str(b, c->model);
    csv_int(b, c->shape.layers);
    csv_int(b, c->shape.width);
    csv_int(b, c->shape.tokens);
    csv_int(b, c->shape.classes);
    csv_u64(b, config_params(c));
    csv_str(b, dps_precision_name(c->precision));
    csv_str(b, dps_optimizer_name(c->optimizer));
    csv_num(b, c->hp.lr, 6);
    csv_int(b, c->global_batch);
    csv_int(b, config_batch_per_gpu(c));
    csv_str(b, dps_scaling_names[c->strong != 0]);
    const dps_strategy *st = dps_strategy_of(c->mode);
    if (st->buckets) {
        csv_num(b, c->bucket_mb, 3);
        csv_int(b, c->overlap);
    } else {
        csv_empty(b);
        csv_empty(b);
    }
    csv_int(b, c->accum);
    if (st->buckets) csv_str(b, c->no_sync ? "on" : "off");
    else csv_empty(b);
    int skipped = 0;
    for (int k = 0; res->scaler && k < res->steps_done; k++) skipped += res->scaler[k].skipped != 0;
    if (config_scaler(c)) csv_int(b, skipped);
    else csv_empty(b);
    csv_u64(b, c->seed);
    csv_int(b, c->warmup);
    csv_int(b, c->steps);
    csv_int(b, res->steps_done);
}

static void runs_row(csv_buf *b, const dps_config *c, const backend *be,
                     const train_result *res, const run_summary *s)
{
    runs_identity(b, c, be, res, s);
    csv_num(b, s->step.median, 4);
    csv_num(b, s->step.p10, 4);
    csv_num(b, s->step.p90, 4);
    csv_num(b, s->step.mean, 4);
    csv_num(b, s->step.stdev, 4);
    csv_num(b, s->samples_per_s, 3);
    csv_num(b, s->tokens_per_s, 1);
    csv_num(b, s->model_tflops, 6);
    csv_num(b, res->gemm_ref_tflops > 0 ? res->gemm_ref_tflops : NAN, 6);
    csv_num(b, res->losses_done ? res->loss[0] : NAN, 6);
    csv_num(b, res->losses_done ? res->loss[res->losses_done - 1] : NAN, 6);
    csv_str(b, res->check < 0 ? "off" : res->check ? "pass" : "fail");
    csv_num(b, res->check < 0 ? NAN : res->check_max_rel_diff, 9);
    uint64_t other = 0;
    for (int i = 1; i < c->ngpus; i++)
        if (res->dev[i].alloc_peak > other) other = res->dev[i].alloc_peak;
    csv_u64(b, res->dev[0].alloc_peak);
    if (c->ngpus > 1) csv_u64(b, other);
    else csv_empty(b);
    csv_num(b, s->comm_bytes_per_step, 0);
    csv_num(b, s->algbw_gbps, 3);
    csv_num(b, s->busbw_gbps, 3);
    csv_str(b, s->start_time);
    csv_str(b, s->end_time);
    csv_end_row(b);
}

static void steps_rows(csv_buf *b, const dps_config *c, const train_result *res,
                       const run_summary *s)
{
    for (int k = 0; k < res->steps_done; k++)
        for (int r = 0; r < res->nranks; r++) {
            const float *ph = res->phase_ms + ((size_t)k * res->nranks + r) * PH_COUNT;
            csv_str(b, s->config_id);
            csv_int(b, k);
            csv_int(b, r);
            csv_int(b, c->devices[r]);
            csv_num(b, res->step_ms[k], 4);
            csv_num(b, res->rank_step_ms[(size_t)k * res->nranks + r], 4);
            csv_num(b, res->loss[c->warmup + k], 6);
            csv_int(b, c->accum);
            csv_int(b, res->scaler[k].skipped);
            if (config_scaler(c)) csv_num(b, res->scaler[k].scale, 9); /* 2^-30 still shows */
            else csv_empty(b);
            for (int p = 0; p < PH_COUNT; p++) csv_num(b, ph[p], 4);
            csv_end_row(b);
        }
}

static void devices_rows(csv_buf *b, const dps_config *c, const train_result *res,
                         const run_summary *s)
{
    for (int r = 0; r < c->ngpus; r++) {
        const dev_stats *d = &res->dev[r];
        csv_str(b, s->config_id);
        csv_int(b, r);
        csv_int(b, c->devices[r]);
        csv_str(b, d->name);
        csv_u64(b, d->alloc_peak);
        csv_u64(b, d->device_peak);
        if (d->capacity) csv_u64(b, d->capacity);
        else csv_empty(b);
        for (int l = 0; l < LINK_COUNT; l++) csv_num(b, d->link_bytes[l], 0);
        csv_num(b, d->nvml_pcie_tx, 0);
        csv_num(b, d->nvml_pcie_rx, 0);
        csv_num(b, d->nvml_nvlink_tx, 0);
        csv_num(b, d->nvml_nvlink_rx, 0);
        if (d->nvml_clock) {
            char reasons[24];
            snprintf(reasons, sizeof reasons, "0x%llx", d->throttle_reasons);
            csv_int(b, d->sm_clock_min_mhz);
            csv_int(b, d->sm_clock_max_mhz);
            csv_str(b, reasons);
        } else {
            csv_empty(b);
            csv_empty(b);
            csv_empty(b);
        }
        csv_u64(b, d->device_base);
        if (d->device_peak >= d->device_base) csv_u64(b, d->device_peak - d->device_base);
        else csv_empty(b);
        csv_end_row(b);
    }
}

static void phases_rows(csv_buf *b, const train_result *res, const run_summary *s)
{
    int n = res->steps_done;
    double *x = malloc(((size_t)n + 1) * sizeof *x);
    if (!x) {
        b->oom = 1;
        return;
    }
    for (int r = 0; r < res->nranks; r++)
        for (int p = 0; p < PH_COUNT; p++) {
            for (int k = 0; k < n; k++)
                x[k] = res->phase_ms[((size_t)k * res->nranks + r) * PH_COUNT + p];
            dps_stats st;
            stats_compute(x, n, &st);
            double bytes = res->dev[r].phase_bytes[p];
            csv_str(b, s->config_id);
            csv_int(b, r);
            csv_str(b, dps_phase_names[p]);
            csv_num(b, st.median, 4);
            csv_num(b, st.mean, 4);
            csv_num(b, s->step.median > 0 ? st.median / s->step.median : NAN, 4);
            csv_num(b, bytes, 0);
            csv_num(b, bytes > 0 && st.median > 0 ? bytes / (st.median * 1e-3) / 1e9 : NAN, 3);
            csv_end_row(b);
        }
    free(x);
}

/* What each device's allocation peak was made of, by category. */
static void memory_rows(csv_buf *b, const dps_config *c, const train_result *res,
                        const run_summary *s)
{
    for (int r = 0; r < c->ngpus; r++)
        for (int k = 0; k < res->dev[r].nmem_cat; k++) {
            csv_str(b, s->config_id);
            csv_int(b, r);
            csv_int(b, c->devices[r]);
            csv_str(b, res->dev[r].mem_cat[k].what);
            csv_str(b, be_mem_kind(res->dev[r].mem_cat[k].what));
            csv_u64(b, res->dev[r].mem_cat[k].bytes);
            int ph = res->dev[r].peak_phase;
            csv_str(b, ph >= 0 && ph < PH_COUNT ? dps_phase_names[ph] : "setup");
            csv_end_row(b);
        }
}

static const char *const buckets_cols[] = {
    "config_id", "rank", "bucket", "micro_step", "bytes", "ready_ms", "allreduce_begin_ms",
    "allreduce_ms", "traced_steps", "collective", "phase", "wait_ms", "transfer_ms", "late_ms",
    "late_p25_ms", "ready_step_ms"};

enum { BK_READY, BK_BEGIN, BK_MS, BK_WAIT, BK_TRANSFER, BK_LATE, BK_LATE_P25, BK_READY_STEP,
       BK_COUNT };

/* Traced step t's figures of rank's span i (see buckets_cols), into
 * fig[f * steps + t]; BK_LATE_P25 takes BK_LATE's, read as another quantile. */
static void bucket_figures(const timeline *tl, int t, int r, int i, double *fig)
{
    const tl_span *sp = &timeline_spans(tl, t, r)[i];
    double bwd = timeline_micro(tl, t, r, sp->micro)[PH_BACKWARD].begin_ms;
    span_parts p = step_span_parts(tl, t, r, i);
    const double v[BK_COUNT] = {sp->ready_ms - bwd, sp->begin_ms - bwd, sp->ms, p.wait_ms,
                                p.transfer_ms, p.late_ms, p.late_ms, p.ready_step_ms};
    for (int f = 0; f < BK_COUNT; f++) fig[(size_t)f * tl->steps + t] = v[f];
}

/* The medians over the traced steps of rank's bucket i: when it was ready
 * and its all-reduce began, after backward began, the all-reduce's time,
 * and its wait, transfer and lateness (step_parts.h); and the lateness it
 * reached in 3 of 4 traced steps (its 25th percentile). fig: BK_COUNT x
 * steps doubles of room. */
static void bucket_medians(const timeline *tl, int r, int i, double *fig, double out[BK_COUNT])
{
    for (int t = 0; t < tl->steps; t++) bucket_figures(tl, t, r, i, fig);
    for (int f = 0; f < BK_COUNT; f++) {
        double *x = fig + (size_t)f * tl->steps;
        int n = 0;
        for (int t = 0; t < tl->steps; t++)
            if (!isnan(x[t])) x[n++] = x[t];
        out[f] = stats_quantile_in_place(x, n, f == BK_LATE_P25 ? 0.25 : 0.5);
    }
}

/* The collectives of a strategy of a process a device over the traced steps
 * (--trace-steps): one row per rank and ddp's bucket, or sharded unit's
 * collective, in issue order. */
static void buckets_rows(csv_buf *b, const dps_config *c, const train_result *res,
                         const run_summary *s)
{
    const timeline *tl = &res->tl;
    if (!dps_strategy_of(c->mode)->per_rank || tl->steps < 1) return;
    double *x = malloc((size_t)tl->steps * BK_COUNT * sizeof *x), m[BK_COUNT];
    if (!x) {
        b->oom = 1;
        return;
    }
    for (int r = 0; r < tl->nranks; r++) {
        int nb = *timeline_nspans(tl, 0, r);
        for (int t = 1; t < tl->steps; t++) /* the buckets every traced step has */
            if (*timeline_nspans(tl, t, r) < nb) nb = *timeline_nspans(tl, t, r);
        for (int i = 0; i < nb; i++) {
            const tl_span *first = &timeline_spans(tl, 0, r)[i];
            bucket_medians(tl, r, i, x, m);
            csv_str(b, s->config_id);
            csv_int(b, r);
            csv_int(b, first->bucket);
            csv_int(b, first->micro);
            csv_u64(b, first->bytes);
            csv_num(b, m[BK_READY], 4);
            csv_num(b, tl->nranks > 1 ? m[BK_BEGIN] : NAN, 4);
            csv_num(b, tl->nranks > 1 ? m[BK_MS] : NAN, 4);
            csv_int(b, tl->steps);
            csv_str(b, dps_collective_names[first->op]);
            csv_str(b, dps_phase_names[first->phase]);
            for (int f = BK_WAIT; f < BK_COUNT; f++) csv_num(b, m[f], 4);
            csv_end_row(b);
        }
    }
    free(x);
}

static const char *const partition_cols[] = {
    "config_id", "rank", "device_index", "steps", "step_ms", "compute_ms", "overlap_ms",
    "comm_exposed_ms", "copies_ms", "wait_peer_ms", "idle_host_ms"};

/* Each rank's step partition (step_parts.h), means over the timed steps:
 * the parts sum to step_ms, the mean step. */
static void partition_rows(csv_buf *b, const dps_config *c, const train_result *res,
                           const run_summary *s)
{
    int n = res->steps_done;
    if (n < 1) return;
    for (int r = 0; r < res->nranks; r++) {
        double sum[PART_COUNT] = {0}, part[PART_COUNT], step = 0.0;
        for (int k = 0; k < n; k++) {
            step_partition(c, res, k, r, part);
            for (int p = 0; p < PART_COUNT; p++) sum[p] += part[p];
            step += res->step_ms[k];
        }
        csv_str(b, s->config_id);
        csv_int(b, r);
        csv_int(b, c->devices[r]);
        csv_int(b, n);
        csv_num(b, step / n, 4);
        for (int p = 0; p < PART_COUNT; p++) csv_num(b, sum[p] / n, 4);
        csv_end_row(b);
    }
}

static const char *const ops_cols[] = {
    "config_id", "kind", "direction", "calls", "ms", "flop", "bytes", "tflops", "gbps", "step",
    "step_ms"};

/* The last timed step's ops on device 0 (dp) or rank 0, by kind and
 * direction (model/op_trace.h), with that step and its time: none when the
 * configuration did not finish its timed steps. tflops is empty for a kind
 * without GEMMs, both rates where the kind took no measurable time. */
static void ops_rows(csv_buf *b, const dps_config *c, const train_result *res,
                     const run_summary *s)
{
    if (res->steps_done < c->steps || res->steps_done < 1) return;
    int k = res->steps_done - 1;
    for (int i = 0; i < res->ops.n; i++) {
        const op_row *o = &res->ops.row[i];
        double secs = o->ms * 1e-3;
        csv_str(b, s->config_id);
        csv_str(b, o->kind);
        csv_str(b, op_dir_names[o->dir]);
        csv_int(b, o->calls);
        csv_num(b, o->ms, 4);
        csv_num(b, o->flop, 0);
        csv_num(b, o->bytes, 0);
        csv_num(b, o->flop > 0 && secs > 0 ? o->flop / secs / 1e12 : NAN, 4);
        csv_num(b, secs > 0 ? o->bytes / secs / 1e9 : NAN, 4);
        csv_int(b, k);
        csv_num(b, res->step_ms[k], 4);
        csv_end_row(b);
    }
}

/* The files of a configuration's rows, in the order they are written:
 * runs.csv last, since a row there is what says the configuration is done. */
enum { F_STEPS, F_DEVICES, F_PHASES, F_MEMORY, F_BUCKETS, F_PARTITION, F_OPS, F_RUNS, F_COUNT };

enum { STEPS_FIXED = 10 }; /* steps.csv's columns before the phases' */

static const char *const *steps_columns(void)
{
    static const char *cols[STEPS_FIXED + PH_COUNT] = {
        "config_id", "step", "rank", "device_index", "step_ms", "rank_step_ms", "loss",
        "micro_steps", "skipped", "loss_scale"};
    static char names[PH_COUNT][32];
    for (int p = 0; p < PH_COUNT; p++) {
        snprintf(names[p], sizeof names[p], "%s_ms", dps_phase_names[p]);
        cols[STEPS_FIXED + p] = names[p];
    }
    return cols;
}

#define NCOLS(a) ((int)(sizeof(a) / sizeof((a)[0])))

const results_file *results_files(int *n)
{
    static results_file files[F_COUNT];
    files[F_STEPS] = (results_file){"steps.csv", steps_columns(), STEPS_FIXED + PH_COUNT, 3};
    files[F_DEVICES] = (results_file){"devices.csv", devices_cols, NCOLS(devices_cols), 2};
    files[F_PHASES] = (results_file){"phases.csv", phases_cols, NCOLS(phases_cols), 3};
    files[F_MEMORY] = (results_file){"memory.csv", memory_cols, NCOLS(memory_cols), 4};
    files[F_BUCKETS] = (results_file){"buckets.csv", buckets_cols, NCOLS(buckets_cols), 3};
    files[F_PARTITION] = (results_file){"partition.csv", partition_cols, NCOLS(partition_cols), 2};
    files[F_OPS] = (results_file){"ops.csv", ops_cols, NCOLS(ops_cols), 3};
    files[F_RUNS] = (results_file){"runs.csv", results_runs_cols, results_runs_ncols, 1};
    *n = F_COUNT;
    return files;
}

dps_status results_check_header(const results_dir *r, const char *name,
                                 const char *const *cols, int ncols)
{
    char path[DPS_PATH_MAX + 32];
    path_of(r, name, path, sizeof path);
    return csv_check_header_at(r->dir_fd, name, path, cols, ncols);
}

dps_status results_check_headers(const results_dir *r)
{
    int n;
    const results_file *files = results_files(&n);
    for (int i = 0; i < n; i++)
        DPS_TRY(results_check_header(r, files[i].name, files[i].cols, files[i].ncols));
    return DPS_OK;
}

/* One configuration's rows of every file into b[F_COUNT]. */
static void append_rows_of(csv_buf *b, const dps_config *c, const backend *be,
                           const train_result *res, const run_summary *s)
{
    steps_rows(&b[F_STEPS], c, res, s);
    devices_rows(&b[F_DEVICES], c, res, s);
    phases_rows(&b[F_PHASES], res, s);
    memory_rows(&b[F_MEMORY], c, res, s);
    buckets_rows(&b[F_BUCKETS], c, res, s);
    partition_rows(&b[F_PARTITION], c, res, s);
    ops_rows(&b[F_OPS], c, res, s);
    runs_row(&b[F_RUNS], c, be, res, s);
}

dps_status results_append(const results_dir *r, const dps_config *c, const dps_config *twin,
                          const backend *be, const train_result *res, const run_summary *s)
{
    csv_buf b[F_COUNT];
    for (int i = 0; i < F_COUNT; i++) csv_init(&b[i]);
    run_summary as_twin = *s;
    if (twin) config_id(twin, as_twin.config_id, sizeof as_twin.config_id);
    append_rows_of(b, c, be, res, s);
    if (twin) append_rows_of(b, twin, be, res, &as_twin);
    int n;
    const results_file *files = results_files(&n);
    results_part parts[F_COUNT];
    for (int i = 0; i < n; i++) parts[i] = (results_part){files[i].name, files[i].cols,
                                                          files[i].ncols, &b[i]};
    char what[448], trace[2][224];
    const char *traces[2] = {trace[0], trace[1]};
    if (twin) snprintf(what, sizeof what, "configurations %s and %s (one run)", s->config_id,
                       as_twin.config_id);
    else snprintf(what, sizeof what, "configuration %s", s->config_id);
    snprintf(trace[0], sizeof trace[0], "%s.json", s->config_id);
    snprintf(trace[1], sizeof trace[1], "%s.json", as_twin.config_id);
    int ntraces = twin ? 2 : 1;
    for (int i = 0; res->status && i < ntraces; i++) /* only an ok configuration has a timeline */
        results_drop_trace(r, trace[i]);
    results_txn t = {what, twin ? "the configurations'" : "the configuration's", traces, ntraces,
                     parts, n};
    dps_status rc = results_commit(r, &t);
    for (int i = 0; i < F_COUNT; i++) csv_free(&b[i]);
    return rc;
}

void results_table_header(FILE *f, const backend *be, int most_devices)
{
    char note[160];
    fprintf(f, "# dpscale %s (%s), backend %s%s\n", DPS_VERSION, DPS_GIT_DESCRIBE,
            be->ops->name,
            be->emulated ? ": emulated devices, timings describe the CPU, not a GPU" : "");
    if (be_oversubscribed(be, most_devices, note, sizeof note)) fprintf(f, "# %s\n", note);
    if (be_strict_on(be))
        fputs("# strict mode (--strict, DPSCALE_STRICT=1): every op checked and ordered by the "
              "race detector; timings are not representative\n", f);
    fputs("#\n", f);
    fprintf(f, "# %-4s %4s %-10s %-4s %-5s %6s %10s %10s %10s %11s %9s %10s %10s %9s %-5s %s\n",
            "mode", "gpus", "model", "prec", "opt", "batch", "step_ms", "p10_ms", "p90_ms",
            "samples/s", "TFLOP/s", "gpu0_peak", "other_peak", "loss", "check", "status");
}

/* stdout's reader went away (`dpscale sweep | head`): the table ends there,
 * the run and its results folder go on; stdout writes to /dev/null. */
static void stop_printing(void)
{
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0 && dup2(null, STDOUT_FILENO) >= 0) clearerr(stdout);
    if (null >= 0) close(null);
}

void results_table_row(FILE *f, const dps_config *c, const train_result *res,
                       const run_summary *s)
{
    char g0[24], other[24] = "-";
    dps_fmt_bytes(res->dev[0].alloc_peak, g0, sizeof g0);
    uint64_t o = 0;
    for (int i = 1; i < c->ngpus; i++)
        if (res->dev[i].alloc_peak > o) o = res->dev[i].alloc_peak;
    if (c->ngpus > 1) dps_fmt_bytes(o, other, sizeof other);
    const char *check = res->check < 0 ? "-" : res->check ? "pass" : "FAIL";
    char num[6][24];
    const double v[6] = {s->step.median, s->step.p10, s->step.p90, s->samples_per_s,
                         s->model_tflops, res->losses_done ? res->loss[res->losses_done - 1] : NAN};
    static const char *const fmt[6] = {"%.3f", "%.3f", "%.3f", "%.1f", "%.4f", "%.4f"};
    for (int i = 0; i < 6; i++) {
        if (isfinite(v[i])) snprintf(num[i], sizeof num[i], fmt[i], v[i]);
        else dps_strlcpy(num[i], "-", sizeof num[i]);
    }
    fprintf(f, "  %-4s %4d %-10s %-4s %-5s %6d %10s %10s %10s %11s %9s %10s %10s %9s %-5s %s\n",
            dps_mode_name(c->mode), c->ngpus, c->model, dps_precision_name(c->precision),
            dps_optimizer_name(c->optimizer), c->global_batch, num[0], num[1], num[2], num[3],
            num[4], g0, other, num[5], check, dps_status_name(res->status));
    if (res->status) {
        char shown[3 * sizeof res->error]; /* the error as its cell holds it: no escapes */
        csv_clean_text(res->error, shown);
        fprintf(f, "#   %s: %s\n", dps_status_name(res->status), shown);
    }
    if (fflush(f) != 0 && f == stdout && errno == EPIPE) stop_printing();
}
