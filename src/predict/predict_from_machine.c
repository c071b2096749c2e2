/* The machine of a results folder (predict_from_machine, predict_from.h):
 * links.csv's largest copies and latency, allreduce.csv's bus bandwidth,
 * devices.csv's capacity. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict/predict_from.h"
#include "core/csv_table.h"
#include "core/stats.h"
#include "core/util.h"

#define CELL CSV_TABLE_CELL
#define MAX_VALUES 4096

/* The column indices of names[0..n) in t. */
static dps_status columns(const csv_table *t, const char *const *names, int *col, int n)
{
    for (int i = 0; i < n; i++) DPS_TRY(csv_table_col(t, names[i], &col[i]));
    return DPS_OK;
}

/* links.csv: the median of `value` over the ok rows of `method` at the
 * largest size it was measured at; 0 when it has none. */
static dps_status link_median(const csv_table *t, const char *method, const char *value, double *out)
{
    static const char *const names[] = {"method", "bytes", "status"};
    int col[3], cv, n = 0;
    double top = -1, bytes, x, v[MAX_VALUES];
    char a[CELL], b[CELL];
    DPS_TRY(columns(t, names, col, 3));
    DPS_TRY(csv_table_col(t, value, &cv));
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < t->nrows && n < MAX_VALUES; r++) {
            if (strcmp(csv_table_cell(t, r, col[0], a, CELL), method) != 0 ||
                strcmp(csv_table_cell(t, r, col[2], b, CELL), "ok") != 0)
                continue;
            DPS_TRY(csv_table_num(t, r, col[1], 0, 0, &bytes));
            if (pass == 0) top = fmax(top, bytes);
            else if (bytes == top && csv_table_num(t, r, cv, 0, 0, &x) == DPS_OK) v[n++] = x;
        }
    *out = stats_median_or(v, n, 0.0);
    return DPS_OK;
}

/* The devices links.csv measured: the highest "devN" + 1 (devices.csv
 * may add to it: the most devices a run used). */
static int link_devices(const csv_table *t)
{
    int cs, cd, most = 0;
    char a[CELL];
    if (csv_table_col(t, "src", &cs) || csv_table_col(t, "dst", &cd)) return 0;
    for (int r = 0; r < t->nrows; r++)
        for (int k = 0; k < 2; k++) {
            const char *s = csv_table_cell(t, r, k ? cd : cs, a, CELL);
            if (strncmp(s, "dev", 3) == 0 && atoi(s + 3) + 1 > most) most = atoi(s + 3) + 1;
        }
    return most;
}

static dps_status from_links(const char *dir, predict_machine *m, int *host)
{
    char be[CELL];
    csv_table t;
    DPS_TRY(csv_table_open(dir, "links.csv", "run `dpscale links --out ... --name ...` into the folder, or "
                           "give --machine FILE", &t));
    int cb;
    dps_status rc = csv_table_col(&t, "backend", &cb);
    *host = !rc && t.nrows && strcmp(csv_table_cell(&t, 0, cb, be, CELL), "host") == 0;
    if (!rc) rc = link_median(&t, "d2d_write", "bw_gbps", &m->p2p_gbps);
    if (!rc) rc = link_median(&t, "h2d", "bw_gbps", &m->h2d_gbps);
    if (!rc) rc = link_median(&t, "latency", "latency_us", &m->intra_latency_us);
    m->gpus_per_node = link_devices(&t);
    csv_table_free(&t);
    DPS_TRY(rc);
    if (m->gpus_per_node >= 2 && m->p2p_gbps > 0 && m->h2d_gbps > 0) return DPS_OK;
    return dps_fail(DPS_ERR_USAGE, "%s/links.csv: no device-to-device copies between two devices "
                    "measured (run `dpscale links --gpus 2` or more into the folder, or give "
                    "--machine FILE)", dir);
}

/* Whether row r of allreduce.csv is an all-reduce that passed its check
 * (op: its column, -1 in a folder from before comm-bench had other
 * collectives: every row an all-reduce). */
