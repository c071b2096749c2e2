/* Sweeps (see sweep.h). The parent forks one child per configuration; the
 * child runs it and writes its rows; the parent waits with a deadline and
 * writes the row itself when the child died or hung without writing one. */
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "results/results_txn.h"
#include "run/run.h"
#include "run/sweep.h"
#include "core/util.h"

int sweep_filter(sweep_item *items, int n, const char *filter)
{
    int left = 0;
    for (int i = 0; i < n; i++) {
        char id[192];
        config_id(&items[i].cfg, id, sizeof id);
        int match = !filter || (strpbrk(filter, "*?[") ? fnmatch(filter, id, 0) == 0
                                                       : strstr(id, filter) != NULL);
        if (!match) dps_strlcpy(items[i].skip, "-", sizeof items[i].skip);
        else left++;
    }
    return left;
}

/* Whether a and b are one run: the same configuration but for the scaling
 * label, which no run reads (its id, that label aside, and what no id tells
 * apart: steps, warm-up, capacity, learning rate, devices). */
static int same_run(const dps_config *a, const dps_config *b)
{
    if (a->strong == b->strong || a->ngpus != b->ngpus || a->global_batch != b->global_batch)
        return 0; /* the ids need not be made */
    dps_config t = *b;
    t.strong = a->strong;
    char ia[192], ib[192];
    config_id(a, ia, sizeof ia);
    config_id(&t, ib, sizeof ib);
    return strcmp(ia, ib) == 0 && a->steps == b->steps && a->warmup == b->warmup &&
           a->be.device_mem == b->be.device_mem && a->net_file == b->net_file &&
           a->seed == b->seed && a->fault_rank == b->fault_rank &&
           memcmp(&a->hp, &b->hp, sizeof a->hp) == 0 &&
           memcmp(a->devices, b->devices, sizeof a->devices) == 0;
}

/* Whether item it would run: --filter kept it, this machine can run it, and
 * (done: --resume) the folder does not hold it. */
static int would_run(const sweep_item *it, const results_ids *done)
{
    char id[192];
    config_id(&it->cfg, id, sizeof id);
    return !it->skip[0] && !(done && results_ids_has(done, id));
}

void sweep_pair(sweep_item *items, int n, const results_ids *done)
{
    for (int i = 0; i < n; i++) items[i].twin = items[i].same_as = -1;
    for (int i = 0; i < n; i++) {
        if (items[i].same_as >= 0 || !would_run(&items[i], done)) continue;
        for (int j = i + 1; j < n && items[i].twin < 0; j++) {
            if (items[j].same_as >= 0 || !same_run(&items[i].cfg, &items[j].cfg) ||
                !would_run(&items[j], done))
                continue;
            items[i].twin = j;
            items[j].same_as = i;
        }
    }
}

