/* All-reduce benchmark of the host collectives (see commbench.h): rank
 * processes from the rank launcher, the shared-memory ring through the
 * collectives' table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm/comm.h"
#include "microbench/commbench.h"
#include "results/results_txn.h"
#include "core/csv.h"
#include "core/stats.h"
#include "launch/ranks.h"
#include "core/util.h"

/* What a rank tells the parent when it fails. */
typedef struct bench_report {
    dps_status status;
    int secondary;             /* failed because another rank had failed first */
    char error[DPS_ERRMSG_MAX];
} bench_report;

/* Shared by the ranks: per size, per iteration, per rank, microseconds. */
typedef struct bench_shared {
    int nranks, nsizes, iters, warmup;
    int check_failed[COMMBENCH_MAX_SIZES];
    uint64_t sizes[COMMBENCH_MAX_SIZES];
    rank_fault fault;          /* rank -1: none */
    bench_report rep[DPS_MAX_DEVICES];
    size_t off_comm;
} bench_shared;

int commbench_steps(const commbench_spec *spec)
{
    return spec->nsizes * (spec->warmup + spec->iters);
}

static double *times(bench_shared *b, int size, int iter)
{
    double *base = (double *)(b + 1);
    return base + ((size_t)size * b->iters + (size_t)iter) * b->nranks;
}

static comm_shared *bench_comm(bench_shared *b) { return (comm_shared *)((char *)b + b->off_comm); }

static float value(int rank, size_t i) { return (float)((rank + 3 * (int)(i % 11)) % 17); }

/* Timed all-reduces of n floats, each started together with the others. */
static dps_status time_size(bench_shared *b, comm *c, int s, float *buf, size_t n, rank_beat *beat)
{
    float sync = 0.0f;
    for (int it = -b->warmup; it < b->iters; it++) {
        int step = s * (b->warmup + b->iters) + it + b->warmup;
        ranks_beat_step(beat, step);
        ranks_inject_fault(&b->fault, c->rank, step);
        DPS_TRY(comm_allreduce(c, &sync, 1, COMM_F32)); /* start together */
        double t0 = dps_now_ms();
        DPS_TRY(comm_allreduce(c, buf, n, COMM_F32));
        if (it >= 0) times(b, s, it)[c->rank] = (dps_now_ms() - t0) * 1e3;
    }
    return DPS_OK;
}

/* One all-reduce of data whose sum is known exactly. */
static dps_status check_size(bench_shared *b, comm *c, int s, float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) buf[i] = value(c->rank, i);
    DPS_TRY(comm_allreduce(c, buf, n, COMM_F32));
    for (size_t i = 0; i < n; i++) {
        float want = 0.0f;
        for (int r = 0; r < b->nranks; r++) want += value(r, i);
        if (buf[i] != want) {
            b->check_failed[s] = 1;
            break;
        }
    }
    memset(buf, 0, n * sizeof(float));
    return DPS_OK;
}

static dps_status bench_sizes(bench_shared *b, comm *c, rank_beat *beat)
{
    uint64_t most = 0;
    for (int s = 0; s < b->nsizes; s++)
        if (b->sizes[s] > most) most = b->sizes[s];
    float *buf = calloc(most / sizeof(float) + 1, sizeof(float));
    char size[32];
    if (!buf)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for its buffer of --sizes %s",
                        c->rank, dps_fmt_bytes_suffix(most, size, sizeof size));
    dps_status rc = DPS_OK;
    for (int s = 0; !rc && s < b->nsizes; s++) {
        size_t n = b->sizes[s] / sizeof(float);
        rc = time_size(b, c, s, buf, n, beat);
        if (!rc) rc = check_size(b, c, s, buf, n);
    }
    free(buf);
    return rc;
}

/* This rank's failure for the parent; whether another rank failed first
 * (this one then failed because of it) decides which message the run gives. */
static void report_failure(bench_shared *b, int rank, const comm *c, dps_status rc)
{
    bench_report *rep = &b->rep[rank];
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rank %d: ", rank);
    rep->status = rc;
    snprintf(rep->error, sizeof rep->error, "%s%s",
             strncmp(dps_errmsg(), prefix, strlen(prefix)) ? prefix : "", dps_errmsg());
    if (c && c->failed) rep->secondary = c->secondary;
    else rep->secondary = comm_shared_abort(bench_comm(b));
}

static int bench_rank(void *ctx, int rank, rank_beat *beat)
{
    bench_shared *b = ctx;
    backend *be = NULL;
    be_options bo = {.kind = BE_HOST, .host_devices = b->nranks, .quiet = 1};
    comm *c = NULL;
    dps_status rc = be_open(&bo, &be);
    comm_params cp = {bench_comm(b), rank, be, rank, 0.0, NULL, NULL};
    if (!rc) rc = comm_open(&cp, &c);
    if (!rc) rc = bench_sizes(b, c, beat);
    if (rc) report_failure(b, rank, c, rc);
    comm_close(c);
    if (be) be_close(be);
    return rc ? 1 : 0;
}

