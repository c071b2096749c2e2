/* Benchmark of the host collectives (see commbench.h): rank processes from
 * the rank launcher, the shared-memory ring or Gloo (over loopback, the
 * ranks met through a store this process serves) through the collectives'
 * table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm/comm.h"
#include "comm/store.h"
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

/* Shared by the ranks: per run (an op at a size: op * nsizes + size), per
 * iteration, per rank, microseconds. */
typedef struct bench_shared {
    int nranks, nsizes, iters, warmup, nops;
    int store_port;            /* Gloo: where the ranks meet; 0: shm */
    store_server *server;      /* the parent's store, serving once the ranks are forked */
    double timeout_s;
    comm_op ops[COMMBENCH_MAX_OPS];
    int check_failed[COMMBENCH_MAX_OPS * COMMBENCH_MAX_SIZES];
    uint64_t sizes[COMMBENCH_MAX_SIZES];
    rank_fault fault;          /* rank -1: none */
    bench_report rep[DPS_MAX_DEVICES];
    size_t off_comm;
} bench_shared;

static int nops_of(const commbench_spec *spec) { return spec->ops && spec->nops ? spec->nops : 1; }

int commbench_steps(const commbench_spec *spec)
{
    return nops_of(spec) * spec->nsizes * (spec->warmup + spec->iters);
}

static double *times(bench_shared *b, int run, int iter)
{
    double *base = (double *)(b + 1);
    return base + ((size_t)run * b->iters + (size_t)iter) * b->nranks;
}

static comm_shared *bench_comm(bench_shared *b) { return (comm_shared *)((char *)b + b->off_comm); }

static float value(int rank, size_t i) { return (float)((rank + 3 * (int)(i % 11)) % 17); }

/* The collective op in place over n floats. */
static dps_status collective(comm *c, comm_op op, float *buf, size_t n)
{
    if (op == COMM_REDUCE_SCATTER) return comm_reduce_scatter(c, buf, n, COMM_F32);
    if (op == COMM_ALL_GATHER) return comm_all_gather(c, buf, n, COMM_F32);
    return comm_allreduce(c, buf, n, COMM_F32);
}

/* A rank's buffers: the collectives' operands in its device's memory, as
 * NCCL's are (strict mode refuses host memory there), and the host copy
 * the check fills and reads, moved through a stream of the device. */
typedef struct bench_bufs {
    backend *be;
    be_stream *st;
    dps_buf dev, sync;  /* the collective's buffer; the float that starts the ranks together */
    float *host;
} bench_bufs;

/* Timed collectives of run k (op k / nsizes) over n floats, each started
 * together with the others. */
static dps_status time_run(bench_shared *b, comm *c, int k, bench_bufs *m, size_t n,
                           rank_beat *beat)
{
    for (int it = -b->warmup; it < b->iters; it++) {
        int step = k * (b->warmup + b->iters) + it + b->warmup;
        ranks_beat_step(beat, step);
        ranks_inject_fault(&b->fault, c->rank, step);
        DPS_TRY(comm_allreduce(c, m->sync.ptr, 1, COMM_F32)); /* start together */
        double t0 = dps_now_ms();
        DPS_TRY(collective(c, b->ops[k / b->nsizes], m->dev.ptr, n));
        if (it >= 0) times(b, k, it)[c->rank] = (dps_now_ms() - t0) * 1e3;
    }
    return DPS_OK;
}

/* Element i's exact result after op, where rank r's chunk holds it: the sum
 * over the ranks, or (all-gather) rank r's own value. */
static float want(const bench_shared *b, comm_op op, int r, size_t i)
{
    if (op == COMM_ALL_GATHER) return value(r, i);
    float sum = 0.0f;
    for (int q = 0; q < b->nranks; q++) sum += value(q, i);
    return sum;
}

/* Whether buf holds op's exact result wherever it is defined (a
 * reduce-scatter's: this rank's chunk alone). */
static int result_ok(const bench_shared *b, const comm *c, comm_op op, const float *buf, size_t n)
{
    for (int r = 0; r < c->nranks; r++) {
        size_t lo, hi;
        comm_chunk_range(n, c->nranks, r, &lo, &hi);
        if (op == COMM_REDUCE_SCATTER && r != c->rank) continue;
        for (size_t i = lo; i < hi; i++)
            if (buf[i] != want(b, op, r, i)) return 0;
    }
    return 1;
}

/* bytes between the host copy and the device buffer (to_dev: to the device),
 * the host waiting for the copy. */
static dps_status move(bench_bufs *m, int to_dev, size_t bytes)
{
    const be_ops *o = m->be->ops;
    if (to_dev) DPS_TRY(o->copy(m->be, m->st, m->dev.ptr, m->dev.dev, m->host, DPS_HOST, bytes));
    else DPS_TRY(o->copy(m->be, m->st, m->host, DPS_HOST, m->dev.ptr, m->dev.dev, bytes));
    return o->stream_sync(m->be, m->st);
}

