/* All-reduce benchmark of the host collectives (see commbench.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "commbench.h"
#include "csv.h"
#include "metrics.h"
#include "util.h"

/* Shared by the ranks: per size, per iteration, per rank, microseconds. */
typedef struct bench_shared {
    int nranks, nsizes, iters;
    int check_failed[COMMBENCH_MAX_SIZES];
    size_t off_comm;
} bench_shared;

static double *times(bench_shared *b, int size, int iter)
{
    double *base = (double *)(b + 1);
    return base + ((size_t)size * b->iters + (size_t)iter) * b->nranks;
}

static float value(int rank, size_t i) { return (float)((rank + 3 * (int)(i % 11)) % 17); }

static int bench_rank(bench_shared *b, comm_shared *cs, int rank, const uint64_t *sizes,
                      int warmup)
{
    comm c;
    comm_init(&c, cs, rank);
    c.wait_timeout_ms = 120000;
    uint64_t most = 0;
    for (int s = 0; s < b->nsizes; s++)
        if (sizes[s] > most) most = sizes[s];
    float *buf = calloc(most / 4 + 1, sizeof(float));
    float sync = 0.0f;
    if (!buf) return 1;
    for (int s = 0; s < b->nsizes; s++) {
        size_t n = sizes[s] / 4;
        for (int it = -warmup; it < b->iters; it++) {
            if (comm_allreduce(&c, &sync, 1, COMM_F32)) return 1; /* start together */
            double t0 = dps_now_ms();
            if (comm_allreduce(&c, buf, n, COMM_F32)) return 1;
            if (it >= 0) times(b, s, it)[rank] = (dps_now_ms() - t0) * 1e3;
        }
        for (size_t i = 0; i < n; i++) buf[i] = value(rank, i);
        if (comm_allreduce(&c, buf, n, COMM_F32)) return 1;
        for (size_t i = 0; i < n; i++) {
            float want = 0.0f;
            for (int r = 0; r < b->nranks; r++) want += value(r, i);
            if (buf[i] != want) {
                b->check_failed[s] = 1;
                break;
            }
        }
        memset(buf, 0, n * sizeof(float));
    }
    free(buf);
    return 0;
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
    row->busbw_gbps = busbw_allreduce(row->algbw_gbps, b->nranks);
    row->check_ok = !b->check_failed[s];
}

dps_status commbench_run(int nranks, const uint64_t *sizes, int nsizes, int warmup, int iters,
                         commbench_row *rows)
{
    size_t head = sizeof(bench_shared) + (size_t)nsizes * iters * nranks * sizeof(double);
    size_t off = (head + 63) & ~(size_t)63, total = off + comm_shared_bytes(nranks);
    void *mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return dps_fail(DPS_ERR_RUNTIME, "comm-bench: cannot map shared memory");
    bench_shared *b = mem;
    b->nranks = nranks;
    b->nsizes = nsizes;
    b->iters = iters;
    b->off_comm = off;
    comm_shared *cs = (comm_shared *)((char *)mem + off);
    comm_shared_init(cs, nranks);
    pid_t pid[DPS_MAX_DEVICES];
    int bad = 0;
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            exit(bench_rank(b, cs, r, sizes, warmup));
        }
        if (pid[r] < 0) bad = 1;
    }
    for (int r = 0; r < nranks; r++) {
        int ws = 0;
        if (pid[r] > 0 && (waitpid(pid[r], &ws, 0) != pid[r] || !WIFEXITED(ws) || WEXITSTATUS(ws)))
            bad = 1;
        if (bad) comm_abort(cs);
    }
    for (int s = 0; !bad && s < nsizes; s++) summarize(b, s, sizes[s], &rows[s]);
    munmap(mem, total);
    return bad ? dps_fail(DPS_ERR_RUNTIME, "comm-bench: a rank of %d failed", nranks) : DPS_OK;
}

dps_status commbench_write(const results_dir *rd, const commbench_row *rows, int n)
{
    static const char *const cols[] = {"backend", "method", "nranks", "bytes", "time_us",
                                       "algbw_gbps", "busbw_gbps", "check"};
    csv_buf b;
    csv_init(&b);
    for (int i = 0; i < n; i++) {
        csv_str(&b, "host");
        csv_str(&b, "ring-shm");
        csv_int(&b, rows[i].nranks);
        csv_u64(&b, rows[i].bytes);
        csv_num(&b, rows[i].time_us, 1);
        csv_num(&b, rows[i].algbw_gbps, 3);
        csv_num(&b, rows[i].busbw_gbps, 3);
        csv_str(&b, rows[i].check_ok ? "pass" : "fail");
        csv_end_row(&b);
    }
    char path[DPS_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/allreduce.csv", rd->dir);
    dps_status rc = csv_append(path, cols, 8, &b);
    csv_free(&b);
    return rc;
}