static void fmt_time(double s, char *buf, size_t len)
{
    int t = s < 0 ? 0 : (int)(s + 0.5);
    snprintf(buf, len, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
}

/* The progress line of run i of total: id, and its twin's when it has one
 * ("" for none). */
static void progress(int i, int total, const char *id, const char *twin, double elapsed_s,
                     double eta_s, int tty)
{
    char el[16], eta[16];
    fmt_time(elapsed_s, el, sizeof el);
    if (eta_s >= 0) fmt_time(eta_s, eta, sizeof eta);
    else dps_strlcpy(eta, "?", sizeof eta);
    const char *also = twin[0] ? " = " : "";
    if (tty) fprintf(stderr, "\r\033[K[%d/%d] %s%s%s  elapsed %s  ETA %s", i, total, id, also, twin,
                     el, eta);
    else fprintf(stderr, "dpscale: [%d/%d] %s%s%s (elapsed %s, ETA %s)\n", i, total, id, also,
                 twin, el, eta);
    fflush(stderr);
}

/* What a configuration's process tells the sweep, in shared memory. */
typedef struct child_report {
    int written;                 /* its rows reached the folder */
    char error[DPS_ERRMSG_MAX];  /* why it failed, when it did */
} child_report;

typedef struct child_outcome {
    int written;          /* the child wrote its rows */
    int rolled_back;      /* it died mid-commit: the rows it had appended were taken back */
    int unsettled;        /* and they could not all be: nothing more is written */
    int timed_out;
    int killed_escalated; /* it outlived the second signal's grace and was killed */
    int ws;               /* wait status */
    char error[DPS_ERRMSG_MAX];
} child_outcome;

/* A child outliving the second signal by this much is killed: the sweep's
 * own grace (DPS_ESCALATE_GRACE_S) must leave time to record it after. */
#define CHILD_ESCALATE_GRACE_MS 5000.0

typedef struct forward_state {
    int sent;             /* signals passed on to the child: 0, 1 or 2 */
    double second_ms;     /* when the second was */
    int killed;
} forward_state;

/* The two-signal rule passed on to the child: the first signal, so that it
 * ends after its step with its row, then on the second another signal (two
 * of the same, pending together, would count once; the child's own grace
 * ends when the sweep's does, so that needs none), then SIGKILL if it is
 * still running CHILD_ESCALATE_GRACE_MS later. 1 when it was killed now. */
static int forward_interrupts(pid_t pid, forward_state *fw, double now)
{
    int first = dps_interrupted();
    if (!first) return 0;
    if (fw->sent == 0) {
        kill(pid, first);
        fw->sent = 1;
    } else if (fw->sent == 1 && dps_escalated()) {
        if (!dps_escalated_by_grace()) kill(pid, first == SIGTERM ? SIGINT : SIGTERM);
        fw->sent = 2;
        fw->second_ms = now;
    } else if (fw->sent == 2 && !fw->killed && now - fw->second_ms > CHILD_ESCALATE_GRACE_MS) {
        kill(pid, SIGKILL);
        fw->killed = 1;
        return 1;
    }
    return 0;
}

/* What the progress line of a run shows. */
typedef struct run_view {
    int idx, total;        /* run idx of total */
    const char *id, *twin; /* its ids: the configuration's, its twin's ("": none) */
    double t_start, eta0;  /* when the sweep began (ms); the ETA as it began (s, -1: none) */
} run_view;

/* Runs one configuration (and its twin, NULL: none) in a child process and
 * waits for it, showing progress; kills it past the deadline. rd NULL: its
 * warm-up alone, which writes nothing (see warm_up). */
static dps_status run_child(const dps_config *cfg, const dps_config *twin, backend *be,
                            const results_dir *rd, const sweep_opts *o, child_report *shared,
                            child_outcome *out, const run_view *v)
{
    memset(out, 0, sizeof *out);
    memset(shared, 0, sizeof *shared);
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return dps_fail(DPS_ERR_RUNTIME, "cannot fork for %s", v->id);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the configuration dies with the sweep */
        if (getppid() != parent) _exit(1);
        int w = 0;
        results_dir mine = rd ? *rd : (results_dir){.dir_fd = -1, .lock_fd = -1};
        mine.committed = &shared->written; /* set as its rows are all in (results_commit) */
        dps_status rc = rd ? run_config(cfg, twin, NULL, be, &mine, &w) : run_untimed(cfg, be);
        if (rc) dps_strlcpy(shared->error, dps_errmsg(), sizeof shared->error);
        if (rc && !w && rd) dps_log("%s", shared->error); /* the table has no line for it yet */
        shared->written = w;
        fflush(NULL);
        exit(rc == DPS_OK ? 0 : 1);
    }
    int tty = isatty(STDERR_FILENO);
    double begin = dps_now_ms(), last = 0.0;
    forward_state fw = {0};
    for (;;) {
        pid_t r = waitpid(pid, &out->ws, WNOHANG);
        if (r == pid) break;
        double now = dps_now_ms();
        if (forward_interrupts(pid, &fw, now)) out->killed_escalated = 1;
        if (!out->timed_out && o->config_timeout_s > 0 && now - begin > o->config_timeout_s * 1e3) {
            out->timed_out = 1;
            kill(pid, SIGKILL);
        }
        if (tty && now - last > 500.0) {
            double eta = v->eta0 >= 0 ? v->eta0 - (now - begin) / 1e3 : -1;
            progress(v->idx, v->total, v->id, v->twin, (now - v->t_start) / 1e3,
                     eta < 0 && v->eta0 >= 0 ? 0 : eta, 1);
            last = now;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (tty) fprintf(stderr, "\r\033[K");
    out->written = shared->written;
    dps_strlcpy(out->error, shared->error, sizeof out->error);
    /* a child that died mid-commit left its journal: its rows are taken back */
    if (rd && results_settle(rd, out->written, &out->rolled_back, NULL, 0)) {
        dps_log("%s", dps_errmsg());
        out->unsettled = 1;
    }
    return DPS_OK;
}

/* What the parent records when the child left no row. */
static void record_death(const dps_config *cfg, const dps_config *twin, const backend *be,
                         const results_dir *rd, const child_outcome *c, const sweep_opts *o)
{
    char why[DPS_ERRMSG_MAX];
    dps_status st = DPS_ERR_RUNTIME;
    if (c->timed_out) {
        st = DPS_ERR_TIMEOUT;
        snprintf(why, sizeof why, "the configuration ran past --config-timeout %g s and was killed",
                 o->config_timeout_s);
    } else if (c->killed_escalated) {
        snprintf(why, sizeof why, "interrupted by %s: the configuration's process was still "
                 "running %g s after %s cut its step short and was killed", dps_signal_name(
                 dps_interrupted()), CHILD_ESCALATE_GRACE_MS / 1e3, dps_escalation_cause());
    } else if (WIFSIGNALED(c->ws)) {
        snprintf(why, sizeof why, "the configuration's process was killed by %s (signal %d)%s",
                 dps_signal_name(WTERMSIG(c->ws)), WTERMSIG(c->ws), c->rolled_back
                 ? " while writing its rows, which were taken back out" : "");
    } else if (c->error[0]) {
        snprintf(why, sizeof why, "%s", c->error);
    } else {
        snprintf(why, sizeof why, "the configuration's process exited with status %d before "
                 "writing its results", WEXITSTATUS(c->ws));
    }
    if (run_record(cfg, twin, be, rd, st, why)) dps_log("%s", dps_errmsg());
}

/* The first configuration's process is slower than the next ones (the
 * libraries' pages, their kernels' first calls, the clocks): before the
 * first timed configuration, the first to run trains two steps untimed in a
 * process of its own. A failure there is the configuration's to report. */
static void warm_up(sweep_item *items, int n, backend *be, const sweep_opts *o,
                    child_report *shared)
{
    for (int i = 0; i < n; i++) {
        char id[192];
        config_id(&items[i].cfg, id, sizeof id);
        if (items[i].skip[0] || (o->done && results_ids_has(o->done, id))) continue;
        child_outcome c;
        if (!isatty(STDERR_FILENO)) dps_log("warm-up: %s, two steps untimed", id);
        run_view v = {0, 0, "warm-up", "", dps_now_ms(), -1};
        if (run_child(&items[i].cfg, NULL, be, NULL, o, shared, &c, &v))
            dps_log("%s", dps_errmsg());
        return;
    }
}

/* Where a sweep stands, for the progress line and the ETA. */
typedef struct sweep_clock {
    int idx, total;       /* entries reached, of those to reach (a twin is its earlier's) */
    double t_start, spent; /* when the runs began (ms); what they took together (s) */
} sweep_clock;

/* Runs item i, and its twin with it, in a child and tallies them; 1 when
 * the sweep stops. */
static int run_item(sweep_item *items, int i, backend *be, const results_dir *rd,
                    const sweep_opts *o, child_report *shared, sweep_clock *k, sweep_tally *t)
{
    const sweep_item *it = &items[i];
    const dps_config *twin = it->twin >= 0 ? &items[it->twin].cfg : NULL;
    char id[192], twin_id[192] = "";
    config_id(&it->cfg, id, sizeof id);
    if (twin) config_id(twin, twin_id, sizeof twin_id);
    if (results_check_folder(rd)) { /* moved or deleted: stop, nothing more is written */
        dps_log("%s", dps_errmsg());
        t->failed++;
        return 1;
    }
    double eta = t->ran ? k->spent / t->ran * (k->total - k->idx + 1) : -1.0;
    if (!isatty(STDERR_FILENO))
        progress(k->idx, k->total, id, twin_id, (dps_now_ms() - k->t_start) / 1e3, eta, 0);
    double t0 = dps_now_ms();
    child_outcome c;
    run_view v = {k->idx, k->total, id, twin_id, k->t_start, eta};
    if (run_child(&it->cfg, twin, be, rd, o, shared, &c, &v)) {
        dps_log("%s", dps_errmsg());
        t->failed++;
        return 1;
    }
    k->spent += (dps_now_ms() - t0) / 1e3;
    t->ran++;
    t->twins += twin != NULL;
    int ok = !c.timed_out && WIFEXITED(c.ws) && WEXITSTATUS(c.ws) == 0;
    if (!ok) t->failed += twin ? 2 : 1;
    if (c.unsettled) return 1; /* run_child said why */
    if (!c.written && results_check_folder(rd)) {
        dps_log("the sweep stops: %s", dps_errmsg());
        return 1;
    }
    if (!c.written) record_death(&it->cfg, twin, be, rd, &c, o);
    t->interrupted = dps_interrupted() != 0;
    return t->interrupted;
}

/* What the sweep says at its end about the configurations it did not run. */
static void sweep_notes(const sweep_tally *t, const results_dir *rd)
{
    if (t->twins) dps_log("%d strong-scaling configuration%s the same run as a weak-scaling "
                          "one (the same global batch on as many devices): each pair ran once, "
                          "its rows written under both ids", t->twins,
                          t->twins == 1 ? " was" : "s were");
    if (t->done_before) dps_log("--resume: %d configuration%s already in %s, not run again",
                                t->done_before, t->done_before == 1 ? "" : "s", rd->dir);
}

void sweep_run(sweep_item *items, int n, backend *be, const results_dir *rd,
               const sweep_opts *o, sweep_tally *t)
{
    *t = (sweep_tally){.first_skipped = -1};
    child_report *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        dps_log("sweep: cannot map shared memory: %s", strerror(errno));
        t->failed = 1;
        return;
    }
    sweep_pair(items, n, o->done);
    sweep_clock k = {0};
    for (int i = 0; i < n; i++) k.total += strcmp(items[i].skip, "-") != 0 && items[i].same_as < 0;
    if (!o->dry_run && !dps_interrupted()) warm_up(items, n, be, o, shared);
    t->interrupted = dps_interrupted() != 0;
    k.t_start = dps_now_ms();
    for (int i = 0; i < n && !t->interrupted; i++) {
        sweep_item *it = &items[i];
        char id[192];
        config_id(&it->cfg, id, sizeof id);
        if (strcmp(it->skip, "-") == 0 || it->same_as >= 0) continue; /* a twin: the earlier's */
        k.idx++;
        if (o->done && results_ids_has(o->done, id)) {
            t->done_before++;
            continue;
        }
        if (it->skip[0]) {
            if (run_record(&it->cfg, NULL, be, rd, DPS_SKIPPED, it->skip))
                dps_log("%s", dps_errmsg());
            if (!t->skipped++) t->first_skipped = i;
            continue;
        }
        if (run_item(items, i, be, rd, o, shared, &k, t)) break;
    }
    sweep_notes(t, rd);
    munmap(shared, sizeof *shared);
}

dps_status sweep_link_latest(const char *out_dir, const char *name)
{
    char link[DPS_PATH_MAX + 16], tmp[DPS_PATH_MAX + 32];
    snprintf(link, sizeof link, "%s/latest", out_dir);
    snprintf(tmp, sizeof tmp, "%s/.latest.%d", out_dir, (int)getpid());
    unlink(tmp);
    if (symlink(name, tmp) != 0 || rename(tmp, link) != 0) {
        unlink(tmp);
        return dps_fail(DPS_ERR_RUNTIME, "%s: cannot point it at %s", link, name);
    }
    return DPS_OK;
}