static int allreduce_passed(const csv_table *t, int r, int check, int op)
{
    char a[CELL];
    if (op >= 0 && strcmp(csv_table_cell(t, r, op, a, CELL), "all-reduce") != 0) return 0;
    return strcmp(csv_table_cell(t, r, check, a, CELL), "pass") == 0;
}

/* allreduce.csv: the median busbw over rank counts at the size nearest
 * (on a log scale) to bucket_mb MiB, the size of DDP's buckets. */
static dps_status from_allreduce(const char *dir, double bucket_mb, predict_machine *m)
{
    static const char *const names[] = {"bytes", "busbw_gbps", "check"};
    csv_table t;
    int col[3], op, n = 0;
    double best = -1, bytes, x, v[MAX_VALUES], want = log(bucket_mb * 1048576.0);
    DPS_TRY(csv_table_open(dir, "allreduce.csv", "run `dpscale comm-bench --out ... --name ...` into the folder, "
                           "or give --machine FILE", &t));
    if (csv_table_col(&t, "op", &op) != DPS_OK) op = -1;
    dps_status rc = columns(&t, names, col, 3);
    for (int pass = 0; !rc && pass < 2; pass++)
        for (int r = 0; !rc && r < t.nrows && n < MAX_VALUES; r++) {
            if (!allreduce_passed(&t, r, col[2], op)) continue;
            rc = csv_table_num(&t, r, col[0], 0, 0, &bytes);
            double d = rc || bytes <= 0 ? INFINITY : fabs(log(bytes) - want);
            if (!rc && pass == 0 && (best < 0 || d < best)) best = d;
            if (!rc && pass == 1 && d == best) rc = csv_table_num(&t, r, col[1], 0, 0, &x);
            if (!rc && pass == 1 && d == best) v[n++] = x;
        }
    csv_table_free(&t);
    DPS_TRY(rc);
    if (!n)
        return dps_fail(DPS_ERR_USAGE, "%s/allreduce.csv: no all-reduce that passed its check (run "
                        "`dpscale comm-bench` into the folder again, or give --machine FILE)", dir);
    m->intra_busbw_gbps = stats_median_or(v, n, 0.0);
    return DPS_OK;
}

/* devices.csv: the first device's capacity, GiB (0: not known), and the
 * most devices a configuration used (device index + 1). */
static dps_status from_devices(const char *dir, predict_machine *m)
{
    csv_table t;
    int c, ci, present;
    double x;
    DPS_TRY(csv_table_open_optional(dir, "devices.csv", &t, &present));
    if (!present) return DPS_OK; /* links and comm-bench only */
    dps_status rc = csv_table_col(&t, "capacity_bytes", &c);
    if (!rc) rc = csv_table_col(&t, "device_index", &ci);
    if (!rc && t.nrows) rc = csv_table_num(&t, 0, c, 1, 0.0, &x);
    if (!rc && t.nrows) m->gpu_mem_gib = x / 1073741824.0;
    for (int r = 0; !rc && r < t.nrows; r++) {
        rc = csv_table_num(&t, r, ci, 0, 0, &x);
        if (!rc && x + 1 > m->gpus_per_node) m->gpus_per_node = (int)x + 1;
    }
    csv_table_free(&t);
    return rc;
}

dps_status predict_from_machine(const char *dir, double bucket_mb, predict_machine *m)
{
    int host = 0;
    *m = (predict_machine){.nodes = 1, .inter_latency_us = 9.6};
    dps_strlcpy(m->name, dps_path_base(dir), sizeof m->name);
    DPS_TRY(from_links(dir, m, &host));
    if (!host)
        return dps_fail(DPS_ERR_USAGE, "%s: measured on GPUs; the all-reduce dpscale comm-bench "
                        "measures is the host's, not NCCL's: give --machine FILE with "
                        "intra_busbw_gbps from nccl-tests' all_reduce_perf", dir);
    DPS_TRY(from_allreduce(dir, bucket_mb, m));
    m->intra_link = PLINK_HOST;
    /* emulated devices copy with memcpy: each byte copied is read and written */
    m->mem_gbps = 2.0 * m->p2p_gbps;
    return from_devices(dir, m);
}
