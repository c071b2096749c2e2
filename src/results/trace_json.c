/* The timeline as Chrome trace-event JSON (see trace_json.h). Times are
 * microseconds after the first traced step began: each device's phases are
 * ms after its reference event (ptimer_mark); ddp's ranks, separate
 * processes, are placed by their references on the wall clock. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "results/results_txn.h"
#include "results/step_parts.h"
#include "results/trace_json.h"
#include "core/strategy.h"
#include "core/util.h"

enum { TID_COMPUTE = 1, TID_COMM = 2 };

typedef struct writer {
    FILE *f;
    const dps_config *c;
    const train_result *res;
    int events;
    const char *config_id;
} writer;

/* The separator before the next event. */
static FILE *event(writer *w)
{
    fputs(w->events++ ? ",\n" : "\n", w->f);
    return w->f;
}

static int pid_of(int rank) { return rank + 1; } /* pid 0 reads as the idle process in some viewers */

static void meta(writer *w, int rank, int tid, const char *what, const char *name, int sort)
{
    fprintf(event(w), "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"name\":",
            pid_of(rank), tid, what);
    dps_json_str(w->f, name);
    fputs("}}", w->f);
    fprintf(event(w), "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s_sort_index\","
            "\"args\":{\"sort_index\":%d}}", pid_of(rank), tid,
            strcmp(what, "process_name") == 0 ? "process" : "thread", sort);
}

/* Names of rank's process and of its two tracks. */
static void names(writer *w, int rank)
{
    const dps_config *c = w->c;
    int dev = c->devices[rank], dp = !dps_strategy_of(c->mode)->per_rank;
    char name[256];
    snprintf(name, sizeof name, dp ? "device %d (%s%d, %s)" : "rank %d (%s%d, %s)", rank,
             "device index ", dev, w->res->dev[rank].name);
    meta(w, rank, 0, "process_name", name, rank);
    snprintf(name, sizeof name, "compute stream (compute-%d)", dev);
    meta(w, rank, TID_COMPUTE, "thread_name", name, TID_COMPUTE);
    meta(w, rank, TID_COMM, "thread_name",
         dp ? "copies on device 0's stream" : "collectives (communication stream or thread)", TID_COMM);
}

