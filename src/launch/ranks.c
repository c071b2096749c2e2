/* The rank launcher (see ranks.h): fork, die-with-parent, watchdog, reap. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "build_config.h"
#include "launch/ranks.h"
#include "core/util.h"

#define RANKS_MAX 64

/* LeakSanitizer's check, present when the build has it. */
extern void __lsan_do_leak_check(void) __attribute__((weak));

void ranks_beat_step(rank_beat *b, int step)
{
    atomic_store(&b->beat_us, dps_now_us());
    atomic_store(&b->step, step);
}

void ranks_inject_fault(const rank_fault *f, int rank, int step)
{
    if (!f || f->rank != rank || f->step != step) return;
    if (f->kind == FAULT_EXIT) _exit(3);
    for (;;) pause(); /* FAULT_HANG: until the launcher ends the group */
}

typedef struct group {
    const ranks_spec *spec;
    rank_beat *beat;          /* [nranks], shared with the ranks */
    pid_t pid[RANKS_MAX];
    int alive;
    dps_status status;        /* first failure seen */
    char error[DPS_ERRMSG_MAX];
} group;

/* In the child: die with the parent, leave SIGINT to the parent (which
 * ends the group), run the rank, exit. */
static void rank_process(const group *g, int rank, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    rank_beat *b = &g->beat[rank];
    atomic_store(&b->state, RANK_RUNNING);
    int rc = g->spec->rank_main(g->spec->ctx, rank, b);
    atomic_store(&b->state, rc ? RANK_FAILED : RANK_DONE);
    /* _exit: the libraries' exit handlers (OpenBLAS's thread pool, the CUDA
     * runtime) cost a quarter of a second per rank and do nothing useful
     * here; the leak checker still sees the rank. */
    fflush(NULL);
    if (__lsan_do_leak_check) __lsan_do_leak_check();
    _exit(rc);
}

static void fail(group *g, dps_status st, const char *msg)
{
    if (g->status) return;
    g->status = st;
    dps_strlcpy(g->error, msg, sizeof g->error);
}

/* " (injected by --inject-fault R:S:exit)" when rank r exited as injected at its step. */
static void injected_exit(const group *g, int r, int step, char *buf, size_t len)
{
    const rank_fault *f = g->spec->fault;
    buf[0] = '\0';
    if (f && f->kind == FAULT_EXIT && f->rank == r && f->step == step)
        snprintf(buf, len, " (injected by --inject-fault %d:%d:exit)", r, step);
}

/* For a timeout: " (rank R hangs, injected by ...)" when the injected hang is reached. */
static void injected_hang(const group *g, char *buf, size_t len)
{
    const rank_fault *f = g->spec->fault;
    buf[0] = '\0';
    if (f && f->kind == FAULT_HANG && f->rank < g->spec->nranks &&
        atomic_load(&g->beat[f->rank].step) == f->step)
        snprintf(buf, len, " (rank %d hangs, injected by --inject-fault %d:%d:hang)", f->rank,
                 f->rank, f->step);
}

static void kill_all(group *g)
{
    if (g->spec->abort) g->spec->abort(g->spec->ctx);
    for (int r = 0; r < g->spec->nranks; r++)
        if (g->pid[r] > 0) kill(g->pid[r], SIGKILL);
}

static void describe_exit(group *g, int r, int ws, char *buf, size_t len)
{
    int step = atomic_load(&g->beat[r].step);
    char where[64], note[160] = "";
    if (step < 0) snprintf(where, sizeof where, "during set-up");
    else snprintf(where, sizeof where, "during step %d", step);
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 3) injected_exit(g, r, step, note, sizeof note);
    if (WIFSIGNALED(ws))
        snprintf(buf, len, "rank %d was killed by signal %d (%s) %s%s", r, WTERMSIG(ws),
                 dps_signal_name(WTERMSIG(ws)), where, note);
    else
        snprintf(buf, len, "rank %d exited with status %d %s%s", r, WEXITSTATUS(ws), where, note);
}

