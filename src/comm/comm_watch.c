/* The watchdog beside a host's device wait (see comm_watch.h). The thread
 * sleeps on a condition variable while the host does not wait, and looks
 * every tick while it does; the host's side is two lock/unlock pairs and one
 * signal per wait. A second SIGINT or SIGTERM (the two-signal rule, err.h)
 * ends a watched wait too, which the host, blocked in the runtime, cannot
 * poll itself. The host's own polling (comm_poll_wait) ends for the same
 * reasons, in the same words. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm_watch.h"
#include "core/nvtx.h"
#include "core/util.h"

struct comm_watch {
    comm_watch_ops ops;
    void *ctx;
    _Atomic int *abort_flag;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* on CLOCK_MONOTONIC */
    int armed, stop, aborted;
    double since_ms, timeout_ms;
    dps_status rc;           /* the first failure seen */
    char why[DPS_ERRMSG_MAX];
};

/* Why a wait `waited_ms` long must end for reasons outside the work (why
 * filled), or DPS_OK: the group's abort, a second signal, the timeout. */
static dps_status outside_reason(_Atomic int *abort_flag, double waited_ms, double timeout_ms,
                                 char *why, size_t len)
{
    if (abort_flag && atomic_load(abort_flag)) {
        snprintf(why, len, "the group was aborted while this process waited "
                 "(another rank failed: its own message says why)");
        return DPS_ERR_RUNTIME;
    }
    if (dps_escalated()) {
        snprintf(why, len, "a second %s ends the running step at once (the steps "
                 "before it are kept)", dps_signal_name(dps_interrupted()));
        return DPS_ERR_RUNTIME;
    }
    if (timeout_ms > 0 && waited_ms > timeout_ms) {
        snprintf(why, len, "not done %.0f ms after the host began to wait, beyond "
                 "--timeout (%.0f ms): a rank is stuck or gone (its own message says which), or "
                 "raise --timeout", waited_ms, timeout_ms);
        return DPS_ERR_TIMEOUT;
    }
    return DPS_OK;
}

/* Why the armed wait must end (why filled), or DPS_OK. With the lock held. */
static dps_status problem(comm_watch *w)
{
    dps_status rc = w->ops.check(w->ctx, w->why, sizeof w->why);
    if (rc) return rc;
    return outside_reason(w->abort_flag, dps_now_ms() - w->since_ms, w->timeout_ms, w->why,
                          sizeof w->why);
}

/* The collectives aborted, once. With the lock held. */
static void abort_locked(comm_watch *w)
{
    if (w->aborted) return;
    w->aborted = 1;
    w->ops.abort(w->ctx);
}

static void wait_tick(comm_watch *w)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(COMM_WATCH_TICK_MS * 1e6);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

static void *watch_main(void *arg)
{
    comm_watch *w = arg;
    nvtx_name_thread("comm-watch");
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        if (w->armed && !w->rc) {
            w->rc = problem(w);
            if (w->rc) abort_locked(w);
        }
        if (w->armed && !w->rc) wait_tick(w);
        else if (!w->stop) pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int init_sync(comm_watch *w)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return 0;
    int ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&w->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (ok && pthread_mutex_init(&w->mu, NULL) == 0) return 1;
    if (ok) pthread_cond_destroy(&w->cv);
    return 0;
}

dps_status comm_watch_start(comm_watch **out, const comm_watch_ops *ops, void *ctx,
                            _Atomic int *abort_flag)
{
    *out = NULL;
    comm_watch *w = calloc(1, sizeof *w);
    if (!w) return dps_fail(DPS_ERR_RUNTIME, "out of host memory for the collectives' watchdog");
    *w = (comm_watch){.ops = *ops, .ctx = ctx, .abort_flag = abort_flag};
    if (!init_sync(w)) {
        free(w);
        return dps_fail(DPS_ERR_RUNTIME, "cannot make the collectives' watchdog's lock");
    }
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return dps_fail(DPS_ERR_RUNTIME, "cannot start the collectives' watchdog thread "
                        "(too many threads? see ulimit -u)");
    }
    *out = w;
    return DPS_OK;
}

void comm_watch_arm(comm_watch *w, double timeout_ms)
{
    pthread_mutex_lock(&w->mu);
    w->armed = 1;
    w->since_ms = dps_now_ms();
    w->timeout_ms = timeout_ms;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

dps_status comm_watch_disarm(comm_watch *w, char *why, size_t len)
{
    pthread_mutex_lock(&w->mu);
    w->armed = 0;
    dps_status rc = w->rc;
    if (rc) dps_strlcpy(why, w->why, len);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void comm_watch_fail(comm_watch *w, dps_status code, const char *why)
{
    pthread_mutex_lock(&w->mu);
    if (!w->rc) {
        w->rc = code;
        dps_strlcpy(w->why, why, sizeof w->why);
    }
    abort_locked(w);
    pthread_mutex_unlock(&w->mu);
}

int comm_watch_aborted(comm_watch *w)
{
    pthread_mutex_lock(&w->mu);
    int aborted = w->aborted;
    pthread_mutex_unlock(&w->mu);
    return aborted;
}

void comm_watch_stop(comm_watch *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static double real_now_ms(void *ctx)
{
    (void)ctx;
    return dps_now_ms();
}

static void real_sleep_ms(void *ctx, double ms)
{
    (void)ctx;
    if (ms <= 0) {
        sched_yield();
        return;
    }
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    nanosleep(&ts, NULL);
}

double comm_poll_pause_ms(double waited_ms)
{
    if (waited_ms < 0.1) return 0.0;
    return fmin(COMM_WATCH_TICK_MS, waited_ms / 4);
}

dps_status comm_poll_wait(const comm_poll_ops *ops, void *ctx, const comm_poll_spec *spec)
{
    double (*now)(void *) = ops->now_ms ? ops->now_ms : real_now_ms;
    void (*pause)(void *, double) = ops->sleep_ms ? ops->sleep_ms : real_sleep_ms;
    char why[DPS_ERRMSG_MAX];
    dps_status rc = DPS_OK;
    double t0 = now(ctx);
    for (;;) {
        comm_poll_state st = ops->poll(ctx, why, sizeof why);
        if (st == COMM_POLL_DONE) return DPS_OK;
        if (st == COMM_POLL_FAILED) {
            rc = DPS_ERR_RUNTIME;
            break;
        }
        double waited = now(ctx) - t0;
        if ((rc = outside_reason(spec->abort_flag, waited, spec->timeout_ms, why, sizeof why)))
            break;
        pause(ctx, comm_poll_pause_ms(waited));
    }
    ops->abort(ctx, rc, why);
    return dps_fail(rc, "%s: %s did not complete: %s; %s", spec->who, spec->what, why,
                    spec->aborted);
}
