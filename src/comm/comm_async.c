/* Async collectives for implementations whose collectives block the caller
 * (the shared-memory ring, Gloo): a thread per comm runs them in issue order,
 * each once its gradients' event has completed, as the communication
 * stream does on a GPU. After a failure it skips the rest of the queue. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "core/nvtx.h"
#include "core/util.h"

typedef struct async_item {
    comm_op op;
    void *buf;
    size_t n;
    comm_dtype dt;
    be_event *after;
    double ms;               /* how long it ran, once done */
} async_item;

struct comm_async {
    comm *c;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    async_item *queue;
    int cap, queued, done, stop;
    int reported;            /* items whose times a wait has handed on, this step */
    /* traced (c->trace): item k's begin event, recorded on the thread's
     * stream; the thread alone touches them until the wait reads them */
    be_stream *stream;
    be_event **ev;
    int nev;
    dps_status rc;           /* the first failure */
    char err[DPS_ERRMSG_MAX];
};

/* Item index's begin event (made on first use) recorded now, when traced,
 * and waited for: the stream holds nothing else, so it completes at once on
 * a GPU, and the wait that reads it may then take its time (event_ms of an
 * event not yet reached fails, cudaErrorNotReady). */
static dps_status mark_begin(comm_async *a, int index)
{
    comm *c = a->c;
    const be_ops *o = c->be->ops;
    if (!c->trace || !c->trace->ref) return DPS_OK;
    if (!a->stream) DPS_TRY(o->stream_create(c->be, c->dev, &a->stream));
    if (index >= a->nev) {
        int n = 2 * index + 8;
        be_event **ev = realloc(a->ev, (size_t)n * sizeof *ev);
        if (!ev) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", c->rank);
        a->ev = ev;
        for (; a->nev < n; a->nev++) a->ev[a->nev] = NULL;
    }
    if (!a->ev[index]) DPS_TRY(o->event_create(c->be, c->dev, &a->ev[index]));
    DPS_TRY(o->event_record(c->be, a->ev[index], a->stream));
    return o->event_sync(c->be, a->ev[index]);
}

static dps_status run_item(comm_async *a, const async_item *it, int index)
{
    comm *c = a->c;
    DPS_TRY(c->be->ops->event_sync(c->be, it->after));
    DPS_TRY(mark_begin(a, index));
    nvtx_push_bucket(index, it->n * comm_dtype_bytes(it->dt));
    double t0 = dps_now_ms();
    dps_status rc = comm_blocking(c, it->op)(c, it->buf, it->n, it->dt);
    double busy = dps_now_ms() - t0;
    nvtx_pop();
    pthread_mutex_lock(&a->mu);
    a->queue[index].ms = busy;
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static void *async_main(void *arg)
{
    comm_async *a = arg;
    char name[32];
    snprintf(name, sizeof name, "comm-rank-%d", a->c->rank);
    nvtx_name_thread(name);
    dps_status bound = a->c->be->ops->set_device(a->c->be, a->c->dev);
    pthread_mutex_lock(&a->mu);
    if (bound) {
        a->rc = bound;
        dps_strlcpy(a->err, dps_errmsg(), sizeof a->err);
    }
    for (;;) {
        while (!a->stop && a->done == a->queued) pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop) break;
        async_item it = a->queue[a->done];
        int skip = a->rc != DPS_OK, index = a->done;
        pthread_mutex_unlock(&a->mu);
        dps_status rc = skip ? DPS_OK : run_item(a, &it, index);
        pthread_mutex_lock(&a->mu);
        if (rc && !a->rc) {
            a->rc = rc;
            dps_strlcpy(a->err, dps_errmsg(), sizeof a->err);
        }
        a->done++;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static dps_status async_start(comm *c)
{
    comm_async *a = calloc(1, sizeof *a);
    if (!a) return dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", c->rank);
    a->c = c;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, async_main, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a);
        return dps_fail(DPS_ERR_RUNTIME, "rank %d: cannot start the communication thread", c->rank);
    }
    c->async = a;
    return DPS_OK;
}

/* Room for one more item; called with the lock held. */
static int grow(comm_async *a)
{
    if (a->queued < a->cap) return 1;
    int cap = a->cap ? 2 * a->cap : 64;
    async_item *q = realloc(a->queue, (size_t)cap * sizeof *q);
    if (!q) return 0;
    a->queue = q;
    a->cap = cap;
    return 1;
}

dps_status comm_async_push(comm *c, comm_op op, void *buf, size_t n, comm_dtype dt,
                           be_event *after)
{
    if (!c->async) DPS_TRY(async_start(c));
    comm_async *a = c->async;
    pthread_mutex_lock(&a->mu);
    int ok = grow(a);
    if (ok) {
        a->queue[a->queued++] = (async_item){op, buf, n, dt, after, 0.0};
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return ok ? DPS_OK : dps_fail(DPS_ERR_RUNTIME, "rank %d: out of host memory", c->rank);
}

dps_status comm_async_wait(comm *c, double *busy_ms)
{
    comm_async *a = c->async;
    if (!a) return DPS_OK;
    pthread_mutex_lock(&a->mu);
    while (a->done < a->queued) pthread_cond_wait(&a->cv, &a->mu);
    dps_status rc = a->rc;
    for (int k = a->reported; k < a->queued; k++) { /* the thread waits: these are ours */
        *busy_ms += a->queue[k].ms;
        if (!rc)
            comm_span_add(c, k < a->nev ? a->ev[k] : NULL, a->queue[k].ms,
                          a->queue[k].n * comm_dtype_bytes(a->queue[k].dt), a->queue[k].op);
    }
    a->reported = a->queued;
    pthread_mutex_unlock(&a->mu);
    return rc ? dps_fail_copy(rc, a->err) : DPS_OK;
}

dps_status comm_async_wait_ticket(comm *c, int ticket)
{
    comm_async *a = c->async;
    if (!a) return DPS_OK;
    pthread_mutex_lock(&a->mu);
    while (a->done <= ticket && a->done < a->queued && !a->rc) pthread_cond_wait(&a->cv, &a->mu);
    dps_status rc = a->rc;
    pthread_mutex_unlock(&a->mu);
    return rc ? dps_fail_copy(rc, a->err) : DPS_OK;
}

void comm_async_step_end(comm *c)
{
    comm_async *a = c->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    if (a->done == a->queued) a->queued = a->done = a->reported = 0; /* else a failed wait's */
    pthread_mutex_unlock(&a->mu);
}

void comm_async_stop(comm *c)
{
    comm_async *a = c->async;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    for (int k = 0; k < a->nev; k++)
        if (a->ev[k]) c->be->ops->event_destroy(c->be, a->ev[k]);
    if (a->stream) c->be->ops->stream_destroy(c->be, a->stream);
    free(a->ev);
    free(a->queue);
    free(a);
    c->async = NULL;
}