/* A rank whose step began more than the timeout ago ends the group. */
static void check_timeout(group *g)
{
    const ranks_spec *s = g->spec;
    if (s->timeout_s <= 0) return;
    int64_t now = dps_now_us(), limit = (int64_t)(s->timeout_s * 1e6);
    int late = -1;
    for (int r = 0; r < s->nranks && late < 0; r++)
        if (atomic_load(&g->beat[r].state) == RANK_RUNNING &&
            now - atomic_load(&g->beat[r].beat_us) > limit)
            late = r;
    if (late < 0) return;
    char more[DPS_ERRMSG_MAX / 2] = "", note[96], msg[DPS_ERRMSG_MAX];
    if (s->explain_timeout) s->explain_timeout(s->ctx, more, sizeof more);
    int step = atomic_load(&g->beat[late].step);
    injected_hang(g, note, sizeof note);
    snprintf(msg, sizeof msg, "%s %d exceeded --timeout %g s%s%s%s",
             step < 0 ? "set-up of rank" : "step", step < 0 ? late : step, s->timeout_s, note,
             more[0] ? "; " : "", more);
    fail(g, DPS_ERR_TIMEOUT, msg);
}

/* Reaps the ranks that have exited; the first unclean one ends the group. */
static void reap(group *g, char *first_exit, size_t len)
{
    for (int r = 0; r < g->spec->nranks; r++) {
        int ws;
        if (g->pid[r] <= 0 || waitpid(g->pid[r], &ws, WNOHANG) != g->pid[r]) continue;
        g->pid[r] = 0;
        g->alive--;
        int clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
        if (!clean && !first_exit[0] && !g->status) describe_exit(g, r, ws, first_exit, len);
        if (!clean) kill_all(g);
    }
}

/* Polls the ranks until all have exited; ends the group on the first failure. */
static void watch(group *g)
{
    char first_exit[DPS_ERRMSG_MAX] = "";
    while (g->alive > 0) {
        reap(g, first_exit, sizeof first_exit);
        if (g->alive == 0) break;
        if (!g->status && dps_interrupted()) {
            char msg[96], where[32] = "in set-up, before step 0";
            int step = atomic_load(&g->beat[0].step);
            if (step >= 0) snprintf(where, sizeof where, "during step %d", step);
            snprintf(msg, sizeof msg, "interrupted by %s %s", dps_signal_name(dps_interrupted()),
                     where);
            fail(g, DPS_ERR_RUNTIME, msg);
        }
        if (!g->status) check_timeout(g);
        if (g->status) kill_all(g);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (g->status) return;
    char msg[DPS_ERRMSG_MAX] = "";
    dps_status st = g->spec->reported ? g->spec->reported(g->spec->ctx, msg, sizeof msg) : DPS_OK;
    if (st) fail(g, st, msg); /* the rank that failed first and said why */
    else if (first_exit[0]) fail(g, DPS_ERR_RUNTIME, first_exit);
}

static void start_ranks(group *g)
{
    pid_t parent = getpid();
    fflush(NULL); /* children must not flush the parent's buffers again */
    for (int r = 0; r < g->spec->nranks; r++) {
        pid_t pid = fork();
        if (pid == 0) rank_process(g, r, parent);
        if (pid < 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "cannot start rank %d: fork: %s", r, strerror(errno));
            fail(g, DPS_ERR_RUNTIME, msg);
            kill_all(g);
            return;
        }
        g->pid[r] = pid;
        g->alive++;
    }
    dps_status rc = g->spec->started ? g->spec->started(g->spec->ctx) : DPS_OK;
    if (rc) {
        char msg[DPS_ERRMSG_MAX];
        dps_strlcpy(msg, dps_errmsg(), sizeof msg);
        fail(g, rc, msg);
        kill_all(g);
    }
}

dps_status ranks_run(const ranks_spec *spec)
{
    if (spec->nranks < 1 || spec->nranks > RANKS_MAX)
        return dps_fail(DPS_ERR_RUNTIME, "ranks: %d ranks requested, 1 to %d supported", spec->nranks,
                        RANKS_MAX);
    size_t bytes = (size_t)spec->nranks * sizeof(rank_beat);
    rank_beat *beat = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (beat == MAP_FAILED)
        return dps_fail(DPS_ERR_RUNTIME, "cannot map %zu bytes of shared memory for the ranks: %s",
                        bytes, strerror(errno));
    for (int r = 0; r < spec->nranks; r++) {
        atomic_store(&beat[r].state, RANK_NEW);
        ranks_beat_step(&beat[r], -1);
    }
    group g = {.spec = spec, .beat = beat};
    start_ranks(&g);
    watch(&g);
    munmap(beat, bytes);
    return g.status ? dps_fail(g.status, "%s", g.error) : DPS_OK;
}