/* One collective of run k on data whose result is known exactly: every
 * rank's values (all-gather: its own chunk's, -1 elsewhere). */
static dps_status check_run(bench_shared *b, comm *c, int k, bench_bufs *m, size_t n)
{
    comm_op op = b->ops[k / b->nsizes];
    size_t lo, hi;
    comm_chunk_range(n, c->nranks, c->rank, &lo, &hi);
    for (size_t i = 0; i < n; i++)
        m->host[i] = op == COMM_ALL_GATHER && (i < lo || i >= hi) ? -1.0f : value(c->rank, i);
    DPS_TRY(move(m, 1, n * sizeof(float)));
    DPS_TRY(collective(c, op, m->dev.ptr, n));
    DPS_TRY(move(m, 0, n * sizeof(float)));
    if (!result_ok(b, c, op, m->host, n)) b->check_failed[k] = 1;
    DPS_TRY(m->be->ops->memset0(m->be, m->st, m->dev.ptr, n * sizeof(float)));
    return m->be->ops->stream_sync(m->be, m->st);
}

/* m's buffers on the rank's device for runs of up to most bytes. */
static dps_status bufs_open(bench_bufs *m, backend *be, const comm *c, uint64_t most)
{
    char size[32];
    size_t bytes = (size_t)(most / sizeof(float) + 1) * sizeof(float);
    m->be = be;
    m->host = calloc(bytes / sizeof(float), sizeof(float));
    if (!m->host)
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory for its buffer of --sizes %s",
                        c->rank, dps_fmt_bytes_suffix(most, size, sizeof size));
    DPS_TRY(be->ops->stream_create(be, c->dev, &m->st));
    DPS_TRY(be_buf_alloc(be, c->dev, bytes, "communication", &m->dev));
    DPS_TRY(be_buf_alloc(be, c->dev, sizeof(float), "communication", &m->sync));
    DPS_TRY(be->ops->memset0(be, m->st, m->dev.ptr, bytes));
    DPS_TRY(be->ops->memset0(be, m->st, m->sync.ptr, sizeof(float)));
    return be->ops->stream_sync(be, m->st);
}

static void bufs_close(bench_bufs *m)
{
    if (m->sync.ptr) be_buf_free(m->be, &m->sync);
    if (m->dev.ptr) be_buf_free(m->be, &m->dev);
    if (m->st) m->be->ops->stream_destroy(m->be, m->st);
    free(m->host);
}