static void bench_abort(void *ctx) { comm_shared_abort(bench_comm(ctx)); }

/* Which ranks wait in a collective and which do not. */
static void explain_timeout(void *ctx, char *buf, size_t len)
{
    comm_shared_explain_waiting(bench_comm(ctx), NULL, buf, len);
}

/* The rank that failed first and said why (not one that failed because of it). */
static dps_status reported(void *ctx, char *buf, size_t len)
{
    bench_shared *b = ctx;
    for (int r = 0; r < b->nranks; r++)
        if (b->rep[r].status && !b->rep[r].secondary) {
            dps_strlcpy(buf, b->rep[r].error, len);
            return b->rep[r].status;
        }
    return DPS_OK;
}

static void summarize(bench_shared *b, int s, uint64_t bytes, commbench_row *row)
{
    double *t = malloc((size_t)b->iters * sizeof *t);
    for (int it = 0; t && it < b->iters; it++) {
        t[it] = 0.0;
        for (int r = 0; r < b->nranks; r++)
            if (times(b, s, it)[r] > t[it]) t[it] = times(b, s, it)[r];
    }
    dps_stats st;
    stats_compute(t, t ? b->iters : 0, &st);
    free(t);
    row->nranks = b->nranks;
    row->bytes = bytes;
    row->time_us = st.median;
    row->algbw_gbps = st.median > 0 ? (double)bytes / (st.median * 1e-6) / 1e9 : NAN;
    row->busbw_gbps = stats_busbw_allreduce(row->algbw_gbps, b->nranks);
    row->check_ok = !b->check_failed[s];
}

dps_status commbench_run(const commbench_spec *spec, commbench_row *rows)
{
    int nranks = spec->nranks, nsizes = spec->nsizes, iters = spec->iters;
    size_t head = sizeof(bench_shared) + (size_t)nsizes * iters * nranks * sizeof(double);
    size_t off = (head + 63) & ~(size_t)63, total = off + comm_shared_bytes(nranks);
    void *mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return dps_fail(DPS_ERR_RUNTIME, "comm-bench: cannot map shared memory");
    bench_shared *b = mem;
    *b = (bench_shared){.nranks = nranks, .nsizes = nsizes, .iters = iters,
                        .warmup = spec->warmup, .fault = {.rank = -1}, .off_comm = off};
    if (spec->fault) b->fault = *spec->fault;
    memcpy(b->sizes, spec->sizes, (size_t)nsizes * sizeof *b->sizes);
    comm_shared_init(bench_comm(b), nranks);
    ranks_spec rs = {.nranks = nranks, .rank_main = bench_rank, .ctx = b,
                     .timeout_s = spec->timeout_s, .abort = bench_abort,
                     .explain_timeout = explain_timeout, .reported = reported,
                     .fault = spec->fault};
    dps_status rc = ranks_run(&rs);
    if (rc) {
        char why[DPS_ERRMSG_MAX]; /* dps_fail writes the buffer dps_errmsg reads */
        dps_strlcpy(why, dps_errmsg(), sizeof why);
        rc = dps_fail(rc, "comm-bench with %d ranks: %s", nranks, why);
    }
    for (int s = 0; !rc && s < nsizes; s++) summarize(b, s, spec->sizes[s], &rows[s]);
    munmap(mem, total);
    return rc;
}

/* allreduce.csv's columns, in the order commbench_write writes them. */
static const char *const bench_cols[] = {"backend", "method", "nranks", "bytes", "time_us",
                                         "algbw_gbps", "busbw_gbps", "check"};
static const results_table bench_table = {
    "allreduce.csv", bench_cols, (int)(sizeof bench_cols / sizeof bench_cols[0]),
    "the all-reduce timings"};

dps_status commbench_check_header(const results_dir *rd)
{
    return results_check_header(rd, bench_table.name, bench_table.cols, bench_table.ncols);
}

dps_status commbench_write(const results_dir *rd, const commbench_row *rows, int n)
{
    csv_buf b;
    csv_init(&b);
    for (int i = 0; i < n; i++) {
        csv_str(&b, "host");
        csv_str(&b, "shm");
        csv_int(&b, rows[i].nranks);
        csv_u64(&b, rows[i].bytes);
        csv_num(&b, rows[i].time_us, 1);
        csv_num(&b, rows[i].algbw_gbps, 3);
        csv_num(&b, rows[i].busbw_gbps, 3);
        csv_str(&b, rows[i].check_ok ? "pass" : "fail");
        csv_end_row(&b);
    }
    dps_status rc = results_commit_table(rd, &bench_table, &b);
    csv_free(&b);
    return rc;
}