static void slice(writer *w, int rank, int tid, const char *name, const char *cat, double ts_ms,
                  double dur_ms)
{
    fprintf(event(w), "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":", pid_of(rank), tid);
    dps_json_str(w->f, name);
    fprintf(w->f, ",\"cat\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{", cat, ts_ms * 1e3,
            dur_ms * 1e3);
}

/* A bucket's ready mark on the compute stream (thread-scoped instant). */
static void instant(writer *w, int rank, int bucket, double ts_ms)
{
    fprintf(event(w), "{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%d,\"name\":\"bucket %d "
            "ready\",\"cat\":\"bucket_ready\",\"ts\":%.3f,\"args\":{", pid_of(rank), TID_COMPUTE,
            bucket, ts_ms * 1e3);
}

/* One slice of phase p in micro-step m of timed step k; a phase run in two
 * spans has a slice each, numbered 1 and 2 (part 0: the phase's only one). */
static void phase_slice(writer *w, int rank, int tid, int p, int k, int m, double at, double ms,
                        int part)
{
    slice(w, rank, tid, dps_phase_names[p], "phase", at, ms);
    fprintf(w->f, "\"step\":%d,\"micro_step\":%d,\"ms\":%.4f", k, m, ms);
    if (part) fprintf(w->f, ",\"part\":%d", part);
    fputs("}}", w->f);
}

/* Micro-step m of timed step k of rank: a slice per phase it ran (lengths:
 * the step's records without --accum, the micro-step's own with it);
 * widens [*lo, *hi) to its own stream's slices. */
static void micro_phases(writer *w, int t, int k, int m, int rank, double offset_ms, double *lo,
                         double *hi, int *any)
{
    const train_result *res = w->res;
    const tl_phase *tp = timeline_micro(&res->tl, t, rank, m);
    const float *step_ms = res->phase_ms + ((size_t)k * res->nranks + rank) * PH_COUNT;
    int self = dps_strategy_of(w->c->mode)->per_rank ? 0 : rank; /* a rank has one slot */
    for (int p = 0; p < PH_COUNT; p++) {
        if (tp[p].on < 0) continue;
        double at = offset_ms + tp[p].begin_ms, ms = res->tl.micro > 1 ? tp[p].ms : step_ms[p];
        double more = tp[p].more_ms > 0.0f && tp[p].more_ms <= ms ? tp[p].more_ms : 0.0;
        int own = tp[p].on == self, tid = own ? TID_COMPUTE : TID_COMM;
        double end = at + ms - more;
        phase_slice(w, rank, tid, p, k, m, at, ms - more, more > 0.0 ? 1 : 0);
        if (more > 0.0) { /* its second span, on the same stream */
            double at2 = offset_ms + tp[p].more_begin_ms;
            phase_slice(w, rank, tid, p, k, m, at2, more, 2);
            if (at2 + more > end) end = at2 + more;
        }
        if (!own) continue;
        if (!*any || at < *lo) *lo = at;
        if (!*any || end > *hi) *hi = end;
        *any = 1;
    }
}

/* Timed step k of rank: its micro-steps' phases, and the step around its
 * compute stream's slices, named as skipped when the GradScaler skipped it. */
static void phases(writer *w, int t, int k, int rank, double offset_ms)
{
    const train_result *res = w->res;
    double lo = 0.0, hi = 0.0;
    int any = 0;
    for (int m = 0; m < res->tl.micro; m++) micro_phases(w, t, k, m, rank, offset_ms, &lo, &hi, &any);
    if (!any) return;
    char name[48];
    int skipped = res->scaler[k].skipped;
    snprintf(name, sizeof name, "step %d%s", k, skipped ? " (skipped: inf/NaN gradients)" : "");
    slice(w, rank, TID_COMPUTE, name, "step", lo, hi - lo);
    fprintf(w->f, "\"step\":%d,\"step_ms\":%.4f,\"micro_steps\":%d,\"skipped\":%d,", k,
            res->rank_step_ms[(size_t)k * res->nranks + rank], res->tl.micro, skipped);
    double part[PART_COUNT];
    step_partition(w->c, res, k, rank, part);
    fputs("\"partition_ms\":{", w->f);
    for (int p = 0; p < PART_COUNT; p++)
        fprintf(w->f, "%s\"%s\":%.4f", p ? "," : "", step_part_names[p], part[p]);
    fputs("}}}", w->f);
}

/* A bucket event's args, closing the event: with its wait, transfer and
 * lateness against the other ranks (step_parts.h) where there are others. */
static void bucket_args(writer *w, const tl_span *s, int k, const span_parts *p)
{
    fprintf(w->f, "\"bytes\":%llu,\"bucket\":%d,\"step\":%d,\"micro_step\":%d",
            (unsigned long long)s->bytes, s->bucket, k, s->micro);
    if (isfinite(p->wait_ms) && isfinite(p->late_ms))
        fprintf(w->f, ",\"wait_ms\":%.4f,\"transfer_ms\":%.4f,\"late_ms\":%.4f", p->wait_ms,
                p->transfer_ms, p->late_ms);
    fputs("}}", w->f);
}

/* ddp: timed step k's buckets of rank: when each was ready, its all-reduce. */
static void spans(writer *w, int t, int k, int rank, double offset_ms)
{
    const timeline *tl = &w->res->tl;
    const tl_span *s = timeline_spans(tl, t, rank);
    for (int i = 0; i < *timeline_nspans(tl, t, rank); i++) {
        char name[48];
        snprintf(name, sizeof name, "%s %s %d", dps_collective_names[s[i].op],
                 s[i].op ? "unit" : "bucket", s[i].bucket);
        span_parts parts = step_span_parts(tl, t, rank, i);
        instant(w, rank, s[i].bucket, offset_ms + s[i].ready_ms);
        bucket_args(w, &s[i], k, &parts);
        if (tl->nranks < 2) continue; /* one rank runs no collective */
        slice(w, rank, TID_COMM, name, s[i].op ? "sharded" : "allreduce", offset_ms + s[i].begin_ms,
              s[i].ms);
        bucket_args(w, &s[i], k, &parts);
    }
}

/* Where rank's reference lies after the earliest rank's (ddp; dp: 0, every
 * device's reference recorded as the step began). */
static double offset_of(const writer *w, int rank)
{
    const timeline *tl = &w->res->tl;
    if (!dps_strategy_of(w->c->mode)->per_rank) return 0.0;
    double first = tl->ref_wall_ms[0];
    for (int r = 1; r < tl->nranks; r++)
        if (tl->ref_wall_ms[r] < first) first = tl->ref_wall_ms[r];
    return tl->ref_wall_ms[rank] - first;
}

static void body(writer *w)
{
    const timeline *tl = &w->res->tl;
    int first = w->c->steps - tl->steps;
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"config_id\":", w->f);
    dps_json_str(w->f, w->config_id);
    fprintf(w->f, ",\"mode\":\"%s\",\"first_step\":%d,\"steps\":%d,\"time_unit\":\"us after the "
            "first traced step began\"},\n\"traceEvents\":[", dps_mode_names[w->c->mode], first,
            tl->steps);
    double offset[DPS_MAX_DEVICES];
    for (int r = 0; r < tl->nranks; r++) {
        names(w, r);
        offset[r] = offset_of(w, r);
    }
    for (int t = 0; t < tl->steps; t++)
        for (int r = 0; r < tl->nranks; r++) {
            phases(w, t, first + t, r, offset[r]);
            spans(w, t, first + t, r, offset[r]);
        }
    fputs("\n]}\n", w->f);
}

static void write_body(FILE *f, void *ctx)
{
    writer *w = ctx;
    w->f = f;
    body(w);
}

/* The folder's trace/, made if need be and opened (never through a link). */
static dps_status open_trace_dir(const results_dir *rd, int *fd)
{
    if (mkdirat(rd->dir_fd, TRACE_JSON_DIR, 0777) != 0 && errno != EEXIST)
        return dps_fail(DPS_ERR_RUNTIME, "%s/%s: cannot create the trace folder: %s", rd->dir,
                        TRACE_JSON_DIR, strerror(errno));
    *fd = openat(rd->dir_fd, TRACE_JSON_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0)
        return dps_fail(DPS_ERR_RUNTIME, "%s/%s: cannot open the trace folder: %s", rd->dir,
                        TRACE_JSON_DIR, errno == ELOOP || errno == ENOTDIR
                        ? "it is a symbolic link or not a folder; remove it" : strerror(errno));
    return DPS_OK;
}

dps_status trace_json_write(const results_dir *rd, const dps_config *c, const train_result *res,
                            const char *config_id)
{
    char name[224], path[DPS_PATH_MAX + 256];
    snprintf(name, sizeof name, "%s.json", config_id);
    snprintf(path, sizeof path, "%s/%s/%s", rd->dir, TRACE_JSON_DIR, name);
    int fd = -1;
    DPS_TRY(results_check_folder(rd));
    DPS_TRY(open_trace_dir(rd, &fd));
    writer w = {NULL, c, res, 0, config_id};
    dps_status rc = dps_replace_file_at(fd, name, path, write_body, &w);
    close(fd);
    return rc;
}