static dps_status bench_sizes(bench_shared *b, backend *be, comm *c, rank_beat *beat)
{
    uint64_t most = 0;
    for (int s = 0; s < b->nsizes; s++)
        if (b->sizes[s] > most) most = b->sizes[s];
    bench_bufs m = {0};
    dps_status rc = bufs_open(&m, be, c, most);
    for (int k = 0; !rc && k < b->nops * b->nsizes; k++) {
        size_t n = b->sizes[k % b->nsizes] / sizeof(float);
        rc = time_run(b, c, k, &m, n, beat);
        if (!rc) rc = check_run(b, c, k, &m, n);
    }
    bufs_close(&m);
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

/* This rank's collectives: shm's, or Gloo's met through the parent's store. */
static dps_status open_comm(bench_shared *b, int rank, backend *be, dps_store **st, comm **c)
{
    comm_params cp = {bench_comm(b), rank, be, rank, 0.0, "shm", NULL};
    if (b->store_port) {
        double ms = b->timeout_s > 0 ? b->timeout_s * 1e3 : 60e3;
        DPS_TRY(store_connect("127.0.0.1", b->store_port, rank, b->nranks, ms, st));
        cp.impl = "gloo";
        cp.store = *st;
    }
    return comm_open(&cp, c);
}

static int bench_rank(void *ctx, int rank, rank_beat *beat)
{
    bench_shared *b = ctx;
    backend *be = NULL;
    be_options bo = {.kind = BE_HOST, .host_devices = b->nranks, .quiet = 1};
    comm *c = NULL;
    dps_store *st = NULL;
    dps_status rc = be_open(&bo, &be);
    if (!rc) rc = open_comm(b, rank, be, &st, &c);
    if (!rc) rc = bench_sizes(b, be, c, beat);
    if (rc) report_failure(b, rank, c, rc);
    comm_close(c);
    if (st && !rc) store_finish(st);
    if (st) store_close(st);
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

/* nccl-tests' bus bandwidth (doc/PERFORMANCE.md): all-reduce's 2(n-1)/n of
 * algbw; reduce-scatter's and all-gather's (n-1)/n, each rank sending and
 * receiving (n-1)/n of the whole buffer. */
static double busbw(comm_op op, double algbw_gbps, int nranks)
{
    if (op == COMM_ALLREDUCE) return stats_busbw_allreduce(algbw_gbps, nranks);
    return algbw_gbps * (double)(nranks - 1) / (double)nranks;
}

/* Run k's row: the median over iterations of the slowest rank's time. */
static void summarize(bench_shared *b, int k, const char *method, commbench_row *row)
{
    double *t = malloc((size_t)b->iters * sizeof *t);
    for (int it = 0; t && it < b->iters; it++) {
        t[it] = 0.0;
        for (int r = 0; r < b->nranks; r++)
            if (times(b, k, it)[r] > t[it]) t[it] = times(b, k, it)[r];
    }
    dps_stats st;
    stats_compute(t, t ? b->iters : 0, &st);
    free(t);
    uint64_t bytes = b->sizes[k % b->nsizes];
    row->nranks = b->nranks;
    row->method = method;
    row->op = b->ops[k / b->nsizes];
    row->bytes = bytes;
    row->time_us = st.median;
    row->algbw_gbps = st.median > 0 ? (double)bytes / (st.median * 1e-6) / 1e9 : NAN;
    row->busbw_gbps = busbw(row->op, row->algbw_gbps, b->nranks);
    row->check_ok = !b->check_failed[k];
}

/* The shared block: the header, the times, then the collectives' region. */
static bench_shared *bench_map(const commbench_spec *spec, size_t *total)
{
    int nranks = spec->nranks, nruns = nops_of(spec) * spec->nsizes;
    size_t head = sizeof(bench_shared) + (size_t)nruns * spec->iters * nranks * sizeof(double);
    size_t off = (head + 63) & ~(size_t)63;
    *total = off + comm_shared_bytes(nranks);
    void *mem = mmap(NULL, *total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return NULL;
    bench_shared *b = mem;
    *b = (bench_shared){.nranks = nranks, .nsizes = spec->nsizes, .iters = spec->iters,
                        .warmup = spec->warmup, .nops = nops_of(spec),
                        .timeout_s = spec->timeout_s, .fault = {.rank = -1}, .off_comm = off};
    if (spec->fault) b->fault = *spec->fault;
    for (int o = 0; o < b->nops; o++) b->ops[o] = spec->ops && spec->nops ? spec->ops[o] : COMM_ALLREDUCE;
    memcpy(b->sizes, spec->sizes, (size_t)spec->nsizes * sizeof *b->sizes);
    comm_shared_init(bench_comm(b), nranks);
    return b;
}

/* Gloo's ranks meet through a store this process serves, on a port the
 * kernel picks (*srv NULL for shm): it listens now, and its thread starts
 * once the ranks are forked (bench_started), as a fork must copy no thread. */
static dps_status bench_store(const commbench_spec *spec, bench_shared *b, store_server **srv)
{
    *srv = NULL;
    if (!spec->impl || strcmp(spec->impl, "gloo") != 0) return DPS_OK;
    if (!comm_have("gloo"))
        return dps_fail(DPS_ERR_USAGE, "comm-bench --comm gloo: this build has no Gloo (rebuild "
                        "with libgloo-dev: `scripts/setup.sh` installs it)");
    DPS_TRY(store_server_listen(0, spec->nranks, spec->timeout_s > 0 ? spec->timeout_s * 1e3 : 60e3,
                                srv));
    b->store_port = store_server_port(*srv);
    b->server = *srv;
    return DPS_OK;
}

static dps_status bench_started(void *ctx)
{
    bench_shared *b = ctx;
    return store_server_serve(b->server);
}

dps_status commbench_run(const commbench_spec *spec, commbench_row *rows)
{
    size_t total;
    bench_shared *b = bench_map(spec, &total);
    if (!b) return dps_fail(DPS_ERR_RUNTIME, "comm-bench: cannot map shared memory");
    store_server *srv;
    dps_status rc = bench_store(spec, b, &srv);
    ranks_spec rs = {.nranks = spec->nranks, .rank_main = bench_rank, .ctx = b,
                     .timeout_s = spec->timeout_s, .abort = bench_abort,
                     .started = srv ? bench_started : NULL,
                     .explain_timeout = explain_timeout, .reported = reported,
                     .fault = spec->fault};
    if (!rc) rc = ranks_run(&rs);
    if (srv) store_server_stop(srv);
    if (rc) {
        char why[DPS_ERRMSG_MAX]; /* dps_fail writes the buffer dps_errmsg reads */
        dps_strlcpy(why, dps_errmsg(), sizeof why);
        rc = dps_fail(rc, "comm-bench with %d ranks: %s", spec->nranks, why);
    }
    const char *method = spec->impl ? spec->impl : "shm";
    for (int k = 0; !rc && k < b->nops * b->nsizes; k++) summarize(b, k, method, &rows[k]);
    munmap(b, total);
    return rc;
}

/* allreduce.csv's columns, in the order commbench_write writes them: the
 * implementation (method) and the collective (op: comm_op_names) of each row. */
static const char *const bench_cols[] = {"backend", "method", "op", "nranks", "bytes", "time_us",
                                         "algbw_gbps", "busbw_gbps", "check"};
static const results_table bench_table = {
    "allreduce.csv", bench_cols, (int)(sizeof bench_cols / sizeof bench_cols[0]),
    "the collectives' timings"};

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
        csv_str(&b, rows[i].method);
        csv_str(&b, comm_op_names[rows[i].op]);
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
